"""Following the tool set: the Clone procedure of PROTOCOL.md (Watchers).

    1. HELLO on FRONT, WELCOME; a SUB on `events`, subscribed to everything.
    2. Queue events; send SNAPSHOT, once the SUB has connected and 200 ms
       more (so the subscription has reached the PUB); send it again, with
       the same id, after 2, 4, 8 and then every 16 s without a reply.
    3. SNAPSHOT: take its state, drop queued events with seq <= its seq,
       apply the rest in order.
    4. Each event: another epoch, or seq > view seq + 1 (a gap): resync
       (discard the view and the queue, step 2); seq <= view seq: drop it;
       else apply it.
    5. The SUB connects again (a handshake after the first): resync, 200 ms
       later, as for the first.
    6. PING every heartbeatMs; a PONG from another broker id: step 1 (HELLO
       again on the same FRONT, a new SUB).
    7. Nothing on FRONT for heartbeatMs x liveness: step 1 on new sockets,
       with the next broker of the list.

Steps 1, 6 and 7 (when to say HELLO and PING, which broker, when it is gone
or restarted) are the link's (dsh.link, PROTOCOL.md, Client liveness, the
watcher profile); the sockets and the view are the watcher's.

on_change(kind, event) runs after each applied event and on_snapshot() after
each snapshot, on the watcher's loop. Every kind comes through, those that
change no entry too (component.*, and the pins' tool.changed, tool.accepted,
tool.rejected, tool.forgotten: a quarantined tool's entry changes by
tool.updated, with its marks); each counts its seq.
"""

import asyncio
import time
import uuid

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from . import wire
from .link import CONNECT, DOWN, RESTARTED, SEND_HELLO, SEND_PING, UP, WATCHER, Link
from .loopthread import LoopThread
from .curve import secure
from .render import Tools

#  Wait after a SUB connects before the SNAPSHOT: the subscription must reach the PUB
SUBSCRIBE_SETTLE_S = 0.2
#  A SNAPSHOT with no reply is sent again after this, doubling, at most the
#  second (PROTOCOL.md, SNAPSHOT: a broker serves snapshots in turn)
SNAPSHOT_RETRY_S = 2.0
SNAPSHOT_RETRY_MAX_S = 16.0


def _now_ms():
    return time.monotonic() * 1000


class AsyncWatcher:
    """A live view of the tool set: tools (name -> entry, registration
    order), seq, epoch, resyncs (snapshots after the first)."""

    def __init__(self, broker=None, *, on_change=None, on_snapshot=None, cert=None, broker_cert=None):
        self.endpoints = wire.brokers(broker)
        self.on_change = on_change
        self.on_snapshot = on_snapshot
        self._cert, self._broker_cert = cert, broker_cert
        self.tools = {}
        self.seq = 0
        self.epoch = None
        self.broker_id = None
        self.endpoint = self.endpoints[0]
        self.snapshots = 0
        self._first = None
        self._task = None
        self._link = Link(WATCHER, self.endpoints)
        self._front = self._sub = self._monitor = None
        self._hello_id = None
        self._welcome = None
        self._session_reset()

    def _session_reset(self):
        """What one SUB connection's view knows: nothing yet."""
        self._queued, self._view_ready = [], False
        self._snapshot_id = None
        self._snapshot_due = None       # when the SNAPSHOT awaited is sent again
        self._snapshot_wait = SNAPSHOT_RETRY_S
        self._resync_at = None
        self._handshakes = 0

    @property
    def resyncs(self):
        return max(0, self.snapshots - 1)

    def entries(self):
        return Tools(self.tools.values())

    async def start(self, timeout=10.0):
        """Start following; True once the first snapshot is taken (within timeout s)."""
        if self._task is None:
            self._first = asyncio.get_running_loop().create_future()
            self._context = zmq.asyncio.Context()
            self._task = asyncio.ensure_future(self._run())
        try:
            await asyncio.wait_for(asyncio.shield(self._first), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def close(self):
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._context.term()
            self._task = None

    async def _run(self):
        link = self._link
        link.start(_now_ms())
        try:
            while True:
                self._react()
                now = time.monotonic()
                if self._resync_at is not None and now >= self._resync_at and self._front is not None:
                    self._resync_at, self._view_ready, self._queued = None, False, []
                    self._snapshot_id = uuid.uuid4().hex
                    self._snapshot_wait = SNAPSHOT_RETRY_S
                    self._ask_snapshot(now)
                elif self._snapshot_id is not None and now >= self._snapshot_due and self._front is not None:
                    #  No reply yet: the same request again, whichever reply comes first is taken
                    self._snapshot_wait = min(self._snapshot_wait * 2, SNAPSHOT_RETRY_MAX_S)
                    self._ask_snapshot(now)
                due = link.tick(now * 1000)
                self._react()
                wait_ms = 50 if due is None else min(max(due - _now_ms(), 0), 50)
                poller = zmq.asyncio.Poller()
                for sock in (self._front, self._sub, self._monitor):
                    if sock is not None:
                        poller.register(sock, zmq.POLLIN)
                ready = dict(await poller.poll(wait_ms))
                if self._monitor is not None and self._monitor in ready:
                    event = parse_monitor_message(await self._monitor.recv_multipart())
                    if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                        #  Steps 2 and 5: every connection of the SUB, the
                        #  first too, is followed by a snapshot once the
                        #  subscription has reached the PUB
                        self._handshakes += 1
                        self._snapshot_id, self._view_ready, self._queued = None, False, []
                        self._resync_at = time.monotonic() + SUBSCRIBE_SETTLE_S
                if self._front is not None and self._front in ready:
                    self._front_message(await self._front.recv_multipart())
                    self._react()
                if self._sub is not None and self._sub in ready:
                    self._sub_message(await self._sub.recv_multipart())
        finally:
            self._close_sub()
            self._close_front()

    def _ask_snapshot(self, now):
        self._snapshot_due = now + self._snapshot_wait
        self._front.send_multipart(wire.dealer_message("SNAPSHOT", {"id": self._snapshot_id}))

    def _react(self):
        """Does what the link's events say, in order."""
        for event in self._link.events():
            if event.type == CONNECT:
                self._close_sub()
                self._close_front()
                self.endpoint = event.endpoint
                front = self._context.socket(zmq.DEALER)
                wire.keepalive(front)
                secure(front, self._cert, self._broker_cert)
                front.connect(self.endpoint)
                self._front = front
                self._hello_id = uuid.uuid4().hex
            elif event.type == SEND_HELLO and self._front is not None:
                self._front.send_multipart(wire.dealer_message("HELLO", {"id": self._hello_id}))
            elif event.type == SEND_PING and self._front is not None:
                self._front.send_multipart(wire.dealer_message("PING", {}))
            elif event.type == UP:
                self._subscribe(self._welcome)
            elif event.type == RESTARTED:
                #  Step 1 again with a new HELLO id: the events endpoint may have moved
                self._close_sub()
                self._hello_id = uuid.uuid4().hex
            elif event.type == DOWN:
                self._close_sub()

    def _subscribe(self, welcome):
        """A SUB on the events endpoint the WELCOME names; step 2 once it has connected."""
        sub = self._context.socket(zmq.SUB)
        wire.keepalive(sub, self._link.heartbeat_ms, self._link.liveness)
        secure(sub, self._cert, self._broker_cert)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        self._monitor = sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        sub.connect(wire.resolve(welcome["events"], self.endpoint))
        self._sub = sub
        self._session_reset()

    def _close_sub(self):
        if self._monitor is not None:
            self._sub.disable_monitor()
            self._monitor.close(linger=0)
            self._monitor = None
        if self._sub is not None:
            self._sub.close(linger=0)
            self._sub = None
        self._session_reset()

    def _close_front(self):
        if self._front is not None:
            self._front.close(linger=0)
            self._front = None

    def _front_message(self, frames):
        now = _now_ms()
        self._link.heard(now)
        try:
            command, _, body = wire.parse_dealer(frames)
        except wire.WireError:
            return
        if command == "WELCOME" and body.get("id") == self._hello_id and body.get("protocol") == 1 \
                and isinstance(body.get("events"), str):
            self._welcome = body
            self._link.welcome(now, body.get("broker"), body.get("heartbeatMs"), body.get("liveness"))
        elif command == "PONG":
            self._link.pong(now, body.get("broker"), body.get("heartbeatMs"), body.get("liveness"))
        elif command == "SNAPSHOT" and body.get("id") == self._snapshot_id and self._snapshot_id is not None \
                and self._resync_at is None:
            self._snapshot_id = None
            self._take_snapshot(body, self._link.instance)
            self._view_ready = True
            pending, self._queued = self._queued, []
            for event in pending:
                if not self._event(event):
                    self._resync_at = time.monotonic()
                    break

    def _sub_message(self, frames):
        if len(frames) != 2:
            return
        try:
            event = wire.unpack(frames[1])
        except wire.WireError:
            return
        if not self._view_ready:
            self._queued.append(event)
        elif self._resync_at is None and not self._event(event):
            self._resync_at = time.monotonic()

    def _take_snapshot(self, body, broker_id):
        self.tools = {}
        for item in body.get("tools") or []:
            entry = item.get("tool") if isinstance(item, dict) else None
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                self.tools[entry["name"]] = entry
        self.seq = body.get("seq", 0)
        self.epoch = body.get("epoch")
        self.broker_id = broker_id
        self.snapshots += 1
        if not self._first.done():
            self._first.set_result(True)
        if self.on_snapshot is not None:
            self.on_snapshot()

    def _event(self, event):
        """Step 4 for one event; False when the view must be resynchronised."""
        seq = event.get("seq")
        if not isinstance(seq, int):
            return True
        if event.get("epoch") != self.epoch or seq > self.seq + 1:
            return False
        if seq <= self.seq:
            return True
        kind, name = event.get("kind"), event.get("name")
        if kind in ("tool.registered", "tool.updated") and isinstance(event.get("tool"), dict):
            if kind == "tool.registered":
                self.tools.pop(name, None)
            self.tools[name] = event["tool"]
        elif kind == "tool.unregistered":
            self.tools.pop(name, None)
        self.seq = seq
        if self.on_change is not None:
            self.on_change(kind, event)
        return True


class Watcher:
    """The watcher for code without an event loop: it follows on a loop of
    its own, in a thread; its callbacks run there."""

    def __init__(self, broker=None, *, on_change=None, on_snapshot=None, cert=None, broker_cert=None):
        self._thread = LoopThread("dsh-watcher")
        self._async = AsyncWatcher(broker, on_change=on_change, on_snapshot=on_snapshot, cert=cert,
                                   broker_cert=broker_cert)

    def start(self, timeout=10.0):
        return self._thread.run(self._async.start(timeout))

    def close(self):
        if self._thread is not None:
            self._thread.run(self._async.close())
            self._thread.stop()
            self._thread = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    async def _copy(self):
        return dict(self._async.tools)

    @property
    def tools(self):
        """A copy of the view (name -> entry), taken on the watcher's thread."""
        return self._thread.run(self._copy())

    def entries(self):
        return Tools(self.tools.values())

    @property
    def seq(self):
        return self._async.seq

    @property
    def epoch(self):
        return self._async.epoch

    @property
    def resyncs(self):
        return self._async.resyncs
