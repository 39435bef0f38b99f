"""Why a broker does not answer, when it is the keys: a watch on a socket's
ZMTP handshakes (a refused key gets no reply at all from ZeroMQ), with the
reference SDK's words (components/sdk/dsh_curve.c)."""

import time

import zmq
from zmq.utils.monitor import parse_monitor_message

_EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
           | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)

#  The greeting probe's timings: how often one may start, how long one may take
_PROBE_INTERVAL_S = 1.0
_PROBE_DEADLINE_S = 2.0
#  ZMTP 3's greeting (RFC 23) up to its major version: what makes a ZMTP 3
#  peer send the rest of its own, the mechanism at offset 12, 20 bytes
#  null-padded
_OPENING = b"\xff" + bytes(8) + b"\x7f\x03"
_MECHANISM = slice(12, 32)


class _Probe:
    """Reads a peer's greeting on a connection of its own (a STREAM socket:
    raw TCP through ZeroMQ), sending only the opening of one, so the peer
    never has this side's mechanism and cannot close first. step() never
    blocks; it returns True once the probe is done, mechanism then being
    the peer's (bytes) if it named one."""

    def __init__(self, context, endpoint):
        self.mechanism = None
        self._started = time.monotonic()
        self._peer = None
        self._greeting = b""
        self._sock = context.socket(zmq.STREAM)
        self._sock.linger = 0
        #  One connection: a probe whose connection fails or closes is done
        self._sock.reconnect_ivl = -1
        self._sock.ipv6 = endpoint.startswith("tcp://[")
        try:
            self._sock.connect(endpoint)
        except zmq.ZMQError:
            self._sock.close(linger=0)
            raise

    def step(self):
        if time.monotonic() - self._started > _PROBE_DEADLINE_S:
            return True
        while True:
            try:
                peer, data = self._sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return False
            except (zmq.ZMQError, ValueError):
                return True
            if not data:
                if self._peer is not None:
                    return True         # the peer closed the connection
                #  Connected (STREAM's notice): the opening, no more
                self._peer = peer
                try:
                    self._sock.send_multipart([peer, _OPENING], zmq.NOBLOCK)
                except zmq.ZMQError:
                    return True
                continue
            self._greeting += data
            greeting = self._greeting
            #  Not ZMTP 3 (no signature, or an older version): no mechanism named
            if (greeting[0] != 0xFF or (len(greeting) >= 10 and not greeting[9] & 0x01)
                    or (len(greeting) > 10 and greeting[10] < 3)):
                return True
            if len(greeting) >= _MECHANISM.stop:
                self.mechanism = greeting[_MECHANISM].rstrip(b"\0")
                return True

    def close(self):
        self._sock.close(linger=0)


class Handshake:
    """Follows sock's handshakes; failure is why the last one failed (None
    once one succeeds), successes how many succeeded."""

    def __init__(self, sock, curve_on):
        self._sock = sock
        self._curve_on = curve_on
        self._monitor = sock.get_monitor_socket(_EVENTS)
        self.failure = None
        self.successes = 0
        self.closed = 0             # handshakes the broker's side closed with no detail
        self._probe = None
        self._probe_due = None      # where a handshake closed unexplained, to probe
        self._probe_started = None

    def poll(self):
        """Take every event waiting, and move the greeting probe on (never blocks)."""
        while True:
            try:
                event = parse_monitor_message(self._monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break
            self._take(event["event"], event["value"], event.get("endpoint"))
        self._step_probe()

    def _mismatch(self):
        self.failure = ("the broker does not speak CURVE, and this party does (drop cert=)" if self._curve_on
                        else "the broker requires CURVE: give cert= and broker_cert=")

    def _take(self, event, value, endpoint):
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self.failure = None
            self.successes += 1
            self._probe_due = None
            self._end_probe()
        elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            self.failure = ("the broker refused this party's key (ZAP status %d): it is not in the broker's "
                            "allow-list" % value)
        elif event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            self._mismatch()
        elif event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            #  The connection closed or timed out in the handshake: what a
            #  starting, stopped or restarting broker does too, so no verdict
            #  (as the C SDK): counted, and ZeroMQ tries again. A mechanism
            #  mismatch may show as one too, when the broker closed before
            #  its greeting named its mechanism: the probe tells, on TCP
            self.closed += 1
            if isinstance(endpoint, bytes):
                endpoint = endpoint.decode("utf-8", "replace")
            if endpoint and endpoint.startswith("tcp://"):
                self._probe_due = endpoint
        else:
            self.failure = "the handshake with the broker failed (protocol error; is broker_cert= the broker's key?)"

    def _step_probe(self):
        """At most one probe in flight, at most one started a second."""
        if self._probe is not None and self._probe.step():
            mechanism = self._probe.mechanism
            self._end_probe()
            if mechanism is not None and mechanism != (b"CURVE" if self._curve_on else b"NULL"):
                self._mismatch()
        now = time.monotonic()
        if (self._probe is None and self._probe_due and self.failure is None
                and (self._probe_started is None or now - self._probe_started >= _PROBE_INTERVAL_S)):
            endpoint, self._probe_due = self._probe_due, None
            self._probe_started = now
            try:
                self._probe = _Probe(self._sock.context, endpoint)
            except zmq.ZMQError:
                self._probe = None

    def _end_probe(self):
        if self._probe is not None:
            self._probe.close()
            self._probe = None

    def close(self):
        self._end_probe()
        self._sock.disable_monitor()
        self._monitor.close(linger=0)
