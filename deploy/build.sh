#!/usr/bin/env bash
#  Configures (once) and builds dsh into a build directory (default: build).
#  Extra arguments go to `meson setup` the first time, e.g. -Db_sanitize=address,undefined.
#  On a terminal ninja shows its progress on one line; elsewhere (CI, a pipe)
#  only a line per step is printed, and a failure shows ninja's whole output.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"
shift || true
if [ ! -f "$dir/build.ninja" ]; then
    echo "build.sh: configuring $dir"
    meson setup "$dir" "$@" >/dev/null
fi
if [ -t 1 ]; then
    echo "build.sh: building $dir (the first build takes a few minutes on 2 cores)"
    ninja -C "$dir"
else
    echo "build.sh: building $dir"
    log=$(mktemp)
    if ! ninja -C "$dir" >"$log" 2>&1; then
        cat "$log"
        rm -f "$log"
        exit 1
    fi
    rm -f "$log"
fi
