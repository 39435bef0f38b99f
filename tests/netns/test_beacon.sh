#!/usr/bin/env bash
#  Scenario (f): discovery by UDP beacon. A broker on the broker host
#  beacons; the demo component on the tool host and the CLI on the agent
#  host are given only "--broker beacon" and must find it: the component
#  registers (asked of the broker by address), and a call through the CLI
#  is answered. Skips (77) when
#  the programs of this build do not know beacons yet.
source "$(dirname "$0")/scenario.sh"
beacon_flag=$("$SC_BROKER_BIN" --help 2>&1 | grep -o -- '--beacon[a-z-]*' | head -n 1 || true)
if [ -z "$beacon_flag" ]; then
    echo "SKIP: dsh-broker --help names no --beacon flag: this build has no beacon discovery"
    exit 77
fi
if "$SC_DSH_BIN" --broker beacon --timeout-ms 500 ping 2>&1 | grep -qi "beacon.*not supported\|unsupported\|invalid broker"; then
    echo "SKIP: the SDK does not resolve --broker beacon in this build"
    exit 77
fi
sc_start
sc_broker broker "$beacon_flag"
started=$(bed_now_ms)
sc_demo tool demoT beacon
#  The component's part, asked of the broker by its address
if sc_wait_serves agent "$(sc_endpoint broker)" echo demoT 30; then
    echo "FIGURE: beacon: the component (--broker beacon) registered $(( $(bed_now_ms) - started )) ms after it started"
else
    sc_fail "beacon: the component (--broker beacon) had not registered after 30 s: $(tail -n 2 "$SC_LOG" | tr '\n' ' ')"
fi
#  The CLI's part: a client given only "beacon"
out=$(sc_dsh agent --broker beacon --timeout-ms 10000 call echo '{"message":"found"}' 2>&1 || true)
if echo "$out" | grep -q '"found"'; then
    echo "FIGURE: beacon: dsh --broker beacon call echo answered"
else
    sc_fail "beacon: dsh --broker beacon call failed: $(echo "$out" | head -n 3 | tr '\n' ' ')"
fi
sc_finish
