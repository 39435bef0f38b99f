#!/usr/bin/env bash
#  Installs the Debian packages dsh needs to build, run and test.
#  Idempotent and quiet when everything is there already.
set -euo pipefail

#  libmicrohttpd-dev serves MCP's Streamable HTTP transport (dsh-mcp --http);
#  libcurl4-openssl-dev is dsh-mcp-bridge --url's HTTP client (and the tests').
#  prometheus (its promtool checks dsh-monitor's /metrics) and chromium
#  (headless, for dsh-monitor's page) are for tests/monitor only.
#  iproute2 (ip, bridge, tc) builds the netns test bed of tests/netns/.
#  libsystemd-dev lets dsh-broker tell systemd it is ready (sd_notify);
#  systemd brings systemd-analyze, which checks the units in the tests.
#  nats-server and libnats-dev are only for dsh-bench's NATS column (the
#  peer it is measured against); dsh itself never links or runs them.
#  python3-zmq, python3-msgpack and python3-pytest run the Python library
#  (components/python) and its tests under /usr/bin/python3
#  libsqlite3-dev and libpq-dev build the broker's store (broker/dsh_store.c:
#  SQLite or PostgreSQL), libssl-dev its SHA-256 (libcrypto, the audit's
#  digests and hash chain; libsodium-dev's is the unit test's second opinion);
#  postgresql is the server tests/kit/pg_scratch.sh runs for its tests.
#  libprotobuf-c-dev and protobuf-c-compiler (protoc-c) build libdsh's OTLP
#  trace exporter from the official .proto files in schemas/otlp.
packages=(gcc pkg-config meson ninja-build python3
          clang libfuzzer-14-dev
          libzmq3-dev libczmq-dev libmsgpack-dev libjansson-dev libcmocka-dev
          libmicrohttpd-dev libcurl4-openssl-dev
          valgrind prometheus chromium
          iproute2
          libsystemd-dev systemd
          nats-server libnats-dev
          python3-zmq python3-msgpack python3-pytest python3-venv
          libsqlite3-dev libpq-dev libssl-dev libsodium-dev postgresql
          libprotobuf-c-dev protobuf-c-compiler)

#  The MCP tests run real MCP software from npm, and the node suite builds
#  and tests @dsh/tools (components/node: zeromq 6 ships its linux-x64
#  binary inside the npm package, so no compiler or libzmq is needed for it);
#  a node of 18 or later that is already here (any vendor) will do
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    packages+=(nodejs npm)
fi

missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
