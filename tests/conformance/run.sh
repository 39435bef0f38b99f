#!/bin/sh
#  Runs the conformance harness with Debian's python3 (the one with
#  python3-zmq and python3-msgpack for the Python driver); skipped (77)
#  where it is missing. Usage: run.sh BUILD_DIR [--bench]
if [ ! -x /usr/bin/python3 ]; then
    echo "conformance: skipped, /usr/bin/python3 is missing"
    exit 77
fi
exec /usr/bin/python3 "$(dirname "$0")/harness.py" "$@"
