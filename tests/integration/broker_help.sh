#!/bin/sh
#  dsh-broker --help names every flag the program takes, each with its
#  default: the flags are the option strings in broker/dsh_broker.c, so a
#  flag added there and not to the help fails here.
#  usage: broker_help.sh SOURCE_DIR DSH_BROKER
set -eu
source="$1/broker/dsh_broker.c" broker="$2"
help=$("$broker" --help)
failed=0
for flag in $(grep -o '"-[a-z-]*' "$source" | tr -d '"' | grep -v '^-*$' | sort -u); do
    if ! printf '%s\n' "$help" | grep -q -e "$flag\([^a-z-]\|$\)"; then
        echo "broker-help: --help does not name $flag"
        failed=$((failed + 1))
    fi
done
#  An option's entry runs from its line to the next option's; each but the
#  help's own says its default
missing=$(printf '%s\n' "$help" | awk '
    function check () { if (entry != "" && entry !~ /default/ && entry !~ /--help/) print entry }
    /^  -/ || /^      -/ { check(); entry = $0; next }
    /^ / { entry = entry $0 }
    END { check() }')
if [ -n "$missing" ]; then
    printf 'broker-help: no default in:\n%s\n' "$missing"
    failed=$((failed + 1))
fi
echo "broker-help: $failed failed"
[ "$failed" -eq 0 ]
