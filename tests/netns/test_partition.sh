#!/usr/bin/env bash
#  Scenario (a): the tool host's cable is pulled for 10 s (30 and 60 s too
#  with DSH_NETNS_LONG=1), then plugged back. Measures the time from the
#  plug to the tool host's tools being listed by the broker again. Target
#  (issue 12): within 2 s plus 2 heartbeat intervals, whatever the length
#  of the partition; asserted with 3 s of slack on top.
source "$(dirname "$0")/scenario.sh"
#  DSH_NETNS_PARTITIONS="S ..." sets the lengths by hand
partitions=(10)
[ "${DSH_NETNS_LONG:-0}" = 1 ] && partitions=(10 30 60)
[ -n "${DSH_NETNS_PARTITIONS:-}" ] && read -r -a partitions <<< "$DSH_NETNS_PARTITIONS"
bound_ms=$((2000 + 2 * SC_HEARTBEAT_MS + 3000))
sc_start
broker=$(sc_endpoint broker)
sc_broker broker
sc_demo tool demoT "$broker"
sc_wait_serves agent "$broker" echo demoT 15 || sc_abort "demoT never registered at the broker"

for seconds in "${partitions[@]}"; do
    bed_cut tool
    cut_at=$(bed_now_ms)
    if sc_wait_gone agent "$broker" echo demoT "$seconds"; then
        echo "the broker expired demoT $(( $(bed_now_ms) - cut_at )) ms into the partition"
    fi
    remaining=$((cut_at + seconds * 1000 - $(bed_now_ms)))
    [ $remaining -gt 0 ] && sleep "$(awk -v ms=$remaining 'BEGIN { printf "%.3f", ms / 1000 }')"
    bed_heal tool
    if sc_wait_serves agent "$broker" echo demoT 90; then
        echo "FIGURE: partition ${seconds} s: tools back ${SC_WAITED_MS} ms after the link returned (bound ${bound_ms} ms)"
        [ "$SC_WAITED_MS" -le "$bound_ms" ] \
            || sc_fail "partition ${seconds} s: tools back after ${SC_WAITED_MS} ms, over the bound of ${bound_ms} ms"
    else
        echo "FIGURE: partition ${seconds} s: tools not back ${SC_WAITED_MS} ms after the link returned"
        sc_abort "partition ${seconds} s: tools never came back"
    fi
done
sc_finish
