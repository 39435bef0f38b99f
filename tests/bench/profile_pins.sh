#!/usr/bin/env bash
#  profile_pins.sh - broker instructions per call with and without pins,
#  and for a call a grant lets through against one a rule allows
#
#      tests/bench/profile_pins.sh [--build DIR] [--seconds N] [--out DIR]
#
#  Wall-clock figures on this VM move by more than the 3 % issue 26 asks
#  pins and grants to stay under, so this counts instructions with
#  callgrind, as profile.sh does: dsh-broker under callgrind (--audit off,
#  so the audit writer does not count), dsh-demo and the load
#  (dsh-bench --drive: echo, 64 B, 16 in flight) native. Each layout's
#  counters are zeroed after 300 warm-up calls and dumped after N seconds
#  of calls; the figure is that dump's total over the calls served (every
#  thread of the broker, heartbeats included). Layouts:
#
#    empty, pins off      the call path with nothing judged
#    empty, pins tofu     the same with pins (the default)
#    allow, pins off      one built-in permission stage, its rule allow
#    allow, pins tofu
#    granted, pins tofu   the same stage asking for echo, every call let
#                         through by a grant (made first: `dsh approver`
#                         fed `allow ID for 60` for one call)
set -uo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build"
seconds=5
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build="$(cd "$2" && pwd)"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) echo "usage: tests/bench/profile_pins.sh [--build DIR] [--seconds N] [--out DIR]" >&2; exit 2 ;;
    esac
done
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null \
    || { echo "profile_pins.sh: needs valgrind (callgrind)" >&2; exit 2; }
work="$(mktemp -d)"
out="${out:-$work}"
mkdir -p "$out"
pids=()
cleanup () { kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

printf '' > "$work/empty.cfg"
for action in allow ask; do
    printf 'chain\n    stage\n        name = "permission"\n        kind = "permission"\n        rule\n            tool = "echo"\n            action = "%s"\n' \
        "$action" > "$work/$action.cfg"
done
port () { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

#  layout NAME CONFIG PINS GRANT
layout () {
    local name="$1" config="$2" pins="$3" grant="$4"
    local ep="tcp://127.0.0.1:$(port)" file="$out/callgrind.${name// /-}"
    valgrind --tool=callgrind --callgrind-out-file="$file" "$build/broker/dsh-broker" -c "$config" \
        --endpoint "$ep" --audit off --pins "$pins" --state-dir "$work/state-${name// /-}" \
        > "$work/broker.log" 2>&1 &
    local broker=$!
    pids+=("$broker")
    for _ in $(seq 100); do grep -q 'listening on' "$work/broker.log" && break; sleep 0.1; done
    "$build/components/demo/dsh-demo" --broker "$ep" --id demo >/dev/null 2>&1 &
    pids+=($!)
    DSH_BROKER="$ep" "$build/components/cli/dsh" --timeout-ms 20000 ping >/dev/null 2>&1
    for _ in $(seq 100); do
        DSH_BROKER="$ep" "$build/components/cli/dsh" tools 2>/dev/null | grep -q '"echo"' && break; sleep 0.1
    done
    if [ "$grant" = yes ]; then
        rm -f "$work/fifo"; mkfifo "$work/fifo"
        sleep 120 > "$work/fifo" &
        pids+=($!)
        DSH_BROKER="$ep" "$build/components/cli/dsh" approver < "$work/fifo" > "$work/approver.out" 2>&1 &
        pids+=($!)
        sleep 1
        DSH_BROKER="$ep" "$build/components/cli/dsh" call echo '{"message":"first"}' > "$work/first.out" 2>&1 &
        local id=""
        for _ in $(seq 100); do
            id=$(grep -o '"id": *"[0-9a-f]\{8\}"' "$work/approver.out" | head -1 | grep -o '[0-9a-f]\{8\}')
            [ -n "$id" ] && break; sleep 0.1
        done
        [ -n "$id" ] || { echo "profile_pins.sh: $name: no request reached the approver" >&2; exit 1; }
        echo "allow $id for 60" > "$work/fifo"
        wait $! 2>/dev/null
        grep -q '"first"' "$work/first.out" || { echo "profile_pins.sh: $name: the grant's call failed" >&2; exit 1; }
    fi
    "$build/tests/bench/dsh-bench" --drive "$ep" --calls 300 --inflight 16 >/dev/null 2>&1
    callgrind_control -z "$broker" >/dev/null 2>&1
    local served
    served=$("$build/tests/bench/dsh-bench" --drive "$ep" --seconds "$seconds" --inflight 16 2>&1 \
             | grep -o '^drive: [0-9]* replies' | grep -o '[0-9]*')
    callgrind_control -d "$broker" >/dev/null 2>&1
    sleep 0.5
    local total
    total=$(grep -h '^totals:' "$file".* | awk '{s += $2} END {print s}')
    kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; pids=()
    printf '%-20s %8s calls  %8.0f broker instructions/call\n' "$name" "$served" "$(echo "$total / $served" | bc -l)"
}

layout "empty, pins off" "$work/empty.cfg" off no
layout "empty, pins tofu" "$work/empty.cfg" tofu no
layout "allow, pins off" "$work/allow.cfg" off no
layout "allow, pins tofu" "$work/allow.cfg" tofu no
layout "granted, pins tofu" "$work/ask.cfg" tofu yes
