#!/usr/bin/env bash
#  profile_limit_trace.sh - broker instructions per call with a limit stage,
#  the main job's chain, and the broker's tracing off and on (issue 28)
#
#      tests/bench/profile_limit_trace.sh [--build DIR] [--previous DIR] [--seconds N] [--out DIR]
#                                         [--only limit|trace]
#
#  Wall-clock figures on this VM move by more than the 3 % a limit stage
#  may cost, so this counts instructions with callgrind, as profile_pins.sh
#  does: dsh-broker under callgrind (--audit off), dsh-demo and the load
#  (dsh-bench --drive: echo, 64 B, 16 in flight) native. Each layout's
#  counters are zeroed after 300 warm-up calls and dumped after N seconds
#  of calls; the figure is that dump's total over the calls served (every
#  thread of the broker, its exporter's too, heartbeats included). Layouts:
#
#    empty                 the call path with nothing judged
#    previous              the same on --previous DIR's broker (an earlier
#                          build, before tracing), if given
#    pass                  one built-in pass stage: what any stage costs
#    limit                 the main job's limit stage alone
#    main chain            the main job's chain (deploy/dsh-broker.cfg)
#    (the limit stage's and the chain's rules that the calls meet raised
#    so that none refuses them: dsh-bench --limit-configs writes them)
#    trace 1pct, 100pct    the empty chain with the broker's tracing on
#                          (OTEL_TRACES_SAMPLER traceidratio 0.01, and
#                          always_on), exporting http/protobuf to a
#                          receiver (Python) that answers every POST 200
set -uo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build"
previous=""
seconds=5
out=""
only=""
usage="usage: tests/bench/profile_limit_trace.sh [--build DIR] [--previous DIR] [--seconds N] [--out DIR] [--only limit|trace]"
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build="$(cd "$2" && pwd)"; shift 2 ;;
        --previous) previous="$(cd "$2" && pwd)"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --only) only="$2"; shift 2 ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
done
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null \
    || { echo "profile_limit_trace.sh: needs valgrind (callgrind)" >&2; exit 2; }
work="$(mktemp -d)"
out="${out:-$work}"
mkdir -p "$out"
pids=()
cleanup () { kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

printf '' > "$work/empty.cfg"
DSH_SOURCE_DIR="$root" "$build/tests/bench/dsh-bench" --limit-configs "$work" >/dev/null || exit 1
port () { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

#  The OTLP/HTTP receiver: every POST is answered 200, empty, unread
sink_port=$(port)
python3 - "$sink_port" <<'PY' &
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Sink (BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST (self):
        self.rfile.read (int (self.headers.get ("Content-Length", 0)))
        self.send_response (200)
        self.send_header ("Content-Type", "application/x-protobuf")
        self.send_header ("Content-Length", "0")
        self.end_headers ()
    def log_message (self, *args):
        pass
ThreadingHTTPServer (("127.0.0.1", int (sys.argv [1])), Sink).serve_forever ()
PY
sink=$!

#  layout NAME CONFIG BROKER [VARIABLE=VALUE ...]
layout () {
    local name="$1" config="$2" broker_program="$3"; shift 3
    local ep="tcp://127.0.0.1:$(port)" file="$out/callgrind.${name// /-}"
    #  Each socket on a port of its own: the front's +1..+3 may be taken
    env "$@" valgrind --tool=callgrind --callgrind-out-file="$file" "$broker_program" -c "$config" \
        --endpoint "$ep" --announce "tcp://127.0.0.1:$(port)" --work "tcp://127.0.0.1:$(port)" \
        --events "tcp://127.0.0.1:$(port)" --audit off --state-dir "$work/state-${name// /-}" \
        > "$work/broker.log" 2>&1 &
    local broker=$!
    pids+=("$broker")
    #  valgrind may take seconds to start on a busy machine
    for _ in $(seq 300); do
        grep -qs 'listening on' "$work/broker.log" && break
        kill -0 "$broker" 2>/dev/null || break
        sleep 0.1
    done
    if ! grep -qs 'listening on' "$work/broker.log"; then
        kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; pids=()
        printf '%-20s the broker did not start: %s\n' "$name" "$(grep -m1 'dsh-broker:' "$work/broker.log")"
        return
    fi
    "$build/components/demo/dsh-demo" --broker "$ep" --id demo >/dev/null 2>&1 &
    pids+=($!)
    DSH_BROKER="$ep" "$build/components/cli/dsh" --timeout-ms 20000 ping >/dev/null 2>&1
    for _ in $(seq 100); do
        DSH_BROKER="$ep" "$build/components/cli/dsh" tools 2>/dev/null | grep -q '"echo"' && break; sleep 0.1
    done
    "$build/tests/bench/dsh-bench" --drive "$ep" --calls 300 --inflight 16 >/dev/null 2>&1
    callgrind_control -z "$broker" >/dev/null 2>&1
    local served
    served=$("$build/tests/bench/dsh-bench" --drive "$ep" --seconds "$seconds" --inflight 16 2>&1 \
             | grep -o '^drive: [0-9]* replies' | grep -o '[0-9]*')
    callgrind_control -d "$broker" >/dev/null 2>&1
    sleep 0.5
    if [ -z "$served" ] || [ "$served" = 0 ]; then
        kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; pids=()
        printf '%-20s no calls served (the broker did not start?)\n' "$name"
        return
    fi
    local total
    total=$(grep -h '^totals:' "$file".* | awk '{s += $2} END {print s}')
    kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; pids=()
    printf '%-20s %8s calls  %8.0f broker instructions/call\n' "$name" "$served" "$(echo "$total / $served" | bc -l)"
}

current="$build/broker/dsh-broker"
otel=(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$sink_port" OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)
layout "empty" "$work/empty.cfg" "$current"
[ -n "$previous" ] && [ "$only" != limit ] && layout "previous" "$work/empty.cfg" "$previous/broker/dsh-broker"
if [ "$only" != trace ]; then
    layout "pass" "$work/pass.cfg" "$current"
    layout "limit" "$work/limit.cfg" "$current"
    layout "main chain" "$work/main.cfg" "$current"
fi
if [ "$only" != limit ]; then
    layout "trace 1pct" "$work/empty.cfg" "$current" "${otel[@]}" OTEL_TRACES_SAMPLER=traceidratio \
        OTEL_TRACES_SAMPLER_ARG=0.01
    layout "trace 100pct" "$work/empty.cfg" "$current" "${otel[@]}" OTEL_TRACES_SAMPLER=always_on
fi
kill "$sink" 2>/dev/null
