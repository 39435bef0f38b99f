#!/bin/sh
#  PreToolUse hook: deny write_file, let everything else through silently.
event=$(cat)
if printf '%s' "$event" | grep -q '"tool_name" *: *"write_file"'; then
    printf '%s\n' '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"writes are reviewed"}}'
fi
exit 0
