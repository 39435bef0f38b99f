#!/bin/sh
#  Blocks every call the Claude Code way: exit code 2, reason on stderr.
cat > /dev/null
echo "blocked by exit code" >&2
exit 2
