#!/usr/bin/env bash
#  Installs what is missing, builds, and runs every test three ways: a plain
#  build, an address+undefined sanitizer build, and the unit tests under
#  valgrind. Ends with one line: "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install-deps.sh

passed=0
failed=0
tally () {
    #  Counts one meson test run's results from its JSON log
    local counts
    counts=$(python3 - "$1/meson-logs/testlog.json" <<'PY'
import json, sys
ok = bad = 0
for line in open(sys.argv[1]):
    result = json.loads(line).get("result")
    if result in ("OK", "EXPECTEDFAIL", "SKIP"):
        ok += 1
    else:
        bad += 1
print(ok, bad)
PY
)
    passed=$((passed + ${counts% *}))
    failed=$((failed + ${counts#* }))
}

run () {
    local dir="$1"; shift
    echo "== $dir: meson test $*"
    meson test -C "$dir" --print-errorlogs --num-processes 2 "$@" && status=0 || status=$?
    tally "$dir"
    return 0
}

./deploy/build.sh build
run build

./deploy/build.sh build-sanitize -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    run build-sanitize

run build --suite unit --wrapper "valgrind --quiet --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect --error-exitcode=99"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
