#!/usr/bin/env bash
#  scenario.sh: what the scenario tests of tests/netns/ share (source it
#  after setting BED_* variables): the bed, the real programs of the build,
#  and bounded waits on what a broker lists. Every figure a test measures is
#  printed on a line starting "FIGURE:", every failed assertion on one
#  starting "FAIL:".

set -euo pipefail
SC_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$SC_HERE/netbed.sh"

SC_BUILD=${DSH_BUILD_DIR:-build}
SC_BROKER_BIN=$SC_BUILD/broker/dsh-broker
SC_DEMO_BIN=$SC_BUILD/components/demo/dsh-demo
SC_DSH_BIN=$SC_BUILD/components/cli/dsh
SC_PORT=7570
SC_FAILED=0
SC_PID=""
SC_LOG=""          #  the log of the last program started
SC_WAITED_MS=0
#  The broker's defaults: the targets are stated in heartbeat intervals
SC_HEARTBEAT_MS=${SC_HEARTBEAT_MS:-1000}
SC_LIVENESS=${SC_LIVENESS:-3}

sc_start () {
    bed_require
    local program
    for program in "$SC_BROKER_BIN" "$SC_DEMO_BIN" "$SC_DSH_BIN"; do
        if [ ! -x "$program" ]; then
            echo "FAIL: $program is not built (set DSH_BUILD_DIR)"
            exit 1
        fi
    done
    bed_up
    bed_ready
}

sc_fail () {
    echo "FAIL: $*"
    SC_FAILED=1
}

#  Ends the test now: the rest depends on what just failed.
sc_abort () {
    echo "FAIL: $*"
    [ "${BED_KEEP_LOGS:-0}" = 1 ] || echo "(BED_KEEP_LOGS=1 keeps the programs' logs)"
    exit 1
}

sc_finish () {
    if [ "$SC_FAILED" = 0 ]; then
        echo "PASS"
    elif [ "${BED_KEEP_LOGS:-0}" != 1 ]; then
        echo "(BED_KEEP_LOGS=1 keeps the programs' logs)"
    fi
    exit "$SC_FAILED"
}

sc_endpoint () { echo "tcp://$(bed_addr "$1"):$SC_PORT"; }

#  A broker on HOST (on the address in SC_BIND if set: the floating one);
#  sets SC_PID and SC_LOG.
sc_broker () {
    local host=$1; shift
    local address=${SC_BIND:-$(bed_addr "$host")}
    SC_LOG="$BED_DIR/broker-$host-$(bed_now_ms).log"
    bed_spawn "$host" "$SC_LOG" "$SC_BROKER_BIN" --endpoint "tcp://$address:$SC_PORT" \
        --insecure --heartbeat-ms "$SC_HEARTBEAT_MS" --liveness "$SC_LIVENESS" -v "$@"
    SC_PID=$BED_PID
}

#  dsh-demo on HOST with id ID, following BROKERS (an endpoint list); sets
#  SC_PID and SC_LOG.
sc_demo () {
    local host=$1 id=$2 brokers=$3; shift 3
    SC_LOG="$BED_DIR/demo-$id-$host-$(bed_now_ms).log"
    bed_spawn "$host" "$SC_LOG" "$SC_DEMO_BIN" --broker "$brokers" --id "$id" -v "$@"
    SC_PID=$BED_PID
}

#  The CLI on HOST, bounded.
sc_dsh () {
    local host=$1; shift
    bed_run "$host" timeout 20 "$SC_DSH_BIN" "$@"
}

#  True when the broker at ENDPOINT lists component ID as a provider of
#  TOOL (asked from HOST).
sc_serves () {
    local host=$1 endpoint=$2 tool=$3 id=$4
    sc_dsh "$host" --broker "$endpoint" --timeout-ms 1000 get "$tool" 2>/dev/null | grep -q "\"$id\""
}

#  Waits up to SECONDS for sc_serves; sets SC_WAITED_MS.
sc_wait_serves () {
    local host=$1 endpoint=$2 tool=$3 id=$4 seconds=$5
    local start deadline
    start=$(bed_now_ms)
    deadline=$((start + seconds * 1000))
    while ! sc_serves "$host" "$endpoint" "$tool" "$id"; do
        if [ "$(bed_now_ms)" -ge "$deadline" ]; then
            SC_WAITED_MS=$(($(bed_now_ms) - start))
            return 1
        fi
        sleep 0.1
    done
    SC_WAITED_MS=$(($(bed_now_ms) - start))
}

#  Waits up to SECONDS for the broker to stop listing ID for TOOL.
sc_wait_gone () {
    local host=$1 endpoint=$2 tool=$3 id=$4 seconds=$5
    local start deadline
    start=$(bed_now_ms)
    deadline=$((start + seconds * 1000))
    while sc_serves "$host" "$endpoint" "$tool" "$id"; do
        if [ "$(bed_now_ms)" -ge "$deadline" ]; then
            SC_WAITED_MS=$(($(bed_now_ms) - start))
            return 1
        fi
        sleep 0.2
    done
    SC_WAITED_MS=$(($(bed_now_ms) - start))
}

#  Kills one process we started, and waits for it (bounded).
sc_kill () {
    local signal=$1 pid=$2 tries=50
    kill "-$signal" "$pid" 2>/dev/null || return 0
    while kill -0 "$pid" 2>/dev/null && [ $tries -gt 0 ]; do
        sleep 0.1
        tries=$((tries - 1))
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

#  Percentile P (0-100) of the numbers in FILE, one a line.
sc_percentile () {
    sort -n "$2" | awk -v p="$1" '{ v[NR] = $1 } END { if (NR == 0) { print -1; exit }
        i = int((p / 100) * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR; print v[i] }'
}
