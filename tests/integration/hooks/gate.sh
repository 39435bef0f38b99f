#!/bin/sh
#  PreToolUse hook for flood tests: holds at a gate until the file
#  $1/release exists (a minute at most, so a failed test leaves nothing
#  running). As it starts it records its pid in $1/running, and how many
#  hooks hold there then, and its caller, one line each in $1/starts.
dir=$1
event=$(cat)
touch "$dir/running/$$"
agent=$(printf '%s' "$event" | sed -n 's/.*"session_id":"\([^"]*\)".*/\1/p')
echo "$(ls "$dir/running" | wc -l) $agent" >> "$dir/starts"
tries=0
while [ ! -e "$dir/release" ] && [ $tries -lt 3000 ]; do
    sleep 0.02
    tries=$((tries + 1))
done
rm -f "$dir/running/$$"
exit 0
