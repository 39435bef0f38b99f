#!/usr/bin/python3
"""An agent loop on dsh, with a scripted "model" in place of a real one.

    agent_loop.py [--broker tcp://127.0.0.1:7570]

The loop is the one every tool-using agent runs: offer the tools to the
model (here rendered for OpenAI's chat API), let it answer with tool calls,
run those calls (through the broker, as one batch: concurrency-safe calls
side by side, the rest in order), hand the results back as tool messages,
and repeat until the model answers in words. Swap ScriptedModel for a real
client (openai.chat.completions.create(messages=..., tools=...)) and nothing
else changes. Needs dsh-demo's tools (echo, count, fail) on the broker.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import dsh  # noqa: E402


class ScriptedModel:
    """Answers like a chat model would, from a script: each turn is a list
    of tool calls, and after the script a final answer that quotes the tool
    results it was given. Like a real model it can only call tools it was
    offered."""

    def __init__(self, turns):
        self.turns = list(turns)

    def respond(self, messages, tools):
        offered = {tool["function"]["name"] for tool in tools}
        if self.turns:
            calls = self.turns.pop(0)
            missing = [name for name, _ in calls if name not in offered]
            if missing:
                return {"role": "assistant", "content": "I cannot do that: no tool %s." % ", ".join(missing)}
            return {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_%d_%d" % (len(messages), index), "type": "function",
                 "function": {"name": name, "arguments": json.dumps(arguments)}}
                for index, (name, arguments) in enumerate(calls)]}
        seen = [message["content"] for message in messages if message["role"] == "tool"]
        return {"role": "assistant", "content": "Done. The tools said: " + " | ".join(seen)}


def run(client, model, task, max_turns=8):
    """The agent loop; returns the transcript (OpenAI chat messages)."""
    tools = client.tools().to_openai()
    messages = [{"role": "system", "content": "You are an agent with %d tools." % len(tools)},
                {"role": "user", "content": task}]
    for _ in range(max_turns):
        reply = model.respond(messages, tools)
        messages.append(reply)
        calls = reply.get("tool_calls")
        if not calls:
            return messages
        results = client.call_batch([{"name": call["function"]["name"],
                                      "arguments": json.loads(call["function"]["arguments"])} for call in calls])
        for call, result in zip(calls, results):
            #  A failed call goes back to the model too: it reads the error and adapts
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result.text})
    return messages


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", default=None, help="front endpoint(s) (default $DSH_BROKER, else :7570)")
    options = parser.parse_args()
    model = ScriptedModel([
        [("echo", {"message": "hello from the agent"}), ("count", {"to": 3, "step_ms": 1})],
        [("fail", {"message": "a tool can fail"})],
        [("echo", {})],
    ])
    with dsh.Client(options.broker) as client:
        transcript = run(client, model, "Say hello, count to three, and show me a failure.")
    for message in transcript:
        if message.get("tool_calls"):
            for call in message["tool_calls"]:
                print("assistant -> %s(%s)" % (call["function"]["name"], call["function"]["arguments"]))
        else:
            print("%s: %s" % (message["role"], message["content"]))


if __name__ == "__main__":
    main()
