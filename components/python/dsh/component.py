"""Serving Python functions as dsh tools: the component side of the protocol
(PROTOCOL.md: The announce channel, The work socket, Liveness, Component
lifecycle), with each broker of its list followed on its own link. When to
say HELLO and HEARTBEAT and when the broker is gone is the link's (dsh.link,
PROTOCOL.md, Client liveness, the component profile); the sockets are ours:

    HELLO on FRONT (every 1 s until WELCOME) -> PUB to announce, DEALER to
    work (a routing id of its own) -> HELLO {component, generation} on WORK
    -> SYNC -> ANNOUNCE; then HEARTBEAT every heartbeatMs, CALL -> RESULT
    on the link it came on, CANCEL stops the handler; nothing heard on WORK
    for heartbeatMs x liveness (DOWN): close both and discover again on a
    new FRONT; a WORK connection made again (a handshake seen by a monitor):
    HELLO again at the next heartbeat; WITHDRAW on a clean exit. WORK is read
    from the loop's file descriptor, drained at each edge (half the cost per
    call of a pyzmq future per message).

Arguments are checked against the schema the hints give before a handler
runs (INVALID_ARGS, with the C SDK's texts). Handlers run at most
`concurrency` at a time: plain functions on a thread pool, coroutines on the
loop; `queue` more wait, and past that a call is answered OVERLOADED.
"""

import asyncio
import collections
import concurrent.futures
import contextvars
import functools
import inspect
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid

import zmq
import zmq.asyncio

from . import schema, wire
from .curve import secure
from .handshake import Handshake
from .link import COMPONENT, CONNECT, DOWN, SEND_HELLO, SEND_PING, UP, Link
from .result import Result
from .trace import ToolSpan, meta_trace

log = logging.getLogger("dsh.component")

#  Changes to the tool set are announced together once they stop for a
#  moment (a loop of tool() calls sends one ANNOUNCE, not one per tool),
#  but never later than a while after the first one not announced yet, so
#  a steady stream still announces: the C SDK's times
_ANNOUNCE_QUIET_S = 0.010
#  What an operator is shown of the component (ANNOUNCE's host, pid,
#  version and uptimeMs, PROTOCOL.md); the uptime counts from this import
_STARTED_S = time.monotonic()
_VERSION = "dsh-python/0.1.0 python/%d.%d.%d" % sys.version_info[:3]


def _presence_details():
    #  A host name that is not UTF-8 comes decoded with surrogate escapes,
    #  which cannot be encoded: each goes as "?", as a control character does
    host = "".join(c if 0x20 <= ord(c) != 0x7f and not 0xd800 <= ord(c) <= 0xdfff else "?"
                   for c in socket.gethostname())
    while len(host.encode()) > 255:
        host = host[:-1]
    details = dict(pid=os.getpid(), version=_VERSION, uptimeMs=int((time.monotonic() - _STARTED_S) * 1000))
    if host:
        details["host"] = host
    return details


_ANNOUNCE_MAX_WAIT_S = 0.250

_CONTENT_TYPES = ("text", "image", "audio", "resource_link", "resource")


class ToolError(Exception):
    """Raised by a handler: its call fails with this message and code
    (TOOL_FAILED unless given)."""

    def __init__(self, message, code="TOOL_FAILED"):
        super().__init__(message)
        self.code = code


class Context:
    """What a handler knows of its call. A handler takes it by declaring a
    parameter annotated `Context` (left out of the schema)."""

    def __init__(self, component, link, token, body):
        self._component = component
        self._link = link
        self._token = token
        self.call_id = body.get("callId")
        self.name = body.get("name")
        self.agent = body.get("agent")
        self.meta = body.get("meta") if isinstance(body.get("meta"), dict) else {}
        #  The call's trace context (a dsh.trace.TraceContext, or None): the
        #  broker's span for the dispatch to this component
        self.trace = meta_trace(self.meta)
        self.arguments = body.get("arguments")
        self._cancelled = threading.Event()
        self.done = False

    @property
    def traceparent(self):
        """The W3C traceparent the call carries (meta.traceparent, checked), or None."""
        return self.trace.traceparent if self.trace else None

    @property
    def tracestate(self):
        """The W3C tracestate the call carries, or None."""
        return self.trace.tracestate if self.trace else None

    @property
    def cancelled(self):
        """True once the broker cancelled the call (its caller did, or its
        deadline passed): stop, nothing you return is sent."""
        return self._cancelled.is_set()

    def wait_cancelled(self, timeout=None):
        """Block (a thread) until the call is cancelled or timeout s pass; True if cancelled."""
        return self._cancelled.wait(timeout)

    def progress(self, progress, total=None, message=None):
        """Report progress to the caller (MCP's notifications/progress). Safe
        from any thread."""
        body = {"callId": self.call_id, "progress": float(progress)}
        if total is not None:
            body["total"] = float(total)
        if message is not None:
            body["message"] = str(message)
        loop = self._component._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._component._send_progress, self, body)


class _Tool:
    def __init__(self, function, entry, params, context_name, is_async, takes_extra, fill_none):
        self.function = function
        self.fill_none = fill_none      # optional parameters without a Python default
        self.entry = entry
        self.params = params
        self.context_name = context_name
        self.is_async = is_async
        self.takes_extra = takes_extra


def _valid_component_id(text):
    return isinstance(text, str) and 1 <= len(text) <= 128 and all(0x21 <= ord(c) <= 0x7E for c in text)


def _content_blocks(value):
    if not all(isinstance(block, dict) and block.get("type") in _CONTENT_TYPES for block in value):
        raise TypeError("a handler's list must hold content blocks ({type: text|image|audio|resource_link|"
                        "resource, ...})")
    return list(value)


def result_body(call_id, value):
    """The RESULT body for what a handler returned: str -> a text block; dict
    -> structuredContent (and its JSON as text); a list -> content blocks;
    None -> no content; a Result -> as it is."""
    if isinstance(value, Result):
        body = dict(value.body)
        body["callId"] = call_id
        body.setdefault("content", [])
        body.setdefault("isError", False)
        return body
    body = {"callId": call_id, "content": [], "isError": False}
    if value is None:
        return body
    if isinstance(value, str):
        body["content"] = [{"type": "text", "text": value}]
    elif isinstance(value, dict):
        body["content"] = [{"type": "text", "text": json.dumps(value, ensure_ascii=False)}]
        body["structuredContent"] = value
    elif isinstance(value, (list, tuple)):
        body["content"] = _content_blocks(value)
    else:
        body["content"] = [{"type": "text", "text": json.dumps(value)}]
    return body


def _now_ms():
    return time.monotonic() * 1000


def _usable_welcome(body):
    """Whether a WELCOME can be acted on (as the C SDK checks it): its
    announce and work endpoints are strings, its heartbeatMs 1-3600000."""
    heartbeat_ms = body.get("heartbeatMs")
    return isinstance(body.get("announce"), str) and isinstance(body.get("work"), str) \
        and isinstance(heartbeat_ms, int) and not isinstance(heartbeat_ms, bool) and 0 < heartbeat_ms <= 3600000


class _Link:
    """One broker's connections, remade whenever that broker is lost; when
    is its follow's (a dsh.link of the component profile)."""

    def __init__(self, index, front):
        self.index = index
        self.front = front
        self.follow = Link(COMPONENT, [front])
        self.discovery = None           # the FRONT socket, until WELCOME
        self.hello_id = None
        self.welcome = None             # the WELCOME being acted on
        self.work = None
        self.pub = None
        self.max_message_bytes = wire.MAX_MESSAGE_BYTES
        self.handshake = None
        self.hellos_for = 1             # the WORK handshakes a HELLO was sent after
        self.outbox = collections.deque()

    @property
    def heartbeat_ms(self):
        return self.follow.heartbeat_ms

    @property
    def liveness(self):
        return self.follow.liveness


class Component:
    """A component serving the tools declared with @component.tool.

        component = dsh.Component("files")

        @component.tool(read_only=True)
        def read(path: Annotated[str, "absolute path"]) -> str:
            '''Read a file.'''
            return open(path).read()

        component.run()           # or start() / stop(), or await serve()
    """

    def __init__(self, id=None, broker=None, *, concurrency=8, queue=1024, cert=None, broker_cert=None):
        self.id = id or "py-" + uuid.uuid4().hex[:12]
        if not _valid_component_id(self.id):
            raise ValueError("a component id is 1-128 printable ASCII characters, no space: %r" % (self.id,))
        if not 1 <= concurrency <= 65536:
            raise ValueError("concurrency is 1 to 65536")
        self.endpoints = wire.brokers(broker)
        self.concurrency = concurrency
        self.queue = queue
        self.generation = int(time.time() * 1000)
        self._cert, self._broker_cert = cert, broker_cert
        secure_check = (cert, broker_cert)
        if any(secure_check) and not all(secure_check):
            raise ValueError("CURVE needs both cert= and broker_cert=")
        self._tools = {}
        self._running = {}
        self._links = []
        self._loop = None
        self._stopping = None
        self._ready = threading.Event()
        self._unannounced_at = None     # loop time of the first change not announced yet
        self._announce_due = None       # the loop's TimerHandle for it
        self._thread = None
        self._pool = None
        self._slots = None

    #  ------------------------------------------------------------------
    #  Declaring tools

    def tool(self, function=None, *, name=None, description=None, title=None, read_only=None, destructive=None,
             idempotent=None, open_world=None, concurrency_safe=False, output_schema=None, strict=None):
        """Declare a tool (a decorator, with or without arguments). The
        schema comes from the hints, the description from the docstring's
        first paragraph. The hints become the entry's annotations
        (readOnlyHint, ...); concurrency_safe (or read_only) lets a batch run
        its calls side by side."""
        def declare(function):
            self._add(function, name, description, title, read_only, destructive, idempotent, open_world,
                      concurrency_safe, output_schema, strict)
            return function
        return declare(function) if function is not None else declare

    def _add(self, function, name, description, title, read_only, destructive, idempotent, open_world,
             concurrency_safe, output_schema, strict):
        name = name or function.__name__
        if not (1 <= len(name) <= 128 and all(c.isascii() and (c.isalnum() or c in "_.-") for c in name)):
            raise ValueError("a tool name is 1-128 of [A-Za-z0-9_.-]: %r" % name)
        signature = inspect.signature(function)
        hints = inspect.get_annotations(function, eval_str=True)
        context_name = next((key for key, hint in hints.items() if hint is Context), None)
        params = schema.params_from_function(function, skip=(context_name,) if context_name else ())
        first, _ = schema.docstring_parts(function)
        entry = {"name": name, "description": description if description is not None else first,
                 "parameters": schema.params_schema(params)}
        if title:
            entry["title"] = title
        annotations = {key: value for key, value in (("readOnlyHint", read_only), ("destructiveHint", destructive),
                                                     ("idempotentHint", idempotent), ("openWorldHint", open_world))
                       if value is not None}
        if annotations:
            entry["annotations"] = annotations
        if concurrency_safe or read_only is True:
            entry["concurrencySafe"] = True
        if output_schema is not None:
            entry["outputSchema"] = output_schema
        if strict is not None:
            entry["strict"] = strict
        takes_extra = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        fill_none = [param.name for param in params
                     if signature.parameters[param.name].default is inspect.Parameter.empty]
        self._tools[name] = _Tool(function, entry, params, context_name,
                                  inspect.iscoroutinefunction(function), takes_extra, fill_none)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._tools_changed)

    def remove(self, name):
        """Stop serving a tool."""
        self._tools.pop(name, None)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._tools_changed)

    def entries(self):
        """The tool entries this component announces."""
        return [tool.entry for tool in self._tools.values()]

    #  ------------------------------------------------------------------
    #  Running

    async def serve(self):
        """Serve until stop(): one link per broker of the list."""
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._context = zmq.asyncio.Context()
        #  WORK is read from the loop's FD, draining it, not through a
        #  pyzmq future per message: a plain socket, of a plain context
        self._work_context = zmq.Context()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.concurrency,
                                                           thread_name_prefix="dsh-tool")
        self._slots = asyncio.Semaphore(self.concurrency)
        self._links = [_Link(index, front) for index, front in enumerate(self.endpoints)]
        try:
            await asyncio.gather(*(self._follow(link) for link in self._links))
        finally:
            for task, context in list(self._running.values()):
                context._cancelled.set()
                task.cancel()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._context.term()
            self._work_context.term()
            self._loop = None
            self._unannounced_at = self._announce_due = None

    def stop(self):
        """Withdraw from every broker and stop serving. Safe from any thread."""
        loop = self._loop
        if loop is not None and self._stopping is not None:
            loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
            self._thread = None

    def run(self):
        """Serve in this thread until SIGINT or SIGTERM."""
        async def main():
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, self.stop)
            await self.serve()
        asyncio.run(main())

    def start(self, timeout=5.0):
        """Serve in a thread of its own; True once a broker has asked for the
        tools (within timeout s)."""
        self._thread = threading.Thread(target=lambda: asyncio.run(self.serve()), name="dsh-component",
                                        daemon=True)
        self._thread.start()
        return self._ready.wait(timeout)

    def wait_ready(self, timeout=None):
        return self._ready.wait(timeout)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    #  ------------------------------------------------------------------
    #  One broker's lifecycle

    async def _follow(self, link):
        """Runs the link's table for one broker until stop()."""
        link.follow.start(_now_ms())
        try:
            while not self._stopping.is_set():
                await self._react(link)
                due = link.follow.tick(_now_ms())
                await self._react(link)
                wait_s = None if due is None else max(due - _now_ms(), 0) / 1000.0
                if link.discovery is not None:
                    #  Polled a little at a time, so a stop is seen
                    await self._discover(link, 0.25 if wait_s is None else min(wait_s, 0.25))
                else:
                    try:
                        await asyncio.wait_for(self._stopping.wait(), wait_s)
                    except asyncio.TimeoutError:
                        pass
        finally:
            self._close_discovery(link)
            if link.work is not None:
                self._close(link, withdraw=self._stopping.is_set())

    async def _react(self, link):
        """Does what the link's events say, in order."""
        for event in link.follow.events():
            if event.type == CONNECT:
                #  A new FRONT connection: the old one may lead to a host that is gone
                if link.work is not None:
                    self._close(link, withdraw=False)
                self._close_discovery(link)
                front = self._context.socket(zmq.DEALER)
                wire.keepalive(front)
                secure(front, self._cert, self._broker_cert)
                front.connect(link.front)
                link.discovery = front
                link.hello_id = uuid.uuid4().hex
            elif event.type == SEND_HELLO and link.discovery is not None:
                link.discovery.send_multipart(wire.dealer_message("HELLO", {"id": link.hello_id,
                                                                            "component": self.id}))
            elif event.type == UP:
                self._close_discovery(link)
                await self._connect(link, link.welcome)
            elif event.type == SEND_PING and link.work is not None:
                self._beat(link)
            elif event.type == DOWN:
                log.warning("%s: nothing from the broker at %s for %d ms; finding it again", self.id,
                            link.front, event.silence_ms)

    async def _discover(self, link, wait_s):
        """Waits at most wait_s for a WELCOME that echoes the HELLO on FRONT."""
        front = link.discovery
        if not await front.poll(wait_s * 1000):
            return
        while link.discovery is front:
            try:
                command, _, body = wire.parse_dealer(await front.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return
            except wire.WireError:
                continue
            if command == "WELCOME" and body.get("id") == link.hello_id:
                if body.get("protocol") != 1:
                    log.error("%s: the broker at %s speaks protocol %r, not 1", self.id, link.front,
                              body.get("protocol"))
                    continue
                if not _usable_welcome(body):
                    #  An untrusted body: one that names no endpoints cannot
                    #  be acted on; the link goes on saying HELLO
                    log.warning("%s: malformed WELCOME from %s; asking again", self.id, link.front)
                    continue
                link.welcome = body
                link.follow.welcome(_now_ms(), body.get("broker"), body.get("heartbeatMs"), body.get("liveness"))
                return

    def _close_discovery(self, link):
        if link.discovery is not None:
            link.discovery.close(linger=0)
            link.discovery = None

    async def _connect(self, link, welcome):
        max_bytes = welcome.get("maxMessageBytes")
        link.max_message_bytes = max_bytes if isinstance(max_bytes, int) and 0 < max_bytes <= 2**31 - 1 \
            else wire.MAX_MESSAGE_BYTES
        link.pub = self._context.socket(zmq.PUB)
        wire.keepalive(link.pub, link.heartbeat_ms, link.liveness)
        secure(link.pub, self._cert, self._broker_cert)
        pub_monitor = link.pub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        link.pub.connect(wire.resolve(welcome["announce"], link.front))
        #  A PUB drops what it sends before its connection is up: the
        #  ANNOUNCE that answers the SYNC would be lost (and repaired only
        #  by the SYNC rule a heartbeat later), so WORK waits for it a while
        try:
            await asyncio.wait_for(pub_monitor.recv_multipart(), link.heartbeat_ms / 1000.0)
        except asyncio.TimeoutError:
            pass
        finally:
            link.pub.disable_monitor()
            pub_monitor.close(linger=0)
        link.work = self._work_context.socket(zmq.DEALER)
        link.work.setsockopt(zmq.ROUTING_ID, ("%s %s" % (self.id, uuid.uuid4())).encode())
        wire.keepalive(link.work, link.heartbeat_ms, link.liveness)
        secure(link.work, self._cert, self._broker_cert)
        link.handshake = Handshake(link.work, bool(self._cert))
        link.hellos_for = 1
        link.work.connect(wire.resolve(welcome["work"], link.front))
        self._loop.add_reader(link.work.getsockopt(zmq.FD), self._drain, link)
        self._hello(link)

    def _close(self, link, withdraw):
        if withdraw:
            self._presence(link, "WITHDRAW")
        self._loop.remove_reader(link.work.getsockopt(zmq.FD))
        link.handshake.close()
        link.work.close(linger=0)
        link.outbox.clear()
        link.pub.close(linger=1000 if withdraw else 0)
        link.work = link.pub = None

    def _hello(self, link):
        self._send_work(link, wire.dealer_message("HELLO", {"component": self.id, "generation": self.generation}))

    def _send_work(self, link, frames):
        """Send on WORK now, or after what waits for room (high-water mark)."""
        if link.work is None:
            return
        if not link.outbox:
            try:
                link.work.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                link.outbox.append(frames)
        else:
            link.outbox.append(frames)
        #  A send may take in messages and use up the FD's edge
        if link.work.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            self._loop.call_soon(self._drain, link)

    def _presence(self, link, command, body=None):
        """HEARTBEAT or WITHDRAW, or an ANNOUNCE's body (packed)."""
        if link.pub is not None:
            #  Reading ZMQ_EVENTS makes libzmq take in the broker's
            #  subscription now; a send alone may skip that (it throttles
            #  command processing), and a PUB drops what no subscription wants
            link.pub.getsockopt(zmq.EVENTS)
            if body is None:
                body = wire.pack(dict(component=self.id, generation=self.generation))
            link.pub.send_multipart([wire.PROTOCOL, command.encode(), body])

    def _announce(self, link):
        """The tool set, in one ANNOUNCE if it fits in the broker's messages,
        else in parts, back to back (PROTOCOL.md, The announce channel)."""
        def too_large(entry, size):
            log.warning("%s: tool %s is %d bytes, more than an ANNOUNCE to the broker at %s can carry (its "
                        "messages are at most %d bytes): it is not announced there", self.id, entry.get("name"),
                        size, link.front, link.max_message_bytes)
        head = dict(component=self.id, generation=self.generation, concurrency=self.concurrency,
                    **_presence_details())
        for body in wire.announce_bodies(head, self.entries(), link.max_message_bytes, too_large):
            self._presence(link, "ANNOUNCE", body)
        self._ready.set()

    def _tools_changed(self):
        """The tool set changed: announced once changes stop for
        _ANNOUNCE_QUIET_S, and at most _ANNOUNCE_MAX_WAIT_S after the first
        one not announced yet."""
        now = self._loop.time()
        if self._unannounced_at is None:
            self._unannounced_at = now
        if self._announce_due is not None:
            self._announce_due.cancel()
        due = min(now + _ANNOUNCE_QUIET_S, self._unannounced_at + _ANNOUNCE_MAX_WAIT_S)
        self._announce_due = self._loop.call_at(due, self._announce_changes)

    def _announce_changes(self):
        """A new tool set: a new generation, said on WORK before the ANNOUNCE
        (PROTOCOL.md, Presence follows the owner's generation)."""
        self._unannounced_at = self._announce_due = None
        self.generation += 1
        for link in self._links:
            if link.work is not None:
                self._hello(link)
                self._announce(link)

    def _beat(self, link):
        """A heartbeat (SEND_PING): HEARTBEAT, and HELLO on a WORK connection made again."""
        self._presence(link, "HEARTBEAT")
        #  Every WORK connection after the first (a restarted broker, a
        #  cut link) needs a HELLO, which the SYNC that answers repairs
        link.handshake.poll()
        if link.handshake.successes > link.hellos_for:
            link.hellos_for = link.handshake.successes
            self._hello(link)
        self._drain(link)

    def _drain(self, link):
        """Everything WORK holds, then whatever waits to be sent. A ZeroMQ
        FD is edge-triggered: only an empty queue rearms it."""
        work = link.work
        while work is not None and work is link.work:
            try:
                frames = work.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            link.follow.heard(_now_ms())
            try:
                command, token, body = wire.parse_dealer(frames)
            except wire.WireError as error:
                log.warning("%s: dropped a message from %s: %s", self.id, link.front, error)
                continue
            if command == "SYNC":
                self._announce(link)
            elif command == "CALL" and token is not None and len(token) == 8:
                self._take_call(link, token, body)
            elif command == "CANCEL" and token is not None:
                self._cancel(link, token)
            elif command == "REFUSED":
                if "component" in body:
                    log.error("%s: the broker at %s refused the component id: %s", self.id, link.front,
                              body.get("reason"))
                else:
                    log.error("%s: tool %s refused by %s: %s", self.id, body.get("tool"), link.front,
                              body.get("reason"))
        while link.outbox and link.work is not None:
            try:
                link.work.send_multipart(link.outbox[0], zmq.NOBLOCK)
            except zmq.Again:
                return
            link.outbox.popleft()

    #  ------------------------------------------------------------------
    #  Calls

    def _send_result(self, link, token, body):
        self._send_work(link, wire.dealer_message("RESULT", body, token=token))

    def _send_progress(self, context, body):
        if not context.done and not context.cancelled:
            self._send_work(context._link, wire.dealer_message("PROGRESS", body, token=context._token))

    def _take_call(self, link, token, body):
        call_id = body.get("callId")
        if not isinstance(call_id, str) or not isinstance(body.get("name"), str):
            self._send_result(link, token, wire.error_result(
                call_id if isinstance(call_id, str) else "", "BAD_REQUEST",
                'field "callId" and field "name" must be strings'))
            return
        tool = self._tools.get(body["name"])
        if tool is None:
            self._send_result(link, token, wire.error_result(call_id, "UNKNOWN_TOOL",
                                                             'Error: unknown tool "%s"' % body["name"]))
            return
        if len(self._running) >= self.concurrency + self.queue:
            self._send_result(link, token, wire.error_result(call_id, "OVERLOADED",
                                                             'Error: component "%s" is overloaded' % self.id))
            return
        context = Context(self, link, token, body)
        key = (link.index, token)
        task = self._loop.create_task(self._run(link, token, tool, context))
        self._running[key] = (task, context)
        task.add_done_callback(lambda _: self._running.pop(key, None))

    def _cancel(self, link, token):
        entry = self._running.get((link.index, token))
        if entry is None:
            return
        task, context = entry
        context._cancelled.set()
        #  A coroutine stops at its next await; a thread sees ctx.cancelled
        if self._tools.get(context.name) is None or self._tools[context.name].is_async:
            task.cancel()

    async def _run(self, link, token, tool, context):
        async with self._slots:
            if context.cancelled:
                return
            #  An execute_tool span when the application has OpenTelemetry (dsh.trace)
            with ToolSpan(context.name, context.call_id, context.arguments, context.trace) as span:
                violations = schema.validate(tool.params, context.arguments)
                if violations:
                    body = wire.error_result(context.call_id, "INVALID_ARGS",
                                             "Error: invalid arguments: " + "; ".join(violations))
                else:
                    body = await self._invoke(tool, context)
                span.finish(body)
        context.done = True
        if not context.cancelled:
            self._send_result(link, token, body)

    async def _invoke(self, tool, context):
        arguments = context.arguments
        names = {param.name for param in tool.params}
        kwargs = {key: value for key, value in arguments.items()
                  if key in names or (tool.takes_extra and isinstance(key, str) and key.isidentifier())}
        for name in tool.fill_none:
            kwargs.setdefault(name, None)
        if tool.context_name:
            kwargs[tool.context_name] = context
        try:
            if tool.is_async:
                value = await tool.function(**kwargs)
            else:
                #  In this task's context (its current span, say), as asyncio.to_thread does
                value = await self._loop.run_in_executor(self._pool, functools.partial(
                    contextvars.copy_context().run, tool.function, **kwargs))
            return result_body(context.call_id, value)
        except asyncio.CancelledError:
            raise
        except ToolError as error:
            return wire.error_result(context.call_id, error.code, "Error: %s" % (str(error) or "handler failed"))
        except Exception as error:  # noqa: BLE001 - a handler's failure is its call's result
            log.debug("%s: %s failed", self.id, context.name, exc_info=True)
            return wire.error_result(context.call_id, "TOOL_FAILED", "Error: %s" % (str(error) or "handler failed"))


__all__ = ["Component", "Context", "ToolError", "result_body"]
