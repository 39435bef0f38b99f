#!/bin/sh
#  Installs the receiver's pinned npm packages (package-lock.json) when one
#  is missing, as tests/mcp/run.sh does for its own. Exit 77 (skipped)
#  without node and npm 18 or later; tests that use receiver.mjs run this
#  first.
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "install.sh: node and npm are needed for the OTLP receiver; skipping" >&2
    exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
    echo "install.sh: node $major is older than 18; skipping" >&2
    exit 77
fi
#  Tests that use the receiver may run side by side: one npm ci at a time
exec 9>"$here/.dsh-tests.lock"
flock -w 600 9 || { echo "install.sh: tests/otel is locked by another test for 600 s" >&2; exit 1; }
if ! (cd "$here" && node -e 'const deps = require("./package.json").dependencies;
        for (const name of Object.keys(deps)) require("fs").statSync("node_modules/" + name + "/package.json");' \
      2>/dev/null); then
    npm ci --prefix "$here" --no-audit --no-fund >&2 || exit 1
fi
exit 0
