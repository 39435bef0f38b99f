#!/bin/sh
#  The Python library's tests (tests/python) under Debian's interpreter, with
#  Debian's python3-zmq, python3-msgpack and python3-pytest; exits 77
#  (skipped) where one is missing. DSH_BUILD_DIR and DSH_SOURCE_DIR come from
#  meson (integration_env).
python=/usr/bin/python3
if ! "$python" -c 'import zmq, msgpack, pytest' 2>/dev/null; then
    echo "python: $python lacks zmq, msgpack or pytest (apt-get install python3-zmq python3-msgpack python3-pytest); skipped"
    exit 77
fi
cd "${DSH_SOURCE_DIR:-$(dirname "$0")/../..}" || exit 1
PYTHONDONTWRITEBYTECODE=1 exec "$python" -m pytest -q -p no:cacheprovider tests/python
