#!/usr/bin/env bash
#  Scenario (h), issue 12's "standby behind a floating address": the broker
#  listens on the floating address BED_FLOAT on the broker host; the demo
#  component (tool host) and a `dsh watch` (agent host) know only that
#  address. The broker host drops off the network (no close reaches
#  anyone), the address moves to the standby host, and a standby broker is
#  started there. Target (issue 12): the component re-registers at the
#  standby, and the watcher shows it, within the liveness window (asserted
#  with slack), without restarting anything.
source "$(dirname "$0")/scenario.sh"
bound_ms=$((SC_HEARTBEAT_MS * SC_LIVENESS + 2 * SC_HEARTBEAT_MS + 3000))
sc_start
bed_float_add broker
float="tcp://$BED_FLOAT:$SC_PORT"
SC_BIND=$BED_FLOAT sc_broker broker
sc_demo tool demoT "$float"
sc_wait_serves agent "$float" echo demoT 15 || sc_abort "demoT never registered at the floating address"
watch_out="$BED_DIR/watch.out"
bed_spawn agent "$watch_out" "$SC_DSH_BIN" --broker "$float" watch
sleep 1

bed_cut broker
bed_float_move broker standby
SC_BIND=$BED_FLOAT sc_broker standby
moved_at=$(bed_now_ms)
epoch=""
for _ in $(seq 50); do
    epoch=$(sc_dsh agent --broker "$float" --timeout-ms 1000 watch --count 0 2>/dev/null \
        | head -n 1 | grep -o '"epoch":[0-9]*' | head -n 1 | cut -d: -f2 || true)
    [ -n "$epoch" ] && break
    sleep 0.1
done
[ -n "$epoch" ] || sc_abort "the standby broker on the moved address does not answer"
echo "FIGURE: floating address: the standby answered $(( $(bed_now_ms) - moved_at )) ms after the move"
if sc_wait_serves agent "$float" echo demoT 30; then
    took=$(( $(bed_now_ms) - moved_at ))
    echo "FIGURE: floating address: the component registered at the standby ${took} ms after the move (bound ${bound_ms} ms)"
    [ "$took" -le "$bound_ms" ] || sc_fail "the component took ${took} ms to register at the standby"
else
    echo "FIGURE: floating address: the component had not registered at the standby after $(( $(bed_now_ms) - moved_at )) ms"
    sc_fail "the component never registered at the standby"
fi
deadline=$(( $(bed_now_ms) + 10000 ))
seen=0
while [ "$(bed_now_ms)" -lt "$deadline" ]; do
    if grep "\"epoch\":$epoch[,}]" "$watch_out" | grep -q '"demoT"'; then
        seen=1
        break
    fi
    sleep 0.1
done
[ $seen = 1 ] && echo "FIGURE: floating address: the old dsh watch resynced with the standby $(( $(bed_now_ms) - moved_at )) ms after the move" \
    || sc_fail "the old dsh watch never showed the standby's view (epoch $epoch) with demoT"
sc_finish
