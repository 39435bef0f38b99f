#!/bin/sh
#  The README's install of the Python library, as written for Debian 12,
#  where a bare `pip install` is refused (externally-managed-environment):
#  a virtual environment that sees Debian's python3-zmq and python3-msgpack
#  (--system-site-packages), and pip with no build isolation and no index,
#  so that nothing is fetched from the network. Installs a copy of
#  components/python (pip builds in the source directory), then imports dsh
#  from outside the tree and prints its version. Exits 77 (skipped) without
#  python3-venv, zmq or msgpack.
python=/usr/bin/python3
if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
    echo "install: $python has no venv with pip (apt-get install python3-venv); skipped"
    exit 77
fi
if ! "$python" -c 'import zmq, msgpack' 2>/dev/null; then
    echo "install: $python lacks zmq or msgpack (apt-get install python3-zmq python3-msgpack); skipped"
    exit 77
fi
source_dir=${DSH_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
cp -r "$source_dir/components/python" "$work/python" || exit 1
rm -rf "$work/python/build" "$work/python"/*.egg-info
set -e
"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install --no-build-isolation --no-index --quiet "$work/python"
cd "$work"
version=$("$work/venv/bin/python" -c 'import importlib.metadata, dsh; print(importlib.metadata.version("dsh"))')
expected=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$source_dir/components/python/pyproject.toml")
echo "install: dsh $version in a virtual environment"
if [ "$version" != "$expected" ]; then
    echo "install: expected dsh $expected"
    exit 1
fi
#  The installed copy, not the source tree's
where=$("$work/venv/bin/python" -c 'import dsh; print(dsh.__file__)')
case "$where" in
    "$work/venv/"*) ;;
    *) echo "install: dsh imported from $where, not from the virtual environment"; exit 1 ;;
esac
