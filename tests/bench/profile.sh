#!/usr/bin/env bash
#  profile.sh - instructions per call of each process on a dsh call's path
#
#      tests/bench/profile.sh [--build DIR] [--calls N] [--inflight N] [--payload BYTES] [--out DIR]
#
#  The VM has no hardware counters (perf cannot count instructions), and
#  wall-clock time depends on whatever else runs, so this counts
#  instructions with callgrind, which does not. Each process is profiled
#  in its own layout, alone under callgrind, the others native:
#
#    broker             client -> dsh-broker (empty chain) -> dsh-demo
#    broker, no stats   the same with the broker's call statistics off
#                       (--no-stats): what they cost, in instructions
#    broker+3 built-in  the same through three built-in pass stages, which
#                       run inline in the broker's thread
#    broker+1 external  the same, the chain one external stage, attached by
#                       a native dsh-stage --kind pass
#    pass stage         that dsh-stage, under callgrind
#    component          dsh-demo, serving the echo tool dsh-bench calls
#    client             dsh-bench --drive (dsh_client)
#
#  dsh-bench --drive makes the calls (echo, --payload bytes of message,
#  --inflight at once). A server process is warmed up (200 calls), its
#  counters zeroed (callgrind_control), N calls driven (plus the few --drive
#  makes to warm up, which it reports), its counters dumped: the figure is
#  that dump's total over the calls it served, every thread of the process
#  (libzmq's I/O thread too), heartbeats in the interval included. The
#  client cannot be zeroed mid-run, so it runs twice, with 200 and 200 + N
#  calls, and the figure is the difference over N. The .cg files stay in
#  the output directory for callgrind_annotate --inclusive=yes.
set -uo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build"
calls=5000
inflight=16
payload=64
out=""
usage () {
    echo "usage: tests/bench/profile.sh [--build DIR] [--calls N] [--inflight N] [--payload BYTES] [--out DIR]"
}
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build="$(cd "$2" && pwd)"; shift 2 ;;
        --calls) calls="$2"; shift 2 ;;
        --inflight) inflight="$2"; shift 2 ;;
        --payload) payload="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
for tool in valgrind callgrind_control; do
    command -v "$tool" >/dev/null || { echo "profile.sh: $tool is missing (deploy/install-deps.sh)" >&2; exit 1; }
done
broker_bin="$build/broker/dsh-broker"
demo_bin="$build/components/demo/dsh-demo"
stage_bin="$build/components/middleware/dsh-stage"
bench_bin="$build/tests/bench/dsh-bench"
for program in "$broker_bin" "$demo_bin" "$stage_bin" "$bench_bin"; do
    [ -x "$program" ] || { echo "profile.sh: $program is not built (./deploy/build.sh)" >&2; exit 1; }
done
[ -n "$out" ] || out="$(mktemp -d /tmp/dsh-profile.XXXXXX)"
mkdir -p "$out"
warmup=200
callgrind=(valgrind --tool=callgrind --quiet)

#  Every process this script starts, stopped on any exit
pids=()
stop_all () {
    local pid
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    pids=()
}
trap stop_all EXIT
trap 'exit 130' INT TERM

fail () {
    echo "profile.sh: $*" >&2
    exit 1
}

#  start NAME COMMAND...: in the background, output to $out/NAME.log
start () {
    local name="$1"
    shift
    #  Emptied here, not by the background shell: wait_line must never read
    #  a log an earlier run left in the same directory
    : >"$out/$name.log"
    "$@" >>"$out/$name.log" 2>&1 &
    started=$!
    pids+=("$started")
}

#  wait_line NAME TEXT SECONDS: until NAME's log has TEXT, or fail
wait_line () {
    local deadline=$((SECONDS + $3))
    until grep -q -- "$2" "$out/$1.log"; do
        [ $SECONDS -lt "$deadline" ] || { tail -5 "$out/$1.log" >&2; fail "$1 printed no \"$2\" in $3 s"; }
        sleep 0.2
    done
}

#  start_broker NAME [CONFIG] [callgrind]: sets endpoint
start_broker () {
    local name="$1" config="${2:-}" wrap=()
    [ "${3:-}" = callgrind ] && wrap=("${callgrind[@]}" "--callgrind-out-file=$out/$name.%p.cg")
    local args=(--endpoint "tcp://127.0.0.1:*")
    [ -n "$config" ] && args+=(-c "$config")
    start "$name" "${wrap[@]}" "$broker_bin" "${args[@]}"
    broker_pid=$started
    wait_line "$name" "listening on " 60
    endpoint="$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$out/$name.log" | head -1)"
}

#  drive NAME CALLS [callgrind]: N echo calls; fails unless all N completed
drive () {
    local name="$1" count="$2" wrap=()
    [ "${3:-}" = callgrind ] && wrap=("${callgrind[@]}" "--callgrind-out-file=$out/$name.%p.cg")
    "${wrap[@]}" "$bench_bin" --drive "$endpoint" --inflight "$inflight" --payload "$payload" \
        --calls "$count" --seconds 600 >"$out/$name.log" 2>&1 \
        || { tail -3 "$out/$name.log" >&2; fail "$name: dsh-bench --drive failed"; }
    grep -q "drive: .* 0 errors, $count calls after [0-9]* to warm up" "$out/$name.log" \
        || { tail -3 "$out/$name.log" >&2; fail "$name: not $count calls without errors"; }
    served=$((count + $(sed -n 's/.* calls after \([0-9]*\) to warm up.*/\1/p' "$out/$name.log")))
}

#  Until echo answers (the demo has announced it), warm up
warm_up () {
    local deadline=$((SECONDS + 60))
    until "$bench_bin" --drive "$endpoint" --inflight "$inflight" --payload "$payload" --calls "$warmup" \
          --seconds 60 >"$out/warmup.log" 2>&1; do
        [ $SECONDS -lt "$deadline" ] || { tail -3 "$out/warmup.log" >&2; fail "echo never answered"; }
        sleep 0.5
    done
}

#  The total Ir of a callgrind output file
total_ir () {
    sed -n 's/^\(summary\|totals\): *\([0-9]*\).*/\2/p' "$1" | head -1
}

#  measure_server LABEL NAME PID: zero, drive, dump; one result line
results=()
measure_server () {
    local label="$1" name="$2" pid="$3"
    warm_up
    callgrind_control --zero "$pid" >/dev/null 2>&1 || fail "callgrind_control cannot reach $name ($pid)"
    drive "$name-drive" "$calls"
    callgrind_control --dump "$pid" >/dev/null 2>&1 || fail "callgrind_control cannot reach $name ($pid)"
    local dump="$out/$name.$pid.cg.1"
    for _ in $(seq 50); do [ -s "$dump" ] && break; sleep 0.1; done
    local ir
    ir="$(total_ir "$dump")"
    [ -n "$ir" ] || fail "no totals in $dump"
    results+=("$(printf '%-38s %10d %14d %7d' "$label" $((ir / served)) "$ir" "$served")")
}

pass_config="$out/pass1.cfg"
printf 'chain\n    stage\n        name = "p1"\n        kind = "external"\n' >"$pass_config"
nostats_config="$out/nostats.cfg"
printf 'broker\n    stats = false\n' >"$nostats_config"
inline_config="$out/pass3.cfg"
printf 'chain\n' >"$inline_config"
for stage_name in p1 p2 p3; do
    printf '    stage\n        name = "%s"\n        kind = "pass"\n' "$stage_name" >>"$inline_config"
done
demo () {
    local name="$1" wrap=()
    [ "${2:-}" = callgrind ] && wrap=("${callgrind[@]}" "--callgrind-out-file=$out/$name.%p.cg")
    start "$name" "${wrap[@]}" "$demo_bin" --broker "$endpoint" --id "profile-demo"
    demo_pid=$started
    wait_line "$name" "component" 60
}
stage () {
    local name="$1" wrap=()
    [ "${2:-}" = callgrind ] && wrap=("${callgrind[@]}" "--callgrind-out-file=$out/$name.%p.cg")
    start "$name" "${wrap[@]}" "$stage_bin" --broker "$endpoint" --name p1 --kind pass
    stage_pid=$started
    wait_line "$name" "attached to" 60
}

echo "profile.sh: $calls calls, $inflight in flight, $payload B; output in $out" >&2

echo "profile.sh: broker (empty chain)" >&2
start_broker broker "" callgrind
demo demo-for-broker
measure_server "broker (empty chain)" broker "$broker_pid"
stop_all

echo "profile.sh: broker (empty chain), statistics off" >&2
start_broker broker-nostats "$nostats_config" callgrind
demo demo-for-broker-nostats
measure_server "broker (empty chain, --no-stats)" broker-nostats "$broker_pid"
stop_all

echo "profile.sh: broker with three built-in pass stages" >&2
start_broker broker-inline "$inline_config" callgrind
demo demo-for-broker-inline
measure_server "broker (3 built-in pass stages)" broker-inline "$broker_pid"
stop_all

echo "profile.sh: broker with one external stage" >&2
start_broker broker-ext "$pass_config" callgrind
stage stage-for-broker
demo demo-for-broker-ext
measure_server "broker (1 external pass stage)" broker-ext "$broker_pid"
stop_all

echo "profile.sh: pass stage" >&2
start_broker broker-for-stage "$pass_config"
stage stage callgrind
demo demo-for-stage
measure_server "pass stage (dsh-stage --kind pass)" stage "$stage_pid"
stop_all

echo "profile.sh: component" >&2
start_broker broker-for-demo
demo demo callgrind
measure_server "component (dsh-demo, echo)" demo "$demo_pid"
stop_all

echo "profile.sh: client" >&2
start_broker broker-for-client
demo demo-for-client
warm_up
drive client-short "$warmup" callgrind
drive client-long $((warmup + calls)) callgrind
short="$(total_ir "$(ls "$out"/client-short.*.cg | head -1)")"
long="$(total_ir "$(ls "$out"/client-long.*.cg | head -1)")"
[ -n "$short" ] && [ -n "$long" ] || fail "no totals in the client's callgrind files"
results+=("$(printf '%-38s %10d %14d %7d' "client (dsh_client, dsh-bench --drive)" $(((long - short) / calls)) \
                    $((long - short)) "$calls")")
stop_all

printf '\nprofile.sh: instructions per call (callgrind Ir, every thread of the process), %s B, %s in flight\n' \
       "$payload" "$inflight"
printf '%-38s %10s %14s %7s\n' "process" "Ir/call" "Ir" "calls"
printf '%s\n' "${results[@]}"
echo "callgrind files: $out (callgrind_annotate --inclusive=yes FILE)"
