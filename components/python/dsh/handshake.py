"""Why a broker does not answer, when it is the keys: a watch on a socket's
ZMTP handshakes (a refused key gets no reply at all from ZeroMQ), with the
reference SDK's words (components/sdk/dsh_curve.c)."""

import zmq
from zmq.utils.monitor import parse_monitor_message

_EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
           | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)


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

    def poll(self):
        """Take every event waiting (never blocks)."""
        while True:
            try:
                event = parse_monitor_message(self._monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return
            self._take(event["event"], event["value"])

    def _take(self, event, value):
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self.failure = None
            self.successes += 1
        elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            self.failure = ("the broker refused this party's key (ZAP status %d): it is not in the broker's "
                            "allow-list" % value)
        elif event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            self.failure = ("the broker does not speak CURVE, and this party does (drop cert=)" if self._curve_on
                            else "the broker requires CURVE: give cert= and broker_cert=")
        elif event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            #  The connection closed or timed out in the handshake: what a
            #  starting, stopped or restarting broker does too, so no verdict
            #  (as the C SDK): counted, and ZeroMQ tries again. A mechanism
            #  mismatch shows as its own event
            self.closed += 1
        else:
            self.failure = "the handshake with the broker failed (protocol error; is broker_cert= the broker's key?)"

    def close(self):
        self._sock.disable_monitor()
        self._monitor.close(linger=0)
