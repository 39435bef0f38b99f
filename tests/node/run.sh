#!/bin/sh
#  The Node package's tests (components/node, @dsh/tools): install its
#  pinned npm packages (npm ci) when they are missing or the lock changed,
#  build it and the README example with tsc, then run test/*.test.mjs with
#  node's test runner against the real broker and C components of
#  $DSH_BUILD_DIR. Without node and npm (or with a node older than 18) the
#  suite is skipped: exit 77.
here=$(cd "$(dirname "$0")" && pwd)
package="$here/../../components/node"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "run.sh: node and npm are needed for the Node tests; skipping"
    exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
    echo "run.sh: node $major is older than 18; skipping"
    exit 77
fi
#  npm ci when the lock changed, and tsc, one test at a time
sh "$here/../kit/node_package.sh" || exit 1
cd "$package" || exit 1
npm run --silent build:test || exit 1
#  One file at a time where node can say so (20+): each starts its own broker
concurrency=""
if [ "$major" -ge 20 ]; then
    concurrency="--test-concurrency=1"
fi
#  The spec reporter ends with every failure in full: the part of a long
#  log that meson and CI show
exec node --test $concurrency --test-reporter=spec test/*.test.mjs
