#!/usr/bin/env bash
#  Builds the libFuzzer targets of tests/fuzz (clang, address + undefined
#  sanitizers, coverage on every file) in build-fuzz and runs each for
#  SECONDS, from seeds written by dsh-fuzz-seeds plus tests/fuzz/corpus.
#  The working corpus lives under build-fuzz, so the tree is not written.
#  Prints each target's executions and findings; exits non-zero if any
#  target crashed, leaked or timed out.
#
#  Usage: deploy/fuzz.sh [SECONDS]            (default 60)
#         FUZZ_TARGETS="body call" deploy/fuzz.sh 30
#         deploy/fuzz.sh --build               (build the targets only)
#
#  A finding is left as build-fuzz/fuzz/<target>/crash-* (or leak-*,
#  timeout-*); replay it with build-fuzz/tests/fuzz/fuzz_<target> FILE.
#
#  The network fuzzer is run by hand against a sanitizer broker (a chain
#  with an external stage named "audit" lets it fuzz that slot as well):
#    ASAN_OPTIONS=detect_leaks=1 build-hs/broker/dsh-broker -c chain.cfg \
#        --endpoint tcp://127.0.0.1:7600 &
#    build-hs/components/demo/dsh-demo --broker tcp://127.0.0.1:7600 &
#    build-hs/tests/fuzz/dsh-netfuzz tcp://127.0.0.1:7600 120
#    kill -INT %2 %1   # LeakSanitizer reports as the broker exits
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
targets=(${FUZZ_TARGETS:-body repeat call frames tooldef json config})
dir=build-fuzz

./deploy/install-deps.sh
if [ ! -f "$dir/build.ninja" ]; then
    CC=clang meson setup "$dir" -Dfuzz=true -Dtests=false -Dbuildtype=debug \
        -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
ninja -C "$dir" tests/fuzz/dsh-fuzz-seeds $(printf "tests/fuzz/fuzz_%s " "${targets[@]}") >/dev/null
[ "$seconds" = "--build" ] && exit 0

seeds="$dir/fuzz/seeds"
rm -rf "$seeds"
mkdir -p "$dir/fuzz"
"$dir/tests/fuzz/dsh-fuzz-seeds" "$seeds"

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
failed=0
total=0
for target in "${targets[@]}"; do
    work="$dir/fuzz/$target"
    mkdir -p "$work/corpus"
    [ -d "$seeds/$target" ] && cp -n "$seeds/$target"/* "$work/corpus/" 2>/dev/null || true
    [ -d "tests/fuzz/corpus/$target" ] && cp -n "tests/fuzz/corpus/$target"/* "$work/corpus/" 2>/dev/null || true
    dict=()
    case "$target" in
        config) dict=(-dict=tests/fuzz/zpl.dict) ;;
        body|repeat|call|tooldef|frames) dict=(-dict=tests/fuzz/msgpack.dict) ;;
    esac
    log="$work/last.log"
    rc=0
    "$dir/tests/fuzz/fuzz_$target" "${dict[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 \
        -max_len=4096 -timeout=10 -print_final_stats=1 -artifact_prefix="$work/" \
        "$work/corpus" >"$log" 2>&1 || rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    runs="${runs:-0}"
    total=$((total + runs))
    if [ "$rc" -ne 0 ]; then
        failed=$((failed + 1))
        echo "fuzz $target: FAILED after $runs executions (exit $rc); see $log"
        grep -E "ERROR|SUMMARY|Test unit written" "$log" | head -n 5 | sed 's/^/    /'
    else
        echo "fuzz $target: $runs executions in ${seconds}s, no finding"
    fi
done
echo "fuzz: ${#targets[@]} targets, $total executions, $failed with findings"
[ "$failed" -eq 0 ]
