#!/usr/bin/env bash
#  The main job: installs what is missing, builds, and runs dsh-broker on its
#  built-in defaults, with the default chain (deploy/dsh-broker.cfg), the
#  example components attached (dsh-demo, and dsh-fs serving a sample
#  workspace) and dsh-monitor's live page on loopback. Ctrl-C stops
#  everything.
#
#  It listens on loopback without CURVE by default: one command, no keys to
#  hand out. With --curve it makes keys under build/keys (a broker keypair,
#  one per component, and an admin key for you), and runs every party with
#  CURVE: what a swarm off this host needs (README, "Securing a swarm").
#  The monitor then needs a token even on loopback (its approver key sees
#  pending calls' arguments): build/keys/monitor.token, made once, readable
#  by you only; the page is opened with it once, as printed.
set -euo pipefail
curve=false
for arg in "$@"; do
    case "$arg" in
        --curve) curve=true ;;
        *) echo "usage: deploy/up.sh [--curve]" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.."
./deploy/install-deps.sh
./deploy/build.sh build

broker="${DSH_BROKER:-tcp://127.0.0.1:7570}"
export DSH_BROKER="$broker"
workspace="build/workspace"
mkdir -p "$workspace/scratch"
[ -f "$workspace/hello.txt" ] || printf 'Hello from the dsh-fs workspace.\nLine two.\n' > "$workspace/hello.txt"

pids=()
stop () { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop EXIT
trap 'exit 0' INT TERM

broker_keys=()
demo_keys=()
fs_keys=()
monitor_keys=()
monitor_token=""
if $curve; then
    keys=build/keys
    mkdir -p "$keys/allow"
    dsh=build/components/cli/dsh
    [ -f "$keys/broker.cert" ] || $dsh keygen "$keys/broker.cert" --role admin --name broker >/dev/null
    [ -f "$keys/demo.cert" ] || $dsh keygen "$keys/demo.cert" --role component --components demo >/dev/null
    [ -f "$keys/fs.cert" ] || $dsh keygen "$keys/fs.cert" --role component --components fs >/dev/null
    [ -f "$keys/you.cert" ] || $dsh keygen "$keys/you.cert" --role admin --agent you >/dev/null
    #  The monitor reads; an approver key may also list pending approvals
    [ -f "$keys/monitor.cert" ] || $dsh keygen "$keys/monitor.cert" --role approver --name monitor >/dev/null
    cp "$keys/demo.cert" "$keys/fs.cert" "$keys/you.cert" "$keys/monitor.cert" "$keys/allow/"
    broker_keys=(--cert "$keys/broker.cert" --allow "$keys/allow")
    demo_keys=(--cert "$keys/demo.cert" --broker-cert "$keys/broker.cert")
    fs_keys=(--cert "$keys/fs.cert" --broker-cert "$keys/broker.cert")
    monitor_token="$keys/monitor.token"
    if [ ! -s "$monitor_token" ]; then
        (umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$monitor_token" && echo >> "$monitor_token")
    fi
    monitor_keys=(--cert "$keys/monitor.cert" --broker-cert "$keys/broker.cert" --token-file "$monitor_token")
fi

#  The audit trail and durable modes: one SQLite file under the build
build/broker/dsh-broker -c deploy/dsh-broker.cfg --endpoint "$broker" --state-dir build/state "${broker_keys[@]}" \
    & pids+=($!)
sleep 0.3
build/components/demo/dsh-demo --broker "$broker" --id demo "${demo_keys[@]}" & pids+=($!)
build/components/fs/dsh-fs --broker "$broker" --id fs --root "$workspace" "${fs_keys[@]}" & pids+=($!)
monitor_http="${DSH_MONITOR_HTTP:-127.0.0.1:7580}"
build/components/monitor/dsh-monitor --broker "$broker" --http "$monitor_http" "${monitor_keys[@]}" >/dev/null \
    & pids+=($!)
sleep 0.5
if $curve; then
    cat <<MSG

CURVE is on. Your key is build/keys/you.cert (an admin, agent "you"); first run
  export DSH_CERT=build/keys/you.cert DSH_BROKER_CERT=build/keys/broker.cert
The monitor needs its token, in $monitor_token: the page's address below
carries it once (the browser then keeps a session cookie); a script sends
"Authorization: Bearer \$(cat $monitor_token)".
MSG
fi
page="http://$monitor_http/"
$curve && page="http://$monitor_http/?token=$(cat "$monitor_token")"
cat <<MSG

dsh is up. Watch it live at $page (metrics: /metrics).
In another terminal (DSH_BROKER=$broker is the default):
  build/components/cli/dsh tools
  build/components/cli/dsh call echo '{"message":"hello"}'
  build/components/cli/dsh call read_file '{"path":"hello.txt"}'
  build/components/cli/dsh watch
Ctrl-C stops the broker, the components and the monitor.
MSG
wait
