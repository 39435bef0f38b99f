#!/usr/bin/env bash
#  Scenario (f): discovery by UDP beacon. A broker on the broker host
#  beacons; the demo component on the tool host and the CLI on the agent
#  host are given only "--broker beacon" and must find it. Skips (77) when
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
if sc_wait_serves agent beacon echo demoT 30; then
    echo "FIGURE: beacon: the component found the broker and the CLI listed its tools $(( $(bed_now_ms) - started )) ms after both started"
else
    sc_fail "beacon: demoT not listed through --broker beacon within 30 s"
    sc_serves agent "$(sc_endpoint broker)" echo demoT \
        && echo "(the broker lists demoT when asked by address: the CLI did not find it by beacon)" \
        || echo "(the broker does not list demoT by address either: the component did not find it)"
fi
out=$(sc_dsh agent --broker beacon --timeout-ms 10000 call echo '{"message":"found"}' 2>&1 || true)
echo "$out" | grep -q '"found"' || sc_fail "beacon: a call through --broker beacon failed: $(echo "$out" | head -n 3)"
sc_finish
