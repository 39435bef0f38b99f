#!/bin/sh
#  A third party builds a component against an installed dsh: install the
#  build into a scratch root, compile tests/sdk/greet.c (the README's
#  example) with nothing but `pkg-config --cflags --libs libdsh`, then run
#  it against a broker and call its tool.
set -eu
build="$1"
#  A sanitizer build's library needs its runtime in the program too
sanitize="${2:-none}"
extra=""
[ "$sanitize" = "none" ] || extra="-fsanitize=$sanitize"
here=$(cd "$(dirname "$0")" && pwd)
stage=$(mktemp -d)
trap 'kill $broker_pid $greeter_pid 2>/dev/null; rm -rf "$stage"' EXIT
broker_pid=""
greeter_pid=""
meson install -C "$build" --destdir "$stage" --quiet --no-rebuild >/dev/null
pc=$(dirname "$(find "$stage" -name libdsh.pc | head -n 1)")
export PKG_CONFIG_PATH="$pc" PKG_CONFIG_SYSROOT_DIR="$stage"
cc -std=c17 -Wall -Wextra -Werror $extra "$here/greet.c" -o "$stage/greet" $(pkg-config --cflags --libs libdsh)
#  pkg-config puts the sysroot in front already
libdir=$(pkg-config --variable=libdir libdsh)

"$build/broker/dsh-broker" --endpoint 'tcp://127.0.0.1:*' > "$stage/broker.out" 2>/dev/null &
broker_pid=$!
for i in $(seq 50); do grep -q "listening on" "$stage/broker.out" && break; sleep 0.1; done
endpoint=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$stage/broker.out")
DSH_BROKER="$endpoint" LD_LIBRARY_PATH="$libdir" "$stage/greet" 2>/dev/null &
greeter_pid=$!
for i in $(seq 50); do
    "$build/components/cli/dsh" --broker "$endpoint" get greet >/dev/null 2>&1 && break
    sleep 0.1
done
reply=$("$build/components/cli/dsh" --broker "$endpoint" call greet '{"who":"installed dsh"}')
echo "$reply" | grep -q '"hello, installed dsh"' || { echo "check-install: unexpected reply: $reply"; exit 1; }
echo "check-install: built against the installed libdsh and called its tool: 1 passed, 0 failed"
