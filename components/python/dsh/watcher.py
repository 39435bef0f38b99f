"""Following the tool set: the Clone procedure of PROTOCOL.md (Watchers).

    1. HELLO on FRONT, WELCOME; a SUB on `events`, subscribed to everything.
    2. Queue events; send SNAPSHOT.
    3. SNAPSHOT: take its state, drop queued events with seq <= its seq,
       apply the rest in order.
    4. Each event: another epoch, or seq > view seq + 1 (a gap): resync
       (discard the view and the queue, step 2); seq <= view seq: drop it;
       else apply it.
    5. The SUB connects again (a handshake after the first): resync, 200 ms
       later, so the subscription has reached the PUB.
    6. PING every heartbeatMs; a PONG from another broker id: step 1.
    7. Nothing on FRONT for heartbeatMs x liveness: step 1 on new sockets,
       with the next broker of the list.

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
from .loopthread import LoopThread
from .curve import secure
from .render import Tools

#  Wait after a SUB reconnects before the SNAPSHOT: the subscription must reach the PUB
SUBSCRIBE_SETTLE_S = 0.2


class _Restart(Exception):
    """Leave this broker's session: step 1 (move=True: the next broker)."""

    def __init__(self, move):
        super().__init__()
        self.move = move


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
        index = 0
        while True:
            self.endpoint = self.endpoints[index]
            try:
                await self._session()
            except _Restart as restart:
                if restart.move:
                    index = (index + 1) % len(self.endpoints)

    async def _session(self):
        front = self._context.socket(zmq.DEALER)
        sub = self._context.socket(zmq.SUB)
        monitor = None
        try:
            wire.keepalive(front)
            secure(front, self._cert, self._broker_cert)
            front.connect(self.endpoint)
            welcome = await self._hello(front)
            heartbeat = (welcome.get("heartbeatMs") or wire.DEFAULT_HEARTBEAT_MS) / 1000.0
            window = heartbeat * (welcome.get("liveness") or wire.DEFAULT_LIVENESS)
            wire.keepalive(sub, int(heartbeat * 1000), int(window / heartbeat))
            secure(sub, self._cert, self._broker_cert)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            monitor = sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
            sub.connect(wire.resolve(welcome["events"], self.endpoint))
            await self._follow(front, sub, monitor, welcome["broker"], heartbeat, window)
        finally:
            if monitor is not None:
                sub.disable_monitor()
                monitor.close(linger=0)
            sub.close(linger=0)
            front.close(linger=0)

    async def _hello(self, front):
        """WELCOME for a HELLO with a new id (repeated every second), or
        _Restart(move) after the default liveness window."""
        hello_id = uuid.uuid4().hex
        give_up = time.monotonic() + wire.DEFAULT_HEARTBEAT_MS * wire.DEFAULT_LIVENESS / 1000.0
        next_hello = 0.0
        while time.monotonic() < give_up:
            if time.monotonic() >= next_hello:
                front.send_multipart(wire.dealer_message("HELLO", {"id": hello_id}))
                next_hello = time.monotonic() + 1.0
            if await front.poll(100):
                try:
                    command, _, body = wire.parse_dealer(await front.recv_multipart())
                except wire.WireError:
                    continue
                if command == "WELCOME" and body.get("id") == hello_id and body.get("protocol") == 1:
                    return body
        raise _Restart(move=True)

    async def _follow(self, front, sub, monitor, broker_id, heartbeat, window):
        poller = zmq.asyncio.Poller()
        for sock in (front, sub, monitor):
            poller.register(sock, zmq.POLLIN)
        queued, view_ready = [], False
        snapshot_id = None
        resync_at = time.monotonic()       # step 2 at once
        handshakes = 0
        last_heard = last_ping = time.monotonic()
        while True:
            now = time.monotonic()
            if resync_at is not None and now >= resync_at:
                resync_at, view_ready, queued = None, False, []
                snapshot_id = uuid.uuid4().hex
                front.send_multipart(wire.dealer_message("SNAPSHOT", {"id": snapshot_id}))
            if now - last_ping >= heartbeat:
                last_ping = now
                front.send_multipart(wire.dealer_message("PING", {}))
            if now - last_heard > window:
                raise _Restart(move=True)
            ready = dict(await poller.poll(50))
            if monitor in ready:
                event = parse_monitor_message(await monitor.recv_multipart())
                if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    handshakes += 1
                    if handshakes > 1:
                        resync_at = time.monotonic() + SUBSCRIBE_SETTLE_S
            if front in ready:
                last_heard = time.monotonic()
                try:
                    command, _, body = wire.parse_dealer(await front.recv_multipart())
                except wire.WireError:
                    continue
                if command == "PONG" and body.get("broker") != broker_id:
                    raise _Restart(move=False)
                if command == "SNAPSHOT" and body.get("id") == snapshot_id and resync_at is None:
                    snapshot_id = None
                    self._take_snapshot(body, broker_id)
                    view_ready = True
                    pending, queued = queued, []
                    for event in pending:
                        if not self._event(event):
                            resync_at = time.monotonic()
                            break
            if sub in ready:
                frames = await sub.recv_multipart()
                if len(frames) != 2:
                    continue
                try:
                    event = wire.unpack(frames[1])
                except wire.WireError:
                    continue
                if not view_ready:
                    queued.append(event)
                elif resync_at is None and not self._event(event):
                    resync_at = time.monotonic()

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
