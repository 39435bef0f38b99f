"""Calling tools and querying the registry through a broker's FRONT.

AsyncClient holds one DEALER to the broker, so any number of calls are in
flight at once, matched to their answers by callId; queries are matched by
the `id` the broker echoes. A ticker answers every call whose reply does not
come by its own deadline (timeoutMs + 5 s, as the C SDK's
dsh_client_call_send: PROTOCOL.md, Execution semantics) and runs the link
(dsh.link, PROTOCOL.md, Client liveness), which watches the broker while
anything is awaited and says when to PING, when the broker is gone (DOWN)
or restarted, and which broker to connect to next. On DOWN or RESTARTED the
calls in flight are answered BROKER_GONE, or, when they cannot have run (the
broker was never reached) or their tool is read-only or idempotent by the
last LIST, sent to the next broker until every broker has had them; so is a
call answered UNKNOWN_TOOL when it is all the client awaits. Queries go
again too, but one that decides (a CONTROL, a PINS accept, reject or forget)
and was at a broker reached, which could apply it twice, is answered
BROKER_GONE. With several brokers the client asks for LIST on its first
call, at once after each failover, and when its copy is older than 30 s.
So every call gets exactly one Result and nothing waits forever.

The socket is read from the loop's file descriptor, draining it at each
edge, rather than through a pyzmq future per message: that costs half as
much per call.

Client is the same client for code without an event loop: it runs an
AsyncClient on a loop of its own, in a thread.
"""

import asyncio
import collections
import inspect
import itertools
import logging
import time
import uuid

import zmq

from . import wire
from .curve import secure
from .handshake import Handshake
from .link import CLIENT, CONNECT, DOWN, RESTARTED, SEND_PING, Link
from .loopthread import LoopThread
from .render import Tools
from .result import Result
from .trace import with_trace

log = logging.getLogger("dsh.client")

#  How often the ticker looks at deadlines and at the broker's silence
TICK_S = 0.05
QUERY_TIMEOUT_S = 5.0
#  How long past its deadline a call waits for the broker's answer before
#  the client answers it TIMEOUT itself (PROTOCOL.md, Execution semantics:
#  the C SDK's margin for a call it answers itself)
CALL_MARGIN_MS = 5000
#  With several brokers: how old the list of tools whose calls may be sent
#  again can get before a call asks for it afresh
TOOLS_MAX_AGE_S = 30
#  How long a closing client's CANCELs may wait to leave, at most
_CLOSE_LINGER_MS = 1000


class DshError(Exception):
    """A query the broker did not answer (code TIMEOUT or BROKER_GONE) or
    answered with ERROR (its code, e.g. UNKNOWN_TOOL). Tool calls never
    raise it: their failures are Results."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


class _Call:
    __slots__ = ("future", "deadline", "on_progress", "progress", "cancelled", "name", "frames", "tried")

    def __init__(self, future, deadline, on_progress, name, frames, broker_index):
        self.future = future
        self.deadline = deadline
        self.on_progress = on_progress
        self.progress = 0
        self.cancelled = False
        self.name = name
        self.frames = frames            # the CALL as sent, to send again elsewhere
        self.tried = {broker_index}     # the brokers that have had it


class _Query:
    __slots__ = ("future", "deadline", "frames", "command", "decides", "tried")

    def __init__(self, future, deadline, frames, command, body, broker_index):
        self.future = future
        self.deadline = deadline
        self.frames = frames
        self.command = command
        #  A CONTROL, and a PINS that is not a list or show, change state:
        #  sent again, one could apply twice (Client liveness)
        op = body.get("op")
        self.decides = command == "CONTROL" or command == "PINS" and isinstance(op, str) and op not in ("list", "show")
        self.tried = {broker_index}     # the brokers that have had it


def _may_run_twice(entry):
    """Whether a call to this tool may be sent again to another broker."""
    annotations = entry.get("annotations")
    return isinstance(annotations, dict) and (
        annotations.get("readOnlyHint") is True or annotations.get("idempotentHint") is True)


def _is_safe(entry):
    """Whether the registry's entry lets calls run side by side."""
    annotations = entry.get("annotations")
    return entry.get("concurrencySafe") is True or (
        isinstance(annotations, dict) and annotations.get("readOnlyHint") is True)


def batch_groups(calls, safe_names):
    """The batch partition of `dsh call --batch`: runs of consecutive calls to
    concurrency-safe tools go together, any other call alone, in order.
    Returns lists of positions."""
    groups, index = [], 0
    while index < len(calls):
        last = index + 1
        if calls[index]["name"] in safe_names:
            while last < len(calls) and calls[last]["name"] in safe_names:
                last += 1
        groups.append(list(range(index, last)))
        index = last
    return groups


class AsyncClient:
    """A client on asyncio. Use inside a running loop; close() when done (or
    `async with`)."""

    def __init__(self, broker=None, *, cert=None, broker_cert=None, context=None):
        self.endpoints = wire.brokers(broker)
        #  Which broker, and when it is gone: the link's; the socket is ours
        self._link = Link(CLIENT, self.endpoints)
        self._handshakes = 0            # the handshake watch's count at the connect
        self._resend = []               # _Call and _Query kept for the next connection
        self._cert, self._broker_cert = cert, broker_cert
        self._context = context or zmq.Context.instance()
        self._sock = None
        self._loop = None
        self._outbox = collections.deque()
        self._ticker = None
        self._calls = {}
        self._queries = {}
        self._ids = itertools.count(1)
        self._prefix = "py-" + uuid.uuid4().hex[:12] + "-"
        self._closed = False
        #  With several brokers: the tools whose calls may be sent again, from the last LIST
        self._retry_safe = set()
        self._retry_safe_at = None      # when it was last asked for
        self._own_lists = set()         # the ids of the client's own LISTs awaited
        self._tools_due = False         # the next connection asks for LIST at once
        self._hello_id = None
        self._wrong_protocol = None

    @property
    def endpoint(self):
        """The front endpoint in use."""
        return self._link.endpoint or self.endpoints[0]

    @property
    def _index(self):
        return self.endpoints.index(self.endpoint)

    @property
    def heartbeat_ms(self):
        """The broker's heartbeat (from its PONG), else the default."""
        return self._link.heartbeat_ms

    @property
    def liveness(self):
        return self._link.liveness

    @property
    def broker_id(self):
        """The instance id the broker's first PONG on this connection named."""
        return self._link.instance

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    @staticmethod
    def _now_ms():
        return time.monotonic() * 1000

    def _react(self):
        """Does what the link's events say, in order."""
        for event in self._link.events():
            if event.type == CONNECT:
                self._connect(event.endpoint)
            elif event.type == SEND_PING:
                self._send("PING", {})
            elif event.type == DOWN:
                self._fail_over(event.endpoint, "went silent (no answer for %d ms)" % event.silence_ms,
                                event.reached)
            elif event.type == RESTARTED:
                log.warning("dsh client: the broker at %s restarted (instance %s, was %s)", event.endpoint,
                            event.instance, event.was)
                self._fail_over(event.endpoint, "restarted", True)

    def _connect(self, endpoint):
        """A new connection to endpoint (CONNECT), and what was kept for it."""
        if self._sock is not None:
            self._disconnect()
        sock = self._context.socket(zmq.DEALER)
        wire.heal(sock, self.heartbeat_ms, self.liveness)
        secure(sock, self._cert, self._broker_cert)
        self._handshake = Handshake(sock, bool(self._cert))
        self._handshakes = 0
        sock.connect(endpoint)
        self._sock = sock
        self._loop.add_reader(sock.getsockopt(zmq.FD), self._drain)
        #  The FD signals edges only: anything already queued is read now
        self._loop.call_soon(self._drain)
        #  Its WELCOME says which protocol the broker speaks
        self._hello_id = "%shello%d" % (self._prefix, next(self._ids))
        self._wrong_protocol = None
        self._send("HELLO", {"id": self._hello_id})
        index = self.endpoints.index(endpoint)
        resend, self._resend = self._resend, []
        for item in resend:
            item.tried.add(index)
            self._post(item.frames)
        #  The old broker's answers to the client's own LISTs never come;
        #  after a failover the next broker is asked at once which calls
        #  may go again (Client liveness)
        self._own_lists.clear()
        if self._tools_due:
            self._tools_due = False
            self._ask_tools()

    def _ask_tools(self):
        """A LIST of the client's own (not awaited): its answer says which
        tools' calls may be sent again to another broker."""
        if len(self.endpoints) < 2:
            return
        list_id = "%stools%d" % (self._prefix, next(self._ids))
        self._own_lists.add(list_id)
        self._retry_safe_at = time.monotonic()
        self._send("LIST", {"id": list_id})

    def _learn_tools(self, entries):
        self._retry_safe = {entry.get("name") for entry in entries if isinstance(entry, dict) and _may_run_twice(entry)}

    def _disconnect(self, linger_ms=0):
        self._loop.remove_reader(self._sock.getsockopt(zmq.FD))
        self._handshake.close()
        self._sock.close(linger=linger_ms)
        self._sock = None
        self._outbox.clear()

    def _ensure(self):
        if self._closed:
            raise RuntimeError("the client is closed")
        if self._sock is None:
            self._loop = asyncio.get_running_loop()
            self._link.start(self._now_ms())
            self._react()
            self._ticker = self._loop.create_task(self._tick())

    def _awaiting(self):
        """Something is awaited: the link watches the broker."""
        self._link.watch(self._now_ms(), True)
        self._react()

    async def close(self):
        """Cancel the calls in flight at the broker (CANCEL each), answer
        whatever is open as cancelled here and close the socket."""
        if self._closed:
            return
        self._closed = True
        if self._ticker:
            self._ticker.cancel()
        #  Nobody will read their results: the broker and the components
        #  stop working on them. The socket lingers a little, so the
        #  CANCELs go out, and never long if the broker is gone
        cancels = 0
        for call_id, call in list(self._calls.items()):
            if self._sock is not None and not call.cancelled:
                try:
                    self._sock.send_multipart(wire.dealer_message("CANCEL", {"callId": call_id}), zmq.NOBLOCK)
                    cancels += 1
                except zmq.ZMQError:
                    pass
            self._finish(call_id, wire.error_result(call_id, "CANCELLED", "Error: the client was closed"))
        for query in self._queries.values():
            if not query.future.done():
                query.future.set_exception(DshError("CANCELLED", "the client was closed"))
        self._queries.clear()
        if self._sock is not None:
            self._disconnect(_CLOSE_LINGER_MS if cancels else 0)

    #  ------------------------------------------------------------------
    #  Receiving

    def _drain(self):
        """Everything the socket holds, and whatever send waits for room.
        A ZeroMQ FD is edge-triggered: only an empty queue rearms it, so
        this reads until EAGAIN (and every send checks again after)."""
        sock = self._sock
        while sock is not None and sock is self._sock:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            self._link.heard(self._now_ms())
            try:
                command, _, body = wire.parse_dealer(frames)
            except wire.WireError:
                continue
            self._dispatch(command, body)
            self._react()
        self._flush()

    def _flush(self):
        while self._outbox and self._sock is not None:
            try:
                self._sock.send_multipart(self._outbox[0], zmq.NOBLOCK)
            except zmq.Again:
                return
            self._outbox.popleft()

    def _dispatch(self, command, body):
        if command == "RESULT":
            call_id = body.get("callId")
            call = self._calls.get(call_id) if isinstance(call_id, str) else None
            if call is not None:
                if call.cancelled:
                    body = wire.error_result(call_id, "CANCELLED", "Error: the call was cancelled")
                elif self._pass_over(call, body):
                    return
                self._finish(call_id, body)
            return
        if command == "PROGRESS":
            call = self._calls.get(body.get("callId"))
            if call is not None:
                call.progress += 1
                if call.on_progress is not None:
                    self._notify(call.on_progress, body)
            return
        if command == "PONG":
            self._link.pong(self._now_ms(), body.get("broker"), body.get("heartbeatMs"), body.get("liveness"))
        elif command == "WELCOME" and body.get("id") == self._hello_id and body.get("protocol") != 1:
            self._wrong_protocol = "the broker speaks protocol %r, not 1" % (body.get("protocol"),)
        elif command == "TOOLS" and _hashable(body.get("id")) and body.get("id") in self._own_lists:
            self._own_lists.discard(body.get("id"))
            if isinstance(body.get("tools"), list):
                self._learn_tools(body["tools"])
            return
        query = self._queries.pop(body.get("id"), None) if _hashable(body.get("id")) else None
        if query is not None and not query.future.done():
            query.future.set_result((command, body))

    @staticmethod
    def _notify(callback, body):
        progress = {"progress": body.get("progress"), "total": body.get("total"),
                    "message": body.get("message")}
        try:
            outcome = callback(progress)
            if inspect.isawaitable(outcome):
                asyncio.ensure_future(outcome)
        except Exception:  # noqa: BLE001 - a caller's callback must not stop the client
            pass

    def _finish(self, call_id, body):
        call = self._calls.pop(call_id, None)
        if call is not None and not call.future.done():
            result = Result(body)
            result.body.setdefault("callId", call_id)
            call.future.set_result((result, call.progress))

    #  ------------------------------------------------------------------
    #  Deadlines and the broker's liveness

    async def _tick(self):
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self._check(time.monotonic())
            except Exception:  # noqa: BLE001 - the ticker is what keeps every promise: it must not stop
                log.exception("dsh client: the ticker hit an error; going on")

    def _check(self, now):
        """Deadlines, and the broker's liveness."""
        self._drain()
        for call_id, call in list(self._calls.items()):
            if now >= call.deadline:
                self._finish(call_id, wire.error_result(
                    call_id, "CANCELLED" if call.cancelled else "TIMEOUT",
                    "Error: the call was cancelled" if call.cancelled
                    else "Error: no answer from the broker by the call's deadline"))
        for query_id, query in list(self._queries.items()):
            if now >= query.deadline:
                del self._queries[query_id]
                if not query.future.done():
                    query.future.set_exception(DshError("TIMEOUT", "no reply from the broker at %s in time"
                                                        % self.endpoint))
        self._watch(now)

    def _watch(self, now):
        """The link, told of the connection and of whether anything is awaited."""
        now_ms = now * 1000
        self._handshake.poll()
        if self._handshake.successes > self._handshakes:
            self._handshakes = self._handshake.successes
            self._link.connected(now_ms)
        if not self._calls and not self._queries:
            self._link.watch(now_ms, False)
        elif self._handshake.failure or self._wrong_protocol:
            self._refused()
        else:
            self._link.tick(now_ms)
        self._react()

    def _fail_over(self, endpoint, why, reached):
        """The broker at endpoint is gone (DOWN) or restarted: answer each
        call in flight BROKER_GONE ("the broker at X <why> with the call in
        flight"), or keep it for the next connection when it cannot have run
        (never reached) or may run twice (read-only or idempotent by the last
        LIST) and some broker has not had it. Queries are kept likewise, but
        one that decides (a CONTROL, a PINS accept, reject or forget), which
        may have applied at a broker reached, is answered BROKER_GONE."""
        count = len(self.endpoints)
        for call_id, call in list(self._calls.items()):
            if call.cancelled:
                self._finish(call_id, wire.error_result(call_id, "CANCELLED", "Error: the call was cancelled"))
            elif len(call.tried) < count and (not reached or call.name in self._retry_safe):
                self._resend.append(call)
            else:
                self._finish(call_id, wire.error_result(
                    call_id, "BROKER_GONE", "Error: the broker at %s %s with the call in flight" % (endpoint, why)))
        for query_id, query in list(self._queries.items()):
            lost = query.decides and reached
            if not lost and len(query.tried) < count:
                self._resend.append(query)
                continue
            del self._queries[query_id]
            if query.future.done():
                continue
            if lost:
                query.future.set_exception(DshError("BROKER_GONE", "Error: the broker at %s was lost with the %s in "
                                                    "flight; it may or may not have been applied"
                                                    % (endpoint, query.command)))
            else:
                query.future.set_exception(DshError("BROKER_GONE", "the broker at %s %s" % (endpoint, why)))
        #  Which calls may go again: asked of the next broker as soon as
        #  the client is connected to it
        self._tools_due = True

    def _refused(self):
        """The broker refused the handshake (the keys), or speaks another
        protocol: no useful reply can come.
        With other brokers this one is passed over; alone, whatever awaits
        it is answered now instead of at its deadline."""
        if len(self.endpoints) > 1:
            why = "refused this client: %s" % (self._handshake.failure or self._wrong_protocol)
            self._fail_over(self.endpoint, why, self._link.reached)
            self._link.move(self._now_ms())
            self._react()
            return
        reason = "cannot talk to broker at %s: %s" % (self.endpoint, self._handshake.failure or self._wrong_protocol)
        for call_id, call in list(self._calls.items()):
            self._finish(call_id, wire.error_result(call_id, "CANCELLED" if call.cancelled else "BROKER_GONE",
                                                    "Error: " + reason))
        for query in self._queries.values():
            if not query.future.done():
                query.future.set_exception(DshError("BROKER_GONE", reason))
        self._queries.clear()

    def _pass_over(self, call, body):
        """UNKNOWN_TOOL from one of several brokers, for the only thing this
        client awaits: the call goes to the next broker that has not had it
        (a restarted broker may not know a tool yet). True if it went."""
        error = body.get("error")
        if not (isinstance(error, dict) and error.get("code") == "UNKNOWN_TOOL") or len(self._calls) != 1 \
                or self._queries or len(call.tried) >= len(self.endpoints):
            return False
        self._resend.append(call)
        self._tools_due = True
        self._link.move(self._now_ms())
        self._react()
        return True

    #  ------------------------------------------------------------------
    #  Requests

    def _post(self, frames):
        """Send now, or queue behind what waits for room (the high-water
        mark); the ticker and the reader flush it."""
        if not self._outbox:
            try:
                self._sock.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                self._outbox.append(frames)
        else:
            self._outbox.append(frames)
        #  A send may have taken in messages and used up the FD's edge
        if self._sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            self._loop.call_soon(self._drain)

    def _send(self, command, body):
        self._post(wire.dealer_message(command, body))

    async def request(self, command, body=None, *, timeout=QUERY_TIMEOUT_S):
        """A FRONT query (PING, LIST, GET, SNAPSHOT, STATS, CHAIN, CONTROL):
        its reply body, or DshError for ERROR or no reply within timeout s."""
        self._ensure()
        query_id = "%sq%d" % (self._prefix, next(self._ids))
        body = dict(body or {}, id=query_id)
        frames = wire.dealer_message(command, body)
        future = asyncio.get_running_loop().create_future()
        self._queries[query_id] = _Query(future, time.monotonic() + timeout, frames, command, body, self._index)
        self._awaiting()
        self._post(frames)
        try:
            reply_command, reply = await future
        finally:
            self._queries.pop(query_id, None)
        if reply_command == "ERROR":
            raise DshError(str(reply.get("code")), str(reply.get("message")))
        return reply

    async def ping(self):
        return await self.request("PING")

    async def tools(self):
        """Every tool entry, in registration order (LIST)."""
        reply = await self.request("LIST")
        tools = Tools(entry for entry in reply.get("tools") or [] if isinstance(entry, dict))
        self._learn_tools(tools)
        self._retry_safe_at = time.monotonic()
        return tools

    async def get(self, name):
        """The entry of one tool (GET), or DshError UNKNOWN_TOOL."""
        reply = await self.request("GET", {"name": name})
        return reply.get("tool")

    def new_call_id(self):
        return "%sc%d" % (self._prefix, next(self._ids))

    async def call(self, name, arguments=None, *, timeout=None, agent=None, meta=None, on_progress=None,
                   call_id=None, traceparent=None, tracestate=None):
        """Call a tool; its Result, always. timeout in seconds (None: the
        broker's default, 60 s). on_progress(progress) gets each PROGRESS
        ({progress, total, message}). traceparent and tracestate (W3C trace
        context) go in meta: the broker's span for the call is then a child
        of that context; the Result's trace is the one that comes back.
        Cancelling the awaiting task sends CANCEL to the broker."""
        result, _ = await self.call_counted(name, arguments, timeout=timeout, agent=agent, meta=meta,
                                            on_progress=on_progress, call_id=call_id, traceparent=traceparent,
                                            tracestate=tracestate)
        return result

    async def call_counted(self, name, arguments=None, *, timeout=None, agent=None, meta=None,
                           on_progress=None, call_id=None, traceparent=None, tracestate=None):
        """As call, with the number of PROGRESS notifications received."""
        meta = with_trace(meta, traceparent, tracestate)
        self._ensure()
        if len(self.endpoints) > 1 and (self._retry_safe_at is None
                                        or time.monotonic() - self._retry_safe_at > TOOLS_MAX_AGE_S):
            #  Which calls may go again to another broker (Client liveness)
            try:
                await self.tools()
            except DshError:
                pass
        call_id = call_id or self.new_call_id()
        timeout_ms = int(round(timeout * 1000)) if timeout else 0
        body = {"callId": call_id, "name": name, "arguments": {} if arguments is None else arguments}
        if agent is not None:
            body["agent"] = agent
        if meta is not None:
            body["meta"] = meta
        if timeout_ms:
            body["timeoutMs"] = timeout_ms
        try:
            frames = wire.dealer_message("CALL", body)
        except (TypeError, ValueError) as error:
            return Result(wire.error_result(call_id, "BAD_REQUEST", "Error: arguments cannot be sent: %s"
                                            % error)), 0
        future = asyncio.get_running_loop().create_future()
        wait_s = ((timeout_ms or wire.DEFAULT_CALL_TIMEOUT_MS) + CALL_MARGIN_MS) / 1000.0
        self._calls[call_id] = _Call(future, time.monotonic() + wait_s, on_progress, name, frames, self._index)
        self._awaiting()
        self._post(frames)
        try:
            return await future
        except asyncio.CancelledError:
            if call_id in self._calls:
                self._calls.pop(call_id)
                self._send("CANCEL", {"callId": call_id})
            raise

    async def cancel(self, call_id):
        """Cancel a call in flight: its caller gets one Result, CANCELLED."""
        call = self._calls.get(call_id)
        if call is None or call.cancelled:
            return
        call.cancelled = True
        self._send("CANCEL", {"callId": call_id})

    async def call_batch(self, calls, *, timeout=None, agent=None):
        """The calls of one model turn ([{name, arguments?}]) as `dsh call
        --batch` runs them: runs of consecutive calls to tools whose entries
        say concurrencySafe or readOnlyHint go in parallel, any other call
        alone, in order. One Result per call, in call order."""
        for position, call in enumerate(calls, 1):
            if not isinstance(call, dict) or not isinstance(call.get("name"), str) \
                    or not isinstance(call.get("arguments", {}), dict):
                raise ValueError('batch entry %d needs a string "name" and an object "arguments"' % position)
        safe = {entry.get("name") for entry in await self.tools() if _is_safe(entry)}
        results = [None] * len(calls)
        for group in batch_groups(calls, safe):
            answers = await asyncio.gather(*(self.call(calls[i]["name"], calls[i].get("arguments", {}),
                                                       timeout=timeout, agent=agent) for i in group))
            for position, answer in zip(group, answers):
                results[position] = answer
        return results


def _hashable(value):
    return isinstance(value, (str, int, bytes, bool, float)) or value is None


class CallHandle:
    """A call started with Client.start: result() waits for its one Result,
    cancel() asks the broker to cancel it."""

    def __init__(self, client, call_id, future):
        self.call_id = call_id
        self._client = client
        self._future = future

    def result(self, timeout=None):
        return self._future.result(timeout)[0]

    def done(self):
        return self._future.done()

    def cancel(self):
        self._client.cancel(self.call_id)


class Client:
    """The synchronous client: the same API as AsyncClient, blocking. Safe
    to use from several threads; on_progress callbacks run on the client's
    own thread, so they must not block."""

    def __init__(self, broker=None, *, cert=None, broker_cert=None):
        self._thread = LoopThread("dsh-client")
        self._async = self._thread.run(self._make(broker, cert, broker_cert))

    @staticmethod
    async def _make(broker, cert, broker_cert):
        return AsyncClient(broker, cert=cert, broker_cert=broker_cert, context=zmq.Context())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def endpoint(self):
        return self._async.endpoint

    def close(self):
        if self._thread is None:
            return
        context = self._async._context
        self._thread.run(self._async.close())
        self._thread.stop()
        context.term()
        self._thread = None

    def ping(self):
        return self._thread.run(self._async.ping())

    def request(self, command, body=None, *, timeout=QUERY_TIMEOUT_S):
        return self._thread.run(self._async.request(command, body, timeout=timeout))

    def tools(self):
        return self._thread.run(self._async.tools())

    def get(self, name):
        return self._thread.run(self._async.get(name))

    def start(self, name, arguments=None, *, timeout=None, agent=None, meta=None, on_progress=None,
              traceparent=None, tracestate=None):
        """Start a call without waiting: a CallHandle."""
        call_id = self._async.new_call_id()
        future = self._thread.submit(self._async.call_counted(
            name, arguments, timeout=timeout, agent=agent, meta=meta, on_progress=on_progress, call_id=call_id,
            traceparent=traceparent, tracestate=tracestate))
        return CallHandle(self, call_id, future)

    def call(self, name, arguments=None, *, timeout=None, agent=None, meta=None, on_progress=None,
             traceparent=None, tracestate=None):
        """Call a tool and wait for its Result (see AsyncClient.call)."""
        return self.start(name, arguments, timeout=timeout, agent=agent, meta=meta, on_progress=on_progress,
                          traceparent=traceparent, tracestate=tracestate).result()

    def cancel(self, call_id):
        self._thread.run(self._async.cancel(call_id))

    def call_batch(self, calls, *, timeout=None, agent=None):
        return self._thread.run(self._async.call_batch(calls, timeout=timeout, agent=agent))


__all__ = ["AsyncClient", "Client", "CallHandle", "DshError", "batch_groups"]
