#!/usr/bin/env bash
#  The dsh-netem relay alone: frames pass, loss is near its setting over many
#  frames, delay is applied, and "cut" drops everything. Bounds are wide; the
#  figures are printed. Forces the relay even where sch_netem exists.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/netbed.sh"
bed_require
BED_IMPAIR_HOSTS="agent" BED_FORCE_RELAY=1
bed_up
bed_ready
probe="$here/udp_probe.py"
tool=$(bed_addr tool)

#  Sends COUNT datagrams from agent (behind the relay) to an echo on tool.
#  Each round has its own port (the first argument): the last round's echo
#  may not be gone yet. Runs in a $(...) subshell, so the echo is killed here.
probe_round () {
    local port=$1 count=$2 gap_ms=$3
    bed_spawn tool "$BED_DIR/echo-$port.log" python3 "$probe" echo "$tool" "$port" 60
    sleep 0.5
    bed_run agent python3 "$probe" send "$tool" "$port" "$count" "$gap_ms"
    kill "$BED_PID" 2>/dev/null || true
}
field () { echo "$1" | awk -v key="$2" '{for (i = 1; i < NF; i++) if ($i == key) print $(i + 1)}'; }

fail=0
result=$(probe_round 9001 200 2)
echo "clean: $result"
received=$(field "$result" received)
if [ "$received" -ne 200 ]; then echo "FAIL: clean link lost frames: $result"; fail=1; fi

bed_impair agent 0 20
result=$(probe_round 9002 1000 1)
received=$(field "$result" received)
#  20 % each way: 64 % of round trips survive
echo "FIGURE: relay loss 20% each way: $received of 1000 round trips came back (expected about 640)"
if [ "$received" -lt 500 ] || [ "$received" -gt 780 ]; then echo "FAIL: loss far from its setting"; fail=1; fi

bed_impair agent 100 0
result=$(probe_round 9003 50 20)
median=$(field "$result" median_rtt_ms)
echo "FIGURE: relay delay 100 ms each way: median round trip $median ms"
if ! awk -v m="$median" 'BEGIN { exit !(m >= 190 && m < 1500) }'; then echo "FAIL: delay not applied"; fail=1; fi

#  The whole file at once: two SIGHUPs close together may be read as one
printf 'delay_ms 0\nloss_pct 0\ncut 1\n' > "$BED_DIR/netem-agent.ctl"
kill -HUP "${BED_RELAY_PIDS[agent]}"
result=$(probe_round 9004 20 10)
received=$(field "$result" received)
echo "cut: $result"
if [ "$received" -ne 0 ]; then echo "FAIL: frames crossed a cut relay"; fail=1; fi

printf 'cut 0\n' > "$BED_DIR/netem-agent.ctl"
kill -HUP "${BED_RELAY_PIDS[agent]}"
result=$(probe_round 9005 50 2)
received=$(field "$result" received)
echo "healed: $result"
if [ "$received" -ne 50 ]; then echo "FAIL: frames lost after healing the relay"; fail=1; fi
median=$(field "$result" median_rtt_ms)
if ! awk -v m="$median" 'BEGIN { exit !(m < 100) }'; then echo "FAIL: delay still applied after it was set to 0"; fail=1; fi
exit $fail
