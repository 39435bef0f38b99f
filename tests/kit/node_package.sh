#!/bin/sh
#  Makes components/node (@dsh/tools) ready for the tests that run it: its
#  pinned npm packages (npm ci, dev dependencies included) when one is
#  missing or the lock changed, and dist/ built when a source is newer.
#  The conformance run, the Node suite and test_trace all need it, and meson
#  may run them side by side: one at a time under a lock, so that two npm ci
#  never write one node_modules. Exit 77 (skip) without node and npm 18+.
here=$(cd "$(dirname "$0")" && pwd)
package="$here/../../components/node"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "node_package.sh: node and npm are needed for components/node; skipping" >&2
    exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
    echo "node_package.sh: node $major is older than 18; skipping" >&2
    exit 77
fi
cd "$package" || exit 1
exec 9>"$package/.dsh-tests.lock"
flock -w 600 9 || { echo "node_package.sh: components/node is locked by another test for 600 s" >&2; exit 1; }
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund >&2 || { echo "node_package.sh: npm ci failed in components/node" >&2; exit 1; }
fi
if [ ! -f dist/index.js ] || [ -n "$(find src -newer dist/index.js 2>/dev/null)" ]; then
    npm run --silent build >&2 || { echo "node_package.sh: npm run build failed in components/node" >&2; exit 1; }
fi
exit 0
