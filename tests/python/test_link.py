"""dsh.link against every case of tests/conformance/link_cases.json: the
table of PROTOCOL.md (Client liveness), with a fake clock, as the C SDK's
dsh_link and Node's link.ts run the same cases."""

import asyncio
import json
import os
import time

import pytest
import zmq

import dsh
from conftest import free_ports
from dsh import link as dsh_link
from dsh import wire

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "conformance", "link_cases.json")

with open(CASES, encoding="utf-8") as _file:
    _DOCUMENT = json.load(_file)

#  The case file's names for an event's fields, and the link's
_EVENT_FIELDS = {"type": "type", "endpoint": "endpoint", "reached": "reached", "silenceMs": "silence_ms",
                 "instance": "instance", "was": "was"}
_AFTER_FIELDS = {"state": "state", "reached": "reached", "endpoint": "endpoint", "heartbeatMs": "heartbeat_ms",
                 "liveness": "liveness", "instance": "instance"}


def _apply(link, step):
    """Runs a step's input; returns what a tick returned (or None)."""
    at, kind = step["at"], step["input"]
    if kind == "start":
        link.start(at)
    elif kind == "connected":
        link.connected(at)
    elif kind == "heard":
        link.heard(at)
    elif kind == "welcome":
        link.welcome(at, step.get("instance"), step.get("heartbeatMs", 0), step.get("liveness", 0))
    elif kind == "pong":
        link.pong(at, step.get("instance"), step.get("heartbeatMs", 0), step.get("liveness", 0))
    elif kind == "watch":
        link.watch(at, step["on"])
    elif kind == "move":
        link.move(at)
    elif kind == "tick":
        return link.tick(at)
    else:
        raise AssertionError("unknown input %r" % kind)
    return None


def test_the_case_file_is_one_this_test_reads():
    assert _DOCUMENT["format"] == 1
    assert len(_DOCUMENT["cases"]) > 0


@pytest.mark.parametrize("case", _DOCUMENT["cases"], ids=[case["name"] for case in _DOCUMENT["cases"]])
def test_case(case):
    link = dsh_link.Link(case["profile"], case["brokers"])
    for number, step in enumerate(case["steps"], 1):
        where = "%s, step %d (%s at %d)" % (case["name"], number, step["input"], step["at"])
        due = _apply(link, step)
        events = link.events()
        expected = step.get("events", [])
        assert len(events) == len(expected), "%s: events %r, expected %r" % (where, events, expected)
        for event, wanted in zip(events, expected):
            for field, value in wanted.items():
                assert getattr(event, _EVENT_FIELDS[field]) == value, \
                    "%s: %s's %s is %r, expected %r" % (where, event.type, field, getattr(event, _EVENT_FIELDS[field]),
                                                      value)
        if step["input"] == "tick" and "nextTick" in step:
            assert due == step["nextTick"], "%s: next tick %r, expected %r" % (where, due, step["nextTick"])
        for field, value in step.get("after", {}).items():
            assert getattr(link, _AFTER_FIELDS[field]) == value, \
                "%s: %s is %r, expected %r" % (where, field, getattr(link, _AFTER_FIELDS[field]), value)


def _silent_brokers(context, count):
    """ROUTERs that take every message and answer none: brokers reached
    (their handshake succeeds) and silent."""
    socks = [context.socket(zmq.ROUTER) for _ in range(count)]
    for sock in socks:
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind("tcp://127.0.0.1:*")
    return socks, [sock.getsockopt_string(zmq.LAST_ENDPOINT) for sock in socks]


def _commands(sock):
    """The commands a silent broker has received."""
    seen = []
    while sock.poll(0):
        frames = sock.recv_multipart()
        if len(frames) >= 4 and frames[2] == wire.PROTOCOL:
            seen.append(frames[3].decode())
    return seen


def test_a_decision_in_flight_at_a_broker_reached_is_answered_not_sent_again():
    """The client's own rules (Client liveness): a query that decides (a
    CONTROL, a PINS accept) in flight when a reached broker is lost could
    apply twice, so it is answered BROKER_GONE at the DOWN; queries that read
    (LIST, a PINS list) go on to the next broker."""
    context = zmq.Context()
    socks, endpoints = _silent_brokers(context, 2)

    async def main():
        client = dsh.AsyncClient(",".join(endpoints))
        try:
            reads = [asyncio.ensure_future(client.request("LIST", timeout=15)),
                     asyncio.ensure_future(client.request("PINS", {"op": "list"}, timeout=15))]
            accept = asyncio.ensure_future(client.request("PINS", {"op": "accept", "name": "x"}, timeout=15))
            started = time.monotonic()
            with pytest.raises(dsh.DshError) as caught:
                await client.request("CONTROL", {"stage": "approve", "command": "pending"}, timeout=15)
            assert caught.value.code == "BROKER_GONE"
            assert caught.value.message == ("Error: the broker at %s was lost with the CONTROL in flight; it "
                                            "may or may not have been applied" % endpoints[0])
            with pytest.raises(dsh.DshError) as caught:
                await accept
            assert caught.value.message == ("Error: the broker at %s was lost with the PINS in flight; it "
                                            "may or may not have been applied" % endpoints[0])
            #  At the DOWN (the window, 3 s), not at the queries' own deadline
            assert 2.5 < time.monotonic() - started < 10
            assert client.endpoint == endpoints[1]
            await asyncio.sleep(0.5)
            assert not any(read.done() for read in reads)
            for read in reads:
                read.cancel()
            await asyncio.gather(*reads, return_exceptions=True)
        finally:
            await client.close()

    try:
        asyncio.run(main())
        first, second = _commands(socks[0]), _commands(socks[1])
        assert first.count("PINS") == 2 and "CONTROL" in first and "LIST" in first, first
        assert second.count("PINS") == 1 and "LIST" in second and "CONTROL" not in second, second
    finally:
        for sock in socks:
            sock.close()
        context.term()


def test_a_decision_sent_to_a_broker_never_reached_goes_on():
    """It cannot have applied where no connection was ever made."""
    context = zmq.Context()
    socks, endpoints = _silent_brokers(context, 1)
    nobody = "tcp://127.0.0.1:%d" % free_ports(1)

    async def main():
        client = dsh.AsyncClient("%s,%s" % (nobody, endpoints[0]))
        try:
            control = asyncio.ensure_future(client.request("CONTROL", {"stage": "approve", "command": "pending"},
                                                           timeout=15))
            await asyncio.sleep(2.5)
            assert client.endpoint == endpoints[0]
            assert not control.done()
            control.cancel()
            await asyncio.gather(control, return_exceptions=True)
        finally:
            await client.close()

    try:
        asyncio.run(main())
        assert "CONTROL" in _commands(socks[0])
    finally:
        socks[0].close()
        context.term()
