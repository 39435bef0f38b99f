"""The client's own rules (PROTOCOL.md, Client liveness; Execution
semantics), against fake brokers made of ROUTER sockets: LIST at once after
a failover, and the client's own TIMEOUT at the call's deadline plus 5000 ms,
in the C SDK's words."""

import threading
import time

import msgpack
import zmq

import dsh

TOOLS = [{"name": "look", "parameters": {"type": "object"}, "annotations": {"readOnlyHint": True}},
         {"name": "write", "parameters": {"type": "object"}}]


class FakeBroker:
    """One ROUTER on loopback: answers PING (heartbeat 100 ms, liveness 3)
    and LIST, and CALL as on_call says (None: no answer). It keeps what it
    reads; once silent it reads on and answers nothing."""

    def __init__(self, instance, on_call=lambda body: None):
        self.instance, self.on_call = instance, on_call
        self.seen = []
        self.silent = False
        self._context = zmq.Context()
        self._router = self._context.socket(zmq.ROUTER)
        self._router.linger = 0
        port = self._router.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = "tcp://127.0.0.1:%d" % port
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def got(self, command):
        return [body for seen, body in list(self.seen) if seen == command]

    def _run(self):
        while not self._stop.is_set():
            if not self._router.poll(50):
                continue
            route, _, _, command, body = self._router.recv_multipart()
            command, body = command.decode(), msgpack.unpackb(body)
            self.seen.append((command, body))
            if self.silent:
                continue
            reply = None
            if command == "PING":
                reply = ("PONG", {"id": body.get("id"), "broker": self.instance, "uptimeMs": 1, "tools": 2,
                                  "components": 1, "inFlight": 0, "seq": 0, "epoch": 1, "heartbeatMs": 100,
                                  "liveness": 3})
            elif command == "LIST":
                reply = ("TOOLS", {"id": body.get("id"), "seq": 0, "tools": TOOLS})
            elif command == "CALL":
                reply = self.on_call(body)
            if reply:
                self._router.send_multipart([route, b"", b"DSH1", reply[0].encode(), msgpack.packb(reply[1])])

    def close(self):
        self._stop.set()
        self._thread.join(5)
        self._router.close()
        self._context.term()


def _until(check, what, timeout=10):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.02)


def test_a_failover_asks_the_next_broker_for_list_at_once():
    first = FakeBroker("first")
    second = FakeBroker("second", lambda body: ("RESULT", {"callId": body["callId"], "isError": False,
                                                           "content": [{"type": "text", "text": "second"}]}))
    client = dsh.Client("%s,%s" % (first.endpoint, second.endpoint))
    try:
        look = client.start("look", timeout=20)
        write = client.start("write", timeout=20)
        _until(lambda: len(first.got("CALL")) == 2, "the calls at the first broker")
        time.sleep(0.2)
        first.silent = True
        assert look.result(timeout=10).text == "second"
        gone = write.result(timeout=10)
        assert gone.code == "BROKER_GONE", gone.body
        #  Asked at once on the move, not at the next call
        _until(lambda: second.got("LIST"), "a LIST at the second broker", 5)
        assert [body["name"] for body in second.got("CALL")] == ["look"]
    finally:
        client.close()
        first.close()
        second.close()


def test_a_call_never_answered_is_answered_timeout_by_the_client_at_its_deadline_plus_5000_ms():
    quiet = FakeBroker("quiet")
    client = dsh.Client(quiet.endpoint)
    try:
        started = time.monotonic()
        result = client.call("write", timeout=0.2)
        waited = time.monotonic() - started
        assert result.code == "TIMEOUT"
        assert result.text == "Error: no answer from the broker by the call's deadline"
        assert 5.1 <= waited < 8, waited
    finally:
        client.close()
        quiet.close()
