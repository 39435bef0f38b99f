"""A plain client of a CURVE broker that closes the connection before its
greeting names CURVE (libzmq then gives no reason, EPIPE in the greeting: on
a loaded machine a real broker does that half the time) is still told the
broker requires CURVE: the handshake watch reads the broker's greeting on a
connection of its own (components/python/dsh/handshake.py). The "broker" is
tests/unit/test_curve.c's racer, in Python."""

import threading
import time

import zmq

import dsh

OPENING = b"\xff" + bytes(8) + b"\x7f\x03"             # signature, major version 3
REST = b"\x00" + b"CURVE".ljust(20, b"\0") + b"\x01" + bytes(31)   # minor, mechanism, as-server
QUIET_S = 0.3                                       # how long a peer at 11 bytes stays there


class Racer:
    """Sends the opening of a CURVE greeting; closes a connection as soon as
    it has the peer's whole greeting (64 bytes), the rest of its own unsent;
    a peer that stops at 11 bytes (the probe) gets the rest."""

    def __init__(self, context):
        self.closed = 0
        self.probes = 0
        self._sock = context.socket(zmq.STREAM)
        self._sock.linger = 0
        self._sock.bind("tcp://127.0.0.1:0")
        self.endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        peers = {}                                  # routing id -> [bytes received, when the last came]
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while not self._stop.is_set():
            if poller.poll(50):
                peer, data = self._sock.recv_multipart()
                if not data:
                    if peer in peers:
                        del peers[peer]             # it closed
                    else:
                        peers[peer] = [0, time.monotonic()]
                        self._sock.send_multipart([peer, OPENING])
                elif peer in peers:
                    peers[peer][0] += len(data)
                    peers[peer][1] = time.monotonic()
                    if peers[peer][0] >= 64:
                        #  The mismatch seen: close, the rest of the greeting unsent
                        self._sock.send_multipart([peer, b""])
                        del peers[peer]
                        self.closed += 1
            for peer, seen in peers.items():
                if seen[0] == 11 and time.monotonic() - seen[1] >= QUIET_S:
                    self._sock.send_multipart([peer, REST])
                    seen[0] += 1                    # answered once
                    self.probes += 1
        self._sock.close()

    def stop(self):
        self._stop.set()
        self._thread.join(5)


def test_mismatch_before_greeting():
    context = zmq.Context()
    racer = Racer(context)
    try:
        with dsh.Client(racer.endpoint) as plain:
            started = time.monotonic()
            refused = plain.call("anything", timeout=8)
            took = time.monotonic() - started
        assert refused.code == "BROKER_GONE", refused
        assert "the broker requires CURVE" in refused.text, refused
        assert took < 4, took
        assert racer.closed >= 1 and racer.probes >= 1
    finally:
        racer.stop()
        context.term()
