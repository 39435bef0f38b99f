#!/usr/bin/env bash
#  Scenario (e): 50 broker restarts under a running `dsh watch` (on the
#  agent host) and a demo component (on the tool host). After each restart
#  (SIGTERM and SIGKILL in turn) the watcher must have resynchronised: it
#  printed a notice of the new broker's epoch that names the component.
#  Target (issue 12): 100 % of restarts. DSH_NETNS_CYCLES overrides 50.
source "$(dirname "$0")/scenario.sh"
cycles=${DSH_NETNS_CYCLES:-50}
#  A faster heartbeat keeps 50 cycles inside the suite's time budget
SC_HEARTBEAT_MS=500
sc_start
broker=$(sc_endpoint broker)
sc_broker broker
broker_pid=$SC_PID
sc_demo tool demoT "$broker"
sc_wait_serves agent "$broker" echo demoT 15 || sc_abort "demoT never registered"
watch_out="$BED_DIR/watch.out"
bed_spawn agent "$watch_out" "$SC_DSH_BIN" --broker "$broker" watch
watch_pid=$BED_PID

#  The epoch of the broker now running, from a snapshot of its own.
current_epoch () {
    sc_dsh agent --broker "$broker" --timeout-ms 3000 watch --count 0 2>/dev/null \
        | head -n 1 | grep -o '"epoch":[0-9]*' | head -n 1 | cut -d: -f2
}

resynced=0
back_total=0
started=$(bed_now_ms)
missed=()
slowest=0
for cycle in $(seq "$cycles"); do
    signal=TERM
    [ $((cycle % 2)) = 0 ] && signal=KILL
    sc_kill "$signal" "$broker_pid"
    sc_broker broker
    broker_pid=$SC_PID
    sc_wait_serves agent "$broker" echo demoT 20 || sc_abort "cycle $cycle: demoT never came back to the restarted broker"
    back_total=$((back_total + SC_WAITED_MS))
    epoch=$(current_epoch)
    [ -n "$epoch" ] || sc_abort "cycle $cycle: no snapshot from the restarted broker"
    start=$(bed_now_ms)
    deadline=$((start + 5000))
    seen=0
    while [ "$(bed_now_ms)" -lt "$deadline" ]; do
        if grep "\"epoch\":$epoch[,}]" "$watch_out" | grep -q '"demoT"'; then
            seen=1
            break
        fi
        sleep 0.1
    done
    if [ $seen = 1 ]; then
        resynced=$((resynced + 1))
        took=$(( $(bed_now_ms) - start ))
        [ $took -gt $slowest ] && slowest=$took
    else
        missed+=("$cycle/$signal")
    fi
    kill -0 "$watch_pid" 2>/dev/null || sc_abort "cycle $cycle: dsh watch exited ($(tail -n 2 "$watch_out" | cut -c1-200))"
done
echo "FIGURE: watcher resynced after $resynced of $cycles broker restarts (slowest ${slowest} ms after the component was back)"
echo "FIGURE: restarts: the component was back $((back_total / cycles)) ms after a restart on average; $(( ($(bed_now_ms) - started) / cycles )) ms a cycle"
[ "$resynced" = "$cycles" ] || sc_fail "the watcher missed restarts: ${missed[*]}"
sc_finish
