#!/bin/sh
#  Runs the conformance harness with Debian's python3 (the one with
#  python3-zmq and python3-msgpack for the Python driver); skipped (77)
#  where it is missing. Where npm is installed, the Node package is made
#  ready first, as its own tests do: its pinned dependencies installed when
#  one is missing, and its TypeScript built when dist/ is older than src/
#  (a Node driver on a stale build would test old code). Without npm the
#  harness finds no node_modules and skips Node.
#  Usage: run.sh BUILD_DIR [harness options]
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x /usr/bin/python3 ]; then
    echo "conformance: skipped, /usr/bin/python3 is missing"
    exit 77
fi
node_package="$here/../../components/node"
if [ -f "$node_package/package.json" ] && command -v npm >/dev/null 2>&1; then
    if ! (cd "$node_package" && node -e 'const deps = require("./package.json").dependencies || {};
            for (const name of Object.keys(deps)) require("fs").statSync("node_modules/" + name + "/package.json");' \
          2>/dev/null); then
        npm ci --prefix "$node_package" --no-audit --no-fund >&2 || { echo "conformance: npm ci failed in components/node"; exit 1; }
    fi
    if [ ! -f "$node_package/dist/index.js" ] || [ -n "$(find "$node_package/src" -newer "$node_package/dist/index.js" 2>/dev/null)" ]; then
        npm run --prefix "$node_package" build >&2 || { echo "conformance: npm run build failed in components/node"; exit 1; }
    fi
fi
exec /usr/bin/python3 "$here/harness.py" "$@"
