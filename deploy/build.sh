#!/usr/bin/env bash
#  Configures (once) and builds dsh into a build directory (default: build).
#  Extra arguments go to `meson setup` the first time, e.g. -Db_sanitize=address,undefined.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"
shift || true
[ -f "$dir/build.ninja" ] || meson setup "$dir" "$@" >/dev/null
ninja -C "$dir" >/dev/null
