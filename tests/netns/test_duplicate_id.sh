#!/usr/bin/env bash
#  Scenario (d): a second component announces the id of a live one from
#  another host. The duplicate (dsh-demo --prefix dup_, so its tools can be
#  told apart) must be refused: its tools are never listed, and the
#  original keeps serving every call: a watcher sees no event of the
#  duplicate's tools and no unregistration of the original's, and calls
#  meant for the original reach it. When the duplicate exits, the
#  original is still served (target, issue 12: routable again within the
#  liveness window; asserted with slack).
source "$(dirname "$0")/scenario.sh"
BED_HOSTS="tool2"
back_bound_ms=$((SC_HEARTBEAT_MS * SC_LIVENESS + 5000))
sc_start
broker=$(sc_endpoint broker)
sc_broker broker
sc_demo tool demoT "$broker"
sc_wait_serves agent "$broker" echo demoT 15 || sc_abort "demoT never registered"

#  N echo calls from the agent host; prints how many succeeded.
calls_ok () {
    local n=$1 ok=0 i
    for i in $(seq "$n"); do
        sc_dsh agent --broker "$broker" --timeout-ms 5000 call echo "{\"message\":\"m$i\"}" 2>/dev/null \
            | grep -q "\"m$i\"" && ok=$((ok + 1))
    done
    echo "$ok"
}

watch_out="$BED_DIR/watch.out"
bed_spawn agent "$watch_out" "$SC_DSH_BIN" --broker "$broker" watch
sleep 1
sc_demo tool2 demoT "$broker" --prefix dup_
dup_pid=$SC_PID
dup_log=$SC_LOG
sleep 3
ok=$(calls_ok 10)
sleep 1
flaps=$(grep -c '"kind":"tool.unregistered"' "$watch_out" || true)
dup_events=$(grep -c '"name":"dup_' "$watch_out" || true)
echo "FIGURE: duplicate id live: $dup_events events of the duplicate's tools, $flaps unregistrations of the original's"
[ "$dup_events" = 0 ] || sc_fail "the duplicate's tools were registered ($dup_events events): it was not refused"
[ "$flaps" = 0 ] || sc_fail "the original's tools were unregistered $flaps times while the duplicate ran"
echo "FIGURE: duplicate id live: $ok of 10 calls meant for the original were served by it"
[ "$ok" = 10 ] || sc_fail "with a duplicate running, only $ok of 10 calls reached the original"
if grep -qi "refused" "$dup_log"; then
    echo "the duplicate was told: $(grep -i -m1 refused "$dup_log")"
else
    sc_fail "the duplicate's log says nothing about a refusal"
fi

sc_kill TERM "$dup_pid"
gone_at=$(bed_now_ms)
start=$(bed_now_ms)
deadline=$((start + 30000))
back_ms=-1
while [ "$(bed_now_ms)" -lt "$deadline" ]; do
    if sc_dsh agent --broker "$broker" --timeout-ms 2000 call echo '{"message":"back"}' 2>/dev/null | grep -q '"back"'; then
        back_ms=$(( $(bed_now_ms) - gone_at ))
        break
    fi
    sleep 0.2
done
echo "FIGURE: duplicate id: the original served again ${back_ms} ms after the duplicate exited (bound ${back_bound_ms} ms; -1 = not in 30 s)"
[ "$back_ms" -ge 0 ] || sc_fail "the original was not served in 30 s after the duplicate exited"
[ "$back_ms" -le "$back_bound_ms" ] || sc_fail "the original was served again only after ${back_ms} ms"
ok=$(calls_ok 10)
echo "FIGURE: duplicate id gone: $ok of 10 calls served by the original"
[ "$ok" = 10 ] || sc_fail "after the duplicate exited, only $ok of 10 calls were served"
sc_finish
