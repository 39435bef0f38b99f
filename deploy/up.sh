#!/usr/bin/env bash
#  The main job: installs what is missing, builds, and runs dsh-broker on its
#  built-in defaults, with the default chain (deploy/dsh-broker.cfg) and the
#  example components attached (dsh-demo, and dsh-fs serving a sample
#  workspace). Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install-deps.sh
./deploy/build.sh build

broker="${DSH_BROKER:-tcp://127.0.0.1:7570}"
export DSH_BROKER="$broker"
workspace="build/workspace"
mkdir -p "$workspace/scratch"
[ -f "$workspace/hello.txt" ] || printf 'Hello from the dsh-fs workspace.\nLine two.\n' > "$workspace/hello.txt"

pids=()
stop () { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop EXIT
trap 'exit 0' INT TERM

build/broker/dsh-broker -c deploy/dsh-broker.cfg --endpoint "$broker" & pids+=($!)
sleep 0.3
build/components/demo/dsh-demo --broker "$broker" --id demo & pids+=($!)
build/components/fs/dsh-fs --broker "$broker" --id fs --root "$workspace" & pids+=($!)
sleep 0.5
cat <<MSG

dsh is up. In another terminal (DSH_BROKER=$broker is the default):
  build/components/cli/dsh tools
  build/components/cli/dsh call echo '{"message":"hello"}'
  build/components/cli/dsh call read_file '{"path":"hello.txt"}'
  build/components/cli/dsh watch
Ctrl-C stops the broker and the components.
MSG
wait
