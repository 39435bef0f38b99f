#!/bin/sh
#   beacon_netns - brokers found by UDP beacon between two hosts
#
#   Loopback carries no broadcast (zbeacon skips it), so this builds two
#   network namespaces joined by a veth pair, 10.213.0.1 (the broker host)
#   and 10.213.0.2 (a new machine that knows no address). On the new
#   machine: `dsh brokers` hears the broker, a port nobody beacons on is
#   silence (exit 3), and dsh-demo started with --broker beacon:PORT
#   registers its tools on the broker; a CURVE broker's beacon says so, a
#   component without keys is told why it cannot use it, one with keys
#   registers. Needs root and `ip netns`: exits 77
#   (skipped) without them. Self-contained, so it can move onto the
#   multi-host bed of tests/netns.
set -u
BUILD=${DSH_BUILD_DIR:-build}
BROKER_HOST=dshbeacon-a$$
NEW_HOST=dshbeacon-b$$
WAIT=20     # seconds any one step may take

[ "$(id -u)" = 0 ] || { echo "beacon_netns: needs root, skipped"; exit 77; }
ip netns add "$BROKER_HOST" 2>/dev/null || { echo "beacon_netns: ip netns does not work here, skipped"; exit 77; }

PIDS=""
WORK=$(mktemp -d)
cleanup () {
    for pid in $PIDS; do kill "$pid" 2>/dev/null; done
    for pid in $PIDS; do wait "$pid" 2>/dev/null; done
    ip netns del "$BROKER_HOST" 2>/dev/null
    ip netns del "$NEW_HOST" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
#   A signal (meson's timeout, a closed pipe) exits through cleanup too
trap 'exit 1' HUP INT PIPE TERM
fail () {
    echo "beacon_netns: FAIL: $*"
    for log in "$WORK"/*.log; do [ -f "$log" ] && { echo "--- $log"; cat "$log"; }; done
    exit 1
}

ip netns add "$NEW_HOST" || fail "cannot add a second namespace"
ip link add "vbeacon$$" type veth peer name "vbeaconp$$" || fail "cannot make a veth pair"
ip link set "vbeacon$$" netns "$BROKER_HOST"
ip link set "vbeaconp$$" netns "$NEW_HOST"
ip -n "$BROKER_HOST" addr add 10.213.0.1/24 broadcast + dev "vbeacon$$"
ip -n "$NEW_HOST" addr add 10.213.0.2/24 broadcast + dev "vbeaconp$$"
for ns in "$BROKER_HOST" "$NEW_HOST"; do
    ip -n "$ns" link set lo up
done
ip -n "$BROKER_HOST" link set "vbeacon$$" up
ip -n "$NEW_HOST" link set "vbeaconp$$" up

#   The broker listens on every address and beacons (every second)
ip netns exec "$BROKER_HOST" "$BUILD/broker/dsh-broker" -e 'tcp://*:7570' --insecure --beacon=7579 \
    > "$WORK/broker.log" 2>&1 &
PIDS="$PIDS $!"
waited=0
until grep -q "beacon on UDP port 7579" "$WORK/broker.log"; do
    waited=$((waited + 1))
    [ $waited -le $((WAIT * 10)) ] || fail "the broker did not start beaconing"
    sleep 0.1
done

#   The new machine hears it, by the broker host's address
ip netns exec "$NEW_HOST" timeout $WAIT "$BUILD/components/cli/dsh" brokers beacon:7579 --timeout-ms 3000 \
    > "$WORK/brokers.json" 2> "$WORK/brokers.log" || fail "dsh brokers heard nothing (exit $?)"
grep -q '"endpoint": "tcp://10.213.0.1:7570"' "$WORK/brokers.json" || fail "dsh brokers: $(cat "$WORK/brokers.json")"
grep -q '"curve": false' "$WORK/brokers.json" || fail "dsh brokers: the broker is plain: $(cat "$WORK/brokers.json")"

#   Silence on another port: exit 3, and a reason
ip netns exec "$NEW_HOST" timeout $WAIT "$BUILD/components/cli/dsh" brokers beacon:7580 --timeout-ms 500 \
    > /dev/null 2> "$WORK/silence.log"
status=$?
[ $status = 3 ] || fail "dsh brokers on a silent port: exit $status, not 3"
grep -q "no broker beacon heard" "$WORK/silence.log" || fail "silence: $(cat "$WORK/silence.log")"

#   A component given only --broker beacon:7579 registers its tools there
ip netns exec "$NEW_HOST" "$BUILD/components/demo/dsh-demo" --broker beacon:7579 --id beacondemo \
    > "$WORK/demo.log" 2>&1 &
PIDS="$PIDS $!"
waited=0
until ip netns exec "$NEW_HOST" timeout $WAIT "$BUILD/components/cli/dsh" --broker tcp://10.213.0.1:7570 \
        tools > "$WORK/tools.json" 2>/dev/null \
      && [ "$(grep -c '"name"' "$WORK/tools.json")" -ge 6 ]; do
    waited=$((waited + 1))
    [ $waited -le $((WAIT * 4)) ] || fail "dsh-demo --broker beacon:7579 did not register its tools"
    sleep 0.25
done
grep -q "via tcp://10.213.0.1:7570" "$WORK/demo.log" || fail "dsh-demo: $(cat "$WORK/demo.log")"
ip netns exec "$NEW_HOST" timeout $WAIT "$BUILD/components/cli/dsh" --broker tcp://10.213.0.1:7570 \
    call echo '{"message":"found by beacon"}' > "$WORK/call.json" 2>&1 || fail "call: $(cat "$WORK/call.json")"
grep -q "found by beacon" "$WORK/call.json" || fail "call: $(cat "$WORK/call.json")"

#   A CURVE broker says so in its beacon: a component without keys is told
#   why it found nothing; with keys it registers
DSH="$BUILD/components/cli/dsh"
mkdir "$WORK/allow"
"$DSH" keygen "$WORK/broker.cert" --role admin > /dev/null || fail "keygen broker"
"$DSH" keygen "$WORK/allow/demo.cert" --role component --components 'beacondemo*' > /dev/null || fail "keygen demo"
"$DSH" keygen "$WORK/allow/ops.cert" --role admin --agent ops > /dev/null || fail "keygen ops"
ip netns exec "$BROKER_HOST" "$BUILD/broker/dsh-broker" -e 'tcp://*:7590' --cert "$WORK/broker.cert" \
    --allow "$WORK/allow" --beacon=7589 > "$WORK/curve-broker.log" 2>&1 &
PIDS="$PIDS $!"
ip netns exec "$NEW_HOST" timeout $WAIT "$DSH" brokers beacon:7589 --timeout-ms 3000 \
    > "$WORK/curve-brokers.json" 2>&1 || fail "dsh brokers heard no CURVE broker"
grep -q '"curve": true' "$WORK/curve-brokers.json" || fail "CURVE flag: $(cat "$WORK/curve-brokers.json")"
ip netns exec "$NEW_HOST" timeout $WAIT "$BUILD/components/demo/dsh-demo" --broker beacon:7589 \
    --id beacondemo-plain > "$WORK/plain-demo.log" 2>&1
status=$?
[ $status = 1 ] || fail "a plain component and a CURVE beacon: exit $status, not 1"
grep -q "speak CURVE" "$WORK/plain-demo.log" || fail "plain component: $(cat "$WORK/plain-demo.log")"
ip netns exec "$NEW_HOST" "$BUILD/components/demo/dsh-demo" --broker beacon:7589 --id beacondemo-curve \
    --cert "$WORK/allow/demo.cert" --broker-cert "$WORK/broker.cert" > "$WORK/curve-demo.log" 2>&1 &
PIDS="$PIDS $!"
waited=0
until ip netns exec "$NEW_HOST" timeout $WAIT "$DSH" --broker tcp://10.213.0.1:7590 --cert "$WORK/allow/ops.cert" \
        --broker-cert "$WORK/broker.cert" tools > "$WORK/curve-tools.json" 2>/dev/null \
      && [ "$(grep -c '"name"' "$WORK/curve-tools.json")" -ge 6 ]; do
    waited=$((waited + 1))
    [ $waited -le $((WAIT * 4)) ] || fail "dsh-demo with keys did not register on the CURVE broker it heard"
    sleep 0.25
done

#   Every process stops cleanly on SIGTERM (a sanitizer build reports here)
for pid in $PIDS; do kill "$pid"; done
for pid in $PIDS; do wait "$pid" || fail "a process exited with status $? on SIGTERM"; done
PIDS=""
if grep -l "Sanitizer\|runtime error" "$WORK"/*.log; then fail "a sanitizer report"; fi
echo "beacon_netns: ok"
