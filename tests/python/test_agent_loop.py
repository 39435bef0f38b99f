"""The example agent loop (components/python/examples/agent_loop.py) against
a real broker and dsh-demo: its scripted model's calls and what it read."""

import os
import subprocess

from conftest import PACKAGE, PYTHON


def test_agent_loop_example(broker, demo):
    done = subprocess.run([PYTHON, os.path.join(PACKAGE, "examples", "agent_loop.py"), "--broker",
                           broker.endpoint], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "system: You are an agent with 6 tools."
    assert 'assistant -> echo({"message": "hello from the agent"})' in lines
    assert "tool: hello from the agent" in lines and "tool: counted to 3" in lines
    assert "tool: Error: a tool can fail" in lines
    assert 'tool: Error: invalid arguments: missing required property "message"' in lines
    assert lines[-1] == ('assistant: Done. The tools said: hello from the agent | counted to 3 | '
                         'Error: a tool can fail | Error: invalid arguments: missing required property "message"')
