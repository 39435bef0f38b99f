#!/bin/sh
#  Runs one test with a state directory of its own, removed after: every
#  broker it starts keeps its store (audit, modes, pins, grants) there, so a
#  broker of another test that had the same front port (the store is one
#  file per port) leaves it nothing: no pin of another test's tool.
#  Usage (meson's exe_wrapper): fresh_state.sh COMMAND [ARG...]
base="${DSH_STATE_DIR:-${TMPDIR:-/tmp}}"
mkdir -p "$base" || exit 1
dir=$(mktemp -d "$base/test.XXXXXX") || exit 1
DSH_STATE_DIR="$dir"
export DSH_STATE_DIR
"$@"
rc=$?
rm -rf "$dir"
exit $rc
