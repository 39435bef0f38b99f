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
#  The Node driver needs components/node installed and built (one test at a
#  time: tests/kit/node_package.sh); without node the harness skips it
sh "$here/../kit/node_package.sh"
case $? in
    0|77) ;;
    *) echo "conformance: components/node could not be made ready"; exit 1 ;;
esac
exec /usr/bin/python3 "$here/harness.py" "$@"
