#!/bin/sh
#  PreToolUse hook: allow, replacing the arguments with a new message.
cat > /dev/null
printf '%s\n' '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","updatedInput":{"message":"rewritten by hook"}}}'
