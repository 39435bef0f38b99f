"""A component treats a WELCOME as untrusted input (PROTOCOL.md, Limits on
untrusted input; HELLO / WELCOME): one that names no endpoints is not acted
on, and the component goes on saying HELLO until a usable one comes. Against
a fake broker: a ROUTER for FRONT and WORK, a SUB for the announce channel."""

import threading
import time

import msgpack
import zmq

import dsh


class FakeBroker:
    def __init__(self, bad_welcomes):
        self.bad_welcomes = bad_welcomes
        self.hellos = 0
        self.work_hellos = []
        self._context = zmq.Context()
        self._front = self._bound(zmq.ROUTER)
        self._work = self._bound(zmq.ROUTER)
        self._announce = self._bound(zmq.SUB)
        self._announce.setsockopt(zmq.SUBSCRIBE, b"")
        self.endpoint = self._front.last_endpoint.decode()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _bound(self, kind):
        sock = self._context.socket(kind)
        sock.linger = 0
        sock.bind("tcp://127.0.0.1:*")
        return sock

    def _run(self):
        poller = zmq.Poller()
        for sock in (self._front, self._work, self._announce):
            poller.register(sock, zmq.POLLIN)
        while not self._stop.is_set():
            ready = dict(poller.poll(20))
            if self._announce in ready:
                self._announce.recv_multipart()
            if self._work in ready:
                frames = self._work.recv_multipart()
                if frames[3] == b"HELLO":
                    self.work_hellos.append(msgpack.unpackb(frames[4]))
            if self._front in ready:
                route, _, _, command, body = self._front.recv_multipart()
                body = msgpack.unpackb(body)
                if command != b"HELLO":
                    continue
                self.hellos += 1
                welcome = {"id": body.get("id"), "protocol": 1, "broker": "fake", "epoch": 1,
                           "events": "tcp://127.0.0.1:1", "heartbeatMs": 1000, "liveness": 3,
                           "maxMessageBytes": 16777216}
                if self.hellos > self.bad_welcomes:
                    welcome["announce"] = self._announce.last_endpoint.decode()
                    welcome["work"] = self._work.last_endpoint.decode()
                self._front.send_multipart([route, b"", b"DSH1", b"WELCOME", msgpack.packb(welcome)])

    def close(self):
        self._stop.set()
        self._thread.join(5)
        for sock in (self._front, self._work, self._announce):
            sock.close()
        self._context.term()


def test_a_welcome_without_endpoints_is_not_acted_on():
    broker = FakeBroker(bad_welcomes=1)
    component = dsh.Component("py-welcome", broker.endpoint)

    @component.tool
    def noop() -> str:
        """Nothing."""
        return ""

    component.start(timeout=0.1)
    try:
        deadline = time.monotonic() + 8
        while not broker.work_hellos and time.monotonic() < deadline:
            time.sleep(0.05)
        assert broker.hellos >= 2, broker.hellos
        assert broker.work_hellos and broker.work_hellos[0]["component"] == "py-welcome", broker.work_hellos
    finally:
        component.stop()
        broker.close()
