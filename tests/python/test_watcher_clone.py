"""The watcher's Clone procedure as PROTOCOL.md states it (Watchers; SNAPSHOT),
against a fake broker made of a ROUTER (FRONT) and an XPUB (EVENTS): the
SNAPSHOT goes once the SUB has connected, so no change published in between
is missed, and one that gets no reply is sent again, with the same id."""

import threading
import time

import msgpack
import zmq

import dsh

ENTRY = {"name": "look", "parameters": {"type": "object"}}


class FakeBroker:
    """Answers HELLO (WELCOME naming its XPUB), PING and SNAPSHOT (but the
    first `ignore` SNAPSHOTs). The XPUB is bound only `events_after` s after
    the first WELCOME, so a SUB cannot connect before then. subscribed is
    when the XPUB saw the subscription, snapshots when each SNAPSHOT came
    (with its id)."""

    def __init__(self, events_after=0.0, ignore=0):
        self.events_after, self.ignore = events_after, ignore
        self.snapshots = []
        self.subscribed = None
        self._context = zmq.Context()
        self._front = self._context.socket(zmq.ROUTER)
        self._front.linger = 0
        self.endpoint = "tcp://127.0.0.1:%d" % self._front.bind_to_random_port("tcp://127.0.0.1")
        self._events = self._context.socket(zmq.XPUB)
        self._events.linger = 0
        #  A port for the XPUB, bound later
        probe = self._context.socket(zmq.ROUTER)
        self._events_port = probe.bind_to_random_port("tcp://127.0.0.1")
        probe.close(linger=0)
        self._bind_at = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _reply(self, route, command, body):
        self._front.send_multipart([route, b"", b"DSH1", command, msgpack.packb(body)])

    def _run(self):
        poller = zmq.Poller()
        poller.register(self._front, zmq.POLLIN)
        poller.register(self._events, zmq.POLLIN)
        bound = False
        while not self._stop.is_set():
            if not bound and self._bind_at is not None and time.monotonic() >= self._bind_at:
                self._events.bind("tcp://127.0.0.1:%d" % self._events_port)
                bound = True
            ready = dict(poller.poll(20))
            if self._events in ready:
                if self._events.recv()[:1] == b"\x01" and self.subscribed is None:
                    self.subscribed = time.monotonic()
            if self._front not in ready:
                continue
            route, _, _, command, body = self._front.recv_multipart()
            body = msgpack.unpackb(body)
            if command == b"HELLO":
                if self._bind_at is None:
                    self._bind_at = time.monotonic() + self.events_after
                self._reply(route, b"WELCOME", {
                    "id": body.get("id"), "protocol": 1, "broker": "fake", "epoch": 7,
                    "announce": "tcp://127.0.0.1:1", "work": "tcp://127.0.0.1:1",
                    "events": "tcp://127.0.0.1:%d" % self._events_port, "heartbeatMs": 1000, "liveness": 3,
                    "maxMessageBytes": 16777216})
            elif command == b"PING":
                self._reply(route, b"PONG", {"id": body.get("id"), "broker": "fake", "uptimeMs": 1, "tools": 1,
                                             "components": 1, "inFlight": 0, "seq": 0, "epoch": 7,
                                             "heartbeatMs": 1000, "liveness": 3})
            elif command == b"SNAPSHOT":
                self.snapshots.append((time.monotonic(), body.get("id")))
                if len(self.snapshots) > self.ignore:
                    self._reply(route, b"SNAPSHOT", {"id": body.get("id"), "seq": 0, "epoch": 7,
                                                     "tools": [{"tool": ENTRY, "providers": ["c"]}],
                                                     "components": []})

    def close(self):
        self._stop.set()
        self._thread.join(5)
        self._front.close()
        self._events.close()
        self._context.term()


def test_the_first_snapshot_waits_for_the_sub_to_connect():
    broker = FakeBroker(events_after=0.5)
    watcher = dsh.Watcher(broker.endpoint)
    try:
        assert watcher.start(timeout=10)
        assert broker.subscribed is not None
        #  Asked after the subscription reached the PUB, never before: a
        #  change published in between would be in neither
        assert broker.snapshots[0][0] > broker.subscribed, (broker.snapshots, broker.subscribed)
        assert "look" in watcher.tools
    finally:
        watcher.close()
        broker.close()


def test_a_snapshot_without_a_reply_is_sent_again_with_the_same_id():
    broker = FakeBroker(ignore=1)
    watcher = dsh.Watcher(broker.endpoint)
    try:
        started = time.monotonic()
        assert watcher.start(timeout=8)
        assert len(broker.snapshots) == 2
        first, again = broker.snapshots
        assert first[1] == again[1]
        assert 1.8 <= again[0] - first[0] < 4, again[0] - first[0]
        assert time.monotonic() - started < 6
        assert watcher.resyncs == 0
    finally:
        watcher.close()
        broker.close()
