#!/usr/bin/env bash
#  Scenario (b): a call is in flight (sleep_ms on the tool host, called from
#  the agent host) when its broker is lost: first the broker process is
#  killed (-9), then, with a new broker, the broker's host drops off the
#  network (no close ever reaches anyone). Either way the caller must get
#  BROKER_GONE within the liveness window, not at its deadline. Target
#  (issue 12): within the liveness window; asserted as that window plus
#  5 s of slack, far below the call's 25 s deadline.
source "$(dirname "$0")/scenario.sh"
bound_ms=$((SC_HEARTBEAT_MS * SC_LIVENESS + 5000))
sc_start
broker=$(sc_endpoint broker)

#  Starts a 20 s call from the agent host, loses the broker by LOSE (a
#  command), and checks how and when the call ended.
in_flight_case () {
    local label=$1 lose=$2
    sc_broker broker
    local broker_pid=$SC_PID
    sc_demo tool "demo-$label" "$broker"
    local demo_pid=$SC_PID
    sc_wait_serves agent "$broker" sleep_ms "demo-$label" 15 || sc_abort "$label: the demo never registered"
    local out="$BED_DIR/call-$label.out"
    bed_run agent timeout 60 "$SC_DSH_BIN" --broker "$broker" call sleep_ms '{"ms":20000}' --timeout-ms 25000 \
        >"$out" 2>&1 &
    local call_pid=$!
    sleep 1.5
    $lose "$broker_pid"
    local lost_at
    lost_at=$(bed_now_ms)
    local status=0
    wait "$call_pid" || status=$?
    local took=$(( $(bed_now_ms) - lost_at ))
    echo "FIGURE: broker $label with a call in flight: the call ended ${took} ms later, exit $status, saying: $(tr '\n' ' ' < "$out" | cut -c1-200)"
    grep -q BROKER_GONE "$out" || sc_fail "$label: the call did not end with BROKER_GONE (exit $status)"
    [ "$took" -le "$bound_ms" ] || sc_fail "$label: the call ended ${took} ms after the broker was lost (bound ${bound_ms} ms)"
    sc_kill TERM "$demo_pid"
    sc_kill KILL "$broker_pid"
    bed_heal broker
}

kill_broker () { kill -KILL "$1"; }
drop_broker_host () { bed_cut broker; }

in_flight_case killed kill_broker
in_flight_case host-dropped drop_broker_host
sc_finish
