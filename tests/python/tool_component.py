"""A Python component for the tests: `tool_component.py ENDPOINT [ID]`.
Prints "ready" once a broker asked for its tools; withdraws on SIGTERM."""

import asyncio
import signal
import sys
import threading
from typing import Annotated, Literal, Optional, TypedDict

import dsh

component = dsh.Component(sys.argv[2] if len(sys.argv) > 2 else "pytest-py", sys.argv[1], concurrency=4)
barrier = threading.Barrier(4, timeout=10)
cancelled = []


class Server(TypedDict):
    host: Annotated[str, "host name"]
    port: int


@component.tool(read_only=True)
def greet(name: Annotated[str, "who to greet"], times: int = 1, style: Literal["plain", "loud"] = "plain",
          tags: Optional[list[str]] = None) -> str:
    """Greet someone, once or more.

    The second paragraph is not part of the description."""
    text = " ".join(["hello " + name] * times)
    return text.upper() if style == "loud" else text


@component.tool(destructive=False, idempotent=True)
def configure(server: Server, ports: list[int], mode: Literal[1, 2] = 1) -> dict:
    """Check a nested configuration."""
    return {"host": server["host"], "ports": ports, "mode": mode}


@component.tool(concurrency_safe=True)
def slow(ctx: dsh.Context, steps: int, step_ms: int = 20) -> dict:
    """Count slowly, reporting progress at every step."""
    for step in range(1, steps + 1):
        ctx.progress(step, steps, "step %d" % step)
        ctx.wait_cancelled(step_ms / 1000)
    return {"steps": steps}


@component.tool(concurrency_safe=True)
def gate(n: int) -> str:
    """Wait until four calls are inside at once (fails if they cannot be)."""
    barrier.wait()
    return "passed %d" % n


@component.tool
def hold(ctx: dsh.Context, ms: int) -> str:
    """Hold the call until it is cancelled or ms pass."""
    if ctx.wait_cancelled(ms / 1000):
        cancelled.append(ctx.call_id)
        return "cancelled"
    return "held %d ms" % ms


@component.tool(read_only=True)
def cancelled_calls() -> dict:
    """The callIds of the calls whose handlers saw their cancel."""
    return {"callIds": cancelled}


@component.tool(read_only=True)
async def aecho(message: str, delay_ms: int = 0) -> str:
    """Echo, from a coroutine."""
    await asyncio.sleep(delay_ms / 1000)
    return message


@component.tool
def boom(message: Optional[str] = None) -> str:
    """Always fail."""
    raise RuntimeError(message or "it broke")


@component.tool
def coded() -> str:
    """Fail with a code of its own."""
    raise dsh.ToolError("no such thing", code="UNKNOWN_TOOL")


stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
if not component.start(timeout=10):
    sys.exit("no broker asked for the tools")
#  Ready when the broker lists the tools: an ANNOUNCE can still be lost on
#  PUB/SUB, and is then repaired a heartbeat later (the SYNC rule)
with dsh.Client(sys.argv[1]) as client:
    for _ in range(100):
        if "greet" in client.tools().names():
            break
        stop.wait(0.1)
print("ready", flush=True)
stop.wait()
component.stop()
