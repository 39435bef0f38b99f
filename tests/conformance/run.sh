#!/bin/sh
#  Runs the conformance harness with Debian's python3 (the one with
#  python3-zmq and python3-msgpack for the Python driver); skipped (77)
#  where it is missing. Installs the Node package's pinned dependencies
#  first where npm can and they are missing, as tests/mcp/run.sh does for
#  its own, so the Node driver is not skipped for want of them.
#  Usage: run.sh BUILD_DIR [harness options]
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x /usr/bin/python3 ]; then
    echo "conformance: skipped, /usr/bin/python3 is missing"
    exit 77
fi
node_package="$here/../../components/node"
if [ -f "$node_package/package-lock.json" ] && command -v npm >/dev/null 2>&1 \
   && ! (cd "$node_package" && node -e 'const deps = require("./package.json").dependencies || {};
        for (const name of Object.keys(deps)) require("fs").statSync("node_modules/" + name + "/package.json");' \
         2>/dev/null); then
    npm ci --prefix "$node_package" --no-audit --no-fund >&2 || echo "conformance: npm ci failed in components/node"
fi
exec /usr/bin/python3 "$here/harness.py" "$@"
