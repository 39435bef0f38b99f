#!/bin/sh
#  PostToolUse hook: adds a note for the agent to the result.
cat > /dev/null
printf '%s\n' '{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"checked by post hook"}}'
