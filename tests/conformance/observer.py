#!/usr/bin/python3
"""The conformance harness's observer: `observer.py ENDPOINT`.

Watches a broker the whole time the scenarios run and checks every message
it sees against dsh/1's definition and JSON Schemas (protocol_check): each
change event on EVENTS (a SUB of everything), and each reply on FRONT to the
requests it sends in turn (HELLO, PING, LIST, GET, SNAPSHOT, STATS, CHAIN, an
unknown command, and a call of count, which brings PROGRESS and a RESULT).
A reply is also checked to be one the definition lists for its request.

Runs under /usr/bin/python3 with python3-zmq and python3-msgpack (the
strict decode is the Python package's dsh.wire.unpack). At stdin EOF it
prints one JSON line, {"checked", "events", "replies", "problems"}, and
exits 0.
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "components", "python"))

import zmq  # noqa: E402

from dsh import wire  # noqa: E402
import protocol_check  # noqa: E402

ROUND_S = 0.1           # one request every ROUND_S
PROBLEMS_KEPT = 50


class Observer:
    def __init__(self, front):
        self.front_endpoint = front
        self.checker = protocol_check.Checker()
        self.context = zmq.Context()
        self.front = self.context.socket(zmq.DEALER)
        self.front.setsockopt(zmq.LINGER, 0)
        self.front.connect(front)
        self.events = None
        self.problems = []
        self.problem_count = 0
        self.counts = {"events": 0, "replies": 0}
        self.asked = {}         # id -> the request command it answers
        self.calls = {}         # callId -> progress seen
        self.sequence = 0
        self.turn = 0

    def problem(self, text):
        self.problem_count += 1
        if len(self.problems) < PROBLEMS_KEPT:
            self.problems.append(text)

    def send(self, command, body):
        self.front.send_multipart(wire.dealer_message(command, body), zmq.NOBLOCK)

    def ask(self, command, **body):
        self.sequence += 1
        request_id = "observer-%d" % self.sequence
        body["id"] = request_id
        self.asked[request_id] = command
        self.send(command, body)

    def next_request(self):
        """Every request in turn; the HELLO first and again until WELCOME."""
        if self.events is None:
            self.ask("HELLO")
            return
        self.turn += 1
        step = self.turn % 10
        if step == 0:
            self.sequence += 1
            call_id = "observer-call-%d" % self.sequence
            self.calls[call_id] = 0
            self.send("CALL", {"callId": call_id, "name": "count", "arguments": {"to": 2, "step_ms": 5},
                               "timeoutMs": 5000})
        elif step == 1:
            self.ask("PING")
        elif step == 2:
            self.ask("LIST")
        elif step == 3:
            self.ask("GET", name="echo")
        elif step == 4:
            self.ask("GET", name="no_such_tool")
        elif step == 5:
            self.ask("SNAPSHOT")
        elif step == 6:
            self.ask("STATS")
        elif step == 7:
            self.ask("CHAIN")
        elif step == 8:
            self.ask("NOSUCHCOMMAND")

    def on_front(self, frames):
        try:
            command, token, body = wire.parse_dealer(frames)
        except wire.WireError as error:
            self.problem("front: a message that is not dsh/1: %s" % error)
            return
        self.counts["replies"] += 1
        if token is not None:
            self.problem("front %s: a token frame on FRONT" % command)
        for problem in self.checker.message("front", "broker", command, body):
            self.problem(problem)
        entry = self.checker.find("front", "broker", command, body)
        if command in ("RESULT", "PROGRESS"):
            call_id = body.get("callId")
            if call_id not in self.calls:
                self.problem("front %s for a call this observer did not make: %r" % (command, call_id))
            elif command == "PROGRESS":
                self.calls[call_id] += 1
            else:
                self.calls.pop(call_id)
            return
        asked = self.asked.pop(body.get("id"), None)
        if asked is None:
            if command != "ERROR":
                self.problem("front %s answers no request of this observer (id %r)" % (command, body.get("id")))
            return
        request = self.checker.find("front", "client", asked, {}) if asked != "NOSUCHCOMMAND" else None
        if request is None:
            if command != "ERROR":
                self.problem("front: an unknown command was answered %s, not ERROR" % command)
        elif entry is not None and command not in request.get("replies", []):
            self.problem("front %s answered %s, which the definition does not list among its replies"
                         % (asked, command))
        if command == "WELCOME" and self.events is None:
            self.events = self.context.socket(zmq.SUB)
            self.events.setsockopt(zmq.LINGER, 0)
            self.events.setsockopt(zmq.SUBSCRIBE, b"")
            self.events.connect(wire.resolve(body["events"], self.front_endpoint))
            self.poller.register(self.events, zmq.POLLIN)

    def on_event(self, frames):
        if len(frames) != 2:
            self.problem("events: a message of %d frames, not 2" % len(frames))
            return
        try:
            kind = frames[0].decode("utf-8")
            body = wire.unpack(frames[1])
        except (UnicodeDecodeError, wire.WireError) as error:
            self.problem("events: an event that is not dsh/1: %s" % error)
            return
        self.counts["events"] += 1
        for problem in self.checker.event(kind, body):
            self.problem(problem)

    def run(self):
        self.poller = zmq.Poller()
        self.poller.register(self.front, zmq.POLLIN)
        self.poller.register(sys.stdin.fileno(), zmq.POLLIN)
        next_at = time.monotonic()
        while True:
            if time.monotonic() >= next_at:
                try:
                    self.next_request()
                except zmq.Again:
                    pass        # not connected yet, or the broker is restarting
                next_at = time.monotonic() + ROUND_S
            ready = dict(self.poller.poll(max(1, int((next_at - time.monotonic()) * 1000))))
            if ready.get(sys.stdin.fileno()):
                if not os.read(sys.stdin.fileno(), 4096):
                    break
            while self.front.poll(0):
                self.on_front(self.front.recv_multipart())
            while self.events is not None and self.events.poll(0):
                self.on_event(self.events.recv_multipart())
        print(json.dumps({"checked": self.checker.checked, "events": self.counts["events"],
                          "replies": self.counts["replies"], "problemCount": self.problem_count,
                          "problems": self.problems}), flush=True)
        self.context.destroy(0)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: observer.py ENDPOINT")
    Observer(sys.argv[1]).run()
