#!/usr/bin/python3
"""The conformance driver for the Python library: `driver.py ENDPOINT`.

Reads one JSON request a line on stdin, answers each with one JSON line on
stdout (its id echoed), through dsh.AsyncClient and dsh.AsyncWatcher only.
Requests may be pipelined: each runs as its own task and answers when done.
Ops: tools, call, cancel, watch, watched, bench (the protocol is in the
conformance harness's README). Exits 0 at stdin EOF, once every answer is out.
"""

import asyncio
import base64
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "components", "python"))

import dsh  # noqa: E402


def _bytes(value):
    #  A bin value the wire carried, as Typed JSON shows it
    if isinstance(value, bytes):
        return {"$bin": base64.b64encode(value).decode()}
    raise TypeError("%r is not JSON" % (value,))


def answer(reply):
    sys.stdout.write(json.dumps(reply, default=_bytes) + "\n")
    sys.stdout.flush()


def outcome(result, progress):
    """The fields every language's results are compared on, and the result
    as the library gave it (wire), which the harness checks against the
    protocol's definition and drops before comparing."""
    error = result.body.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return {"isError": result.is_error, "code": code, "text": result.text,
            "structured": result.structured, "progress": progress, "wire": {"result": result.body}}


class Driver:
    def __init__(self, endpoint):
        self.client = dsh.AsyncClient(endpoint)
        self.watcher = dsh.AsyncWatcher(endpoint)
        self.watching = None

    async def op_tools(self, request):
        entries = await self.client.tools()
        return {"tools": sorted(entries.names()), "wire": {"tools": list(entries)}}

    async def op_call(self, request):
        timeout = request.get("timeoutMs")
        result, progress = await self.client.call_counted(
            request["name"], request.get("arguments", {}), timeout=timeout / 1000.0 if timeout else None,
            agent=request.get("agent"))
        return outcome(result, progress)

    async def op_cancel(self, request):
        call_id = self.client.new_call_id()
        call = asyncio.ensure_future(self.client.call_counted(request["name"], request.get("arguments", {}),
                                                              call_id=call_id))
        await asyncio.sleep(request.get("afterMs", 0) / 1000.0)
        await self.client.cancel(call_id)
        return outcome(*await call)

    async def op_watch(self, request):
        if self.watching is None:
            self.watching = asyncio.ensure_future(self.watcher.start(10.0))
        if await asyncio.shield(self.watching):
            return {"ok": True}
        self.watching = None
        return {"ok": False, "error": "no snapshot within 10 s"}

    async def op_watched(self, request):
        return {"tools": sorted(self.watcher.tools), "resyncs": self.watcher.resyncs, "epoch": self.watcher.epoch,
                "wire": {"view": list(self.watcher.tools.values())}}

    async def op_bench(self, request):
        name, arguments = request["name"], request.get("arguments", {})
        inflight, seconds = int(request.get("inflight", 64)), float(request.get("seconds", 3))
        counts = {"calls": 0, "errors": 0}
        started = time.monotonic()
        stop_at = started + seconds

        async def worker():
            while time.monotonic() < stop_at:
                result = await self.client.call(name, arguments)
                counts["calls"] += 1
                counts["errors"] += result.is_error

        await asyncio.gather(*(worker() for _ in range(inflight)))
        elapsed = time.monotonic() - started
        return {"calls": counts["calls"], "errors": counts["errors"],
                "callsPerS": round(counts["calls"] / elapsed, 1)}

    async def handle(self, line):
        try:
            request = json.loads(line)
        except ValueError as error:
            answer({"id": None, "error": "not JSON: %s" % error})
            return
        if not isinstance(request, dict):
            answer({"id": None, "error": "a request is a JSON object"})
            return
        reply = {"id": request.get("id")}
        op = getattr(self, "op_%s" % request.get("op"), None) if isinstance(request.get("op"), str) else None
        if op is None:
            reply["error"] = 'unknown op "%s"' % request.get("op")
        else:
            try:
                reply.update(await op(request))
            except (dsh.DshError, KeyError, TypeError, ValueError) as error:
                reply["error"] = "%s: %s" % (type(error).__name__, error)
        #  What the library received goes with the answer only when asked for
        if request.get("wire") is not True:
            reply.pop("wire", None)
        answer(reply)


async def main(endpoint):
    driver = Driver(endpoint)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    pending = set()
    while line := await reader.readline():
        if line.strip():
            task = asyncio.ensure_future(driver.handle(line))
            pending.add(task)
            task.add_done_callback(pending.discard)
    await asyncio.gather(*pending)
    await driver.watcher.close()
    await driver.client.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: driver.py ENDPOINT")
    asyncio.run(main(sys.argv[1]))
