#!/usr/bin/env bash
#  Installs what is missing, builds, and runs every test: each suite once,
#  in the build where it checks the most; the unit tests also under
#  valgrind; then each libFuzzer target for a few seconds (one pass or
#  failure). Ends with one line: "N passed, N failed, N skipped".
#
#  - The address+undefined sanitizer build runs the unit, integration, mcp,
#    monitor and conformance suites: every C program they start runs under
#    the sanitizers (conformance drives all three languages there).
#  - The plain build runs what a sanitizer's slowdown would only blur or
#    what is not C: the netns suite (the multi-host bed, root only, else
#    skipped: it measures recovery times), the python and node suites (the
#    C they talk to is under the sanitizer elsewhere), bench-quick, the
#    README's blocks (a C example compiled against libdsh as a user would),
#    and the integration suite again at full speed, where races that the
#    sanitizer's pace hides show.
#  - The netns suite runs one test at a time and mostly waits (partitions,
#    heal windows, relays): meanwhile the sanitizer suites run, and the fuzz
#    targets are built, at a lower priority (nice 10), so that they never
#    delay the bed's relays and timers. Each step says how long it took.
#  - The long suite (README, Tests: the 100 000-call soak, 20 broker
#    restarts, the long partitions and loss runs) is left out; with --long
#    it runs after the rest, in the plain build, and then every fuzz target
#    runs for LONG_FUZZ_SECONDS (default 60) instead of 5.
#
#  Usage: deploy/check.sh [--long]
set -euo pipefail
cd "$(dirname "$0")/.."
long=0
case "${1:-}" in
    "") ;;
    --long) long=1 ;;
    *) echo "usage: $0 [--long]" >&2; exit 2 ;;
esac
./deploy/install-deps.sh

passed=0
failed=0
skipped=0
tally () {
    #  Counts one meson test run's results from its own JSON log
    local counts
    counts=$(python3 - "$1" <<'PY'
import json, sys
ok = bad = skip = 0
for line in open(sys.argv[1]):
    result = json.loads(line).get("result")
    if result in ("OK", "EXPECTEDFAIL"):
        ok += 1
    elif result == "SKIP":
        skip += 1
    else:
        bad += 1
print(ok, bad, skip)
PY
) || counts="0 1 0"
    read -r ok bad skip <<< "$counts"
    passed=$((passed + ok))
    failed=$((failed + bad))
    skipped=$((skipped + skip))
}

#  How long each step took, on its own line, so a CI log says where the
#  time goes
step () {
    echo "== step done: $1 (${SECONDS} s since the start)"
}

run () {
    local dir="$1" logbase="$2"; shift 2
    echo "== $dir ($logbase): meson test $*"
    rm -f "$dir/meson-logs/$logbase"*.json
    meson test -C "$dir" --print-errorlogs --num-processes 2 --logbase "$logbase" "$@" || true
    #  meson adds the wrapper's name to the log's; no log at all (a build
    #  error) counts as one failure
    local log
    log=$(ls -t "$dir/meson-logs/$logbase"*.json 2>/dev/null | head -n 1)
    tally "${log:-/nonexistent}"
    return 0
}

./deploy/build.sh build
./deploy/build.sh build-sanitize -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
step "plain and sanitizer builds"

sanitize_out=build-sanitize/meson-logs/sanitize.out
mkdir -p build-sanitize/meson-logs
rm -f build-sanitize/meson-logs/sanitize*.json
(
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        nice -n 10 meson test -C build-sanitize --print-errorlogs --num-processes 2 --logbase sanitize \
        --no-suite netns --no-suite python --no-suite node --no-suite bench --no-suite readme || true
    nice -n 10 ./deploy/fuzz.sh --build || true
) >"$sanitize_out" 2>&1 &
background=$!
run build netns --suite netns
step "netns suite (plain), beside the sanitizer suites"
wait "$background" || true
echo "== build-sanitize (sanitize): meson test, beside the netns suite"
cat "$sanitize_out"
sanitize_log=$(ls -t build-sanitize/meson-logs/sanitize*.json 2>/dev/null | head -n 1)
tally "${sanitize_log:-/nonexistent}"
step "sanitizer suites and the fuzz build"

run build plain --no-suite netns --no-suite unit --no-suite mcp --no-suite monitor --no-suite conformance
step "plain suites"

run build valgrind --setup valgrind --suite unit
step "unit tests under valgrind"

if [ "$long" = 1 ]; then
    run build long --setup long --suite long
fi

#  A short fuzz of every target (a long one with --long): seeds from the
#  tests, then mutations; a crash, a leak or a sanitizer report in any of
#  them is one failure
fuzz_seconds=5
[ "$long" = 1 ] && fuzz_seconds="${LONG_FUZZ_SECONDS:-60}"
echo "== fuzz: deploy/fuzz.sh $fuzz_seconds"
if ./deploy/fuzz.sh "$fuzz_seconds"; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
fi
step "fuzz"

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
