#!/bin/sh
#  The MCP tests: install the pinned npm packages if they are missing,
#  then run every *.test.mjs here (or in the directory given, which
#  shares these packages: tests/monitor) with node's test runner. Without node
#  and npm (or with a node older than 18) the suite is skipped: exit 77.
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "run.sh: node and npm are needed for the MCP tests; skipping"
    exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
    echo "run.sh: node $major is older than 18; skipping"
    exit 77
fi
#  Installed also when a package pinned since the last install is missing
if ! (cd "$here" && node -e 'const deps = require("./package.json").dependencies;
        for (const name of Object.keys(deps)) require("fs").statSync("node_modules/" + name + "/package.json");' \
      2>/dev/null); then
    npm ci --prefix "$here" --no-audit --no-fund || exit 1
fi
#  One file at a time where node can say so (20+): each starts its own
#  broker and servers, and the timing checks want the machine to themselves
concurrency=""
if [ "$major" -ge 20 ]; then
    concurrency="--test-concurrency=1"
fi
#  The spec reporter ends with every failure in full: the part of a long
#  log that meson and CI show
cd "${1:-$here}" && exec node --test $concurrency --test-reporter=spec
