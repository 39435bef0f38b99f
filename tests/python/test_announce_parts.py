"""A tool set announced in parts (PROTOCOL.md, The announce channel): raw
parts on the announce channel are applied only once whole, malformed ones
are dropped and the broker serves on, a newer generation replaces a set
not yet whole, a set not whole in time is dropped; and the Python library
splits a set larger than the broker's messages."""

import itertools

import zmq

import dsh
from dsh import wire
from conftest import eventually, start_broker

SMALL = ("--max-message-bytes", "65536", "--max-tools", "64")
_markers = itertools.count()


class Announcer:
    """An XPUB on a broker's announce endpoint, once the broker's SUB has
    subscribed: nothing sent on it is lost as a slow joiner's would be."""

    def __init__(self, endpoint):
        self.endpoint = endpoint
        self.context = zmq.Context()
        front = self.context.socket(zmq.DEALER)
        front.connect(endpoint)
        front.send_multipart(wire.dealer_message("HELLO", {}))
        assert front.poll(5000), "no WELCOME"
        _, _, welcome = wire.parse_dealer(front.recv_multipart())
        front.close(linger=0)
        self.pub = self.context.socket(zmq.XPUB)
        self.pub.connect(wire.resolve(welcome["announce"], endpoint))
        assert self.pub.poll(5000), "the broker did not subscribe"
        self.pub.recv()

    def announce(self, component, generation, names, **parts):
        tools = [{"name": name, "parameters": {"type": "object"}} for name in names]
        body = dict(component=component, generation=generation, **parts, tools=tools)
        self.pub.send_multipart([wire.PROTOCOL, b"ANNOUNCE", wire.pack(body)])

    def settled(self):
        """Once the broker has read everything sent before: a whole ANNOUNCE
        of a marker, sent after it on the same connection, is listed (until
        the marker, silent, expires: looked for often)."""
        name = "marker_%d" % next(_markers)
        self.announce(name.replace("_", "-"), 1, [name])
        with dsh.Client(self.endpoint) as client:
            eventually(lambda: name in client.tools().names(), timeout=5, interval=0.02)

    def close(self):
        self.pub.close(linger=0)
        self.context.term()


def _names(endpoint, prefix):
    with dsh.Client(endpoint) as client:
        return [name for name in client.tools().names() if name.startswith(prefix)]


def test_a_set_is_applied_only_once_every_part_came(processes):
    broker = start_broker(processes, "tcp://127.0.0.1:!", *SMALL)
    announcer = Announcer(broker.endpoint)
    try:
        announcer.announce("parted", 7, ["parted_a", "parted_b"], part=0, parts=3, concurrency=2)
        announcer.announce("parted", 7, ["parted_e"], part=2, parts=3)
        announcer.settled()
        assert _names(broker.endpoint, "parted_") == []
        #  A repeat is ignored, and the missing part makes it whole, in order
        announcer.announce("parted", 7, ["parted_x"], part=2, parts=3)
        announcer.announce("parted", 7, ["parted_c", "parted_d"], part=1, parts=3)
        eventually(lambda: _names(broker.endpoint, "parted_") ==
                   ["parted_a", "parted_b", "parted_c", "parted_d", "parted_e"], timeout=5)
    finally:
        announcer.close()


def test_malformed_parts_are_dropped_and_the_broker_serves_on(processes):
    broker = start_broker(processes, "tcp://127.0.0.1:!", *SMALL)
    announcer = Announcer(broker.endpoint)
    try:
        announcer.announce("bad-1", 1, ["bad_part_alone"], part=0)
        announcer.announce("bad-2", 1, ["bad_parts_alone"], parts=2)
        announcer.announce("bad-3", 1, ["bad_one_part"], part=0, parts=1)
        announcer.announce("bad-4", 1, ["bad_past_end"], part=2, parts=2)
        announcer.announce("bad-5", 1, ["bad_too_many"], part=0, parts=65)
        announcer.settled()
        for reason in ('come together or not at all', 'must be 2 or more', 'must be below "parts"',
                       'over the broker\'s limit of 64 tools'):
            broker.wait_for(r"malformed message on the announce socket: .*%s" % reason, timeout=5)
        assert _names(broker.endpoint, "bad_") == []
        #  The same sets, well formed, are taken
        announcer.announce("bad-5", 1, ["bad_0"], part=0, parts=2)
        announcer.announce("bad-5", 1, ["bad_1"], part=1, parts=2)
        eventually(lambda: _names(broker.endpoint, "bad_") == ["bad_0", "bad_1"], timeout=5)
    finally:
        announcer.close()


def test_a_newer_generation_replaces_a_set_not_yet_whole(processes):
    broker = start_broker(processes, "tcp://127.0.0.1:!", *SMALL)
    announcer = Announcer(broker.endpoint)
    try:
        announcer.announce("gens", 5, ["gens_old_0"], part=0, parts=2)
        announcer.announce("gens", 6, ["gens_new_1"], part=1, parts=2)
        #  The older generation's last part no longer completes anything
        announcer.announce("gens", 5, ["gens_old_1"], part=1, parts=2)
        announcer.settled()
        assert _names(broker.endpoint, "gens_") == []
        announcer.announce("gens", 6, ["gens_new_0"], part=0, parts=2)
        eventually(lambda: _names(broker.endpoint, "gens_") == ["gens_new_0", "gens_new_1"], timeout=5)

        #  Another count of parts drops the set: part 0 is lost with it
        announcer.announce("count", 1, ["count_0"], part=0, parts=3)
        announcer.announce("count", 1, ["count_1"], part=1, parts=2)
        broker.wait_for(r"count in parts: part 1 says the set has 2 parts, its first part said 3", timeout=5)
        announcer.announce("count", 1, ["count_1"], part=1, parts=3)
        announcer.announce("count", 1, ["count_2"], part=2, parts=3)
        announcer.settled()
        assert _names(broker.endpoint, "count_") == []
    finally:
        announcer.close()


def test_a_set_not_whole_in_time_is_dropped(processes):
    broker = start_broker(processes, "tcp://127.0.0.1:!", "--heartbeat-ms", "200", "--liveness", "3", *SMALL)
    announcer = Announcer(broker.endpoint)
    try:
        announcer.announce("slow", 1, ["slow_0"], part=0, parts=2)
        broker.wait_for(r"the ANNOUNCE of component slow in parts was not whole within 600 ms: dropped", timeout=5)
        announcer.announce("slow", 1, ["slow_1"], part=1, parts=2)
        announcer.settled()
        assert _names(broker.endpoint, "slow_") == []
    finally:
        announcer.close()


def test_the_library_announces_a_large_set_in_parts(processes):
    broker = start_broker(processes, "tcp://127.0.0.1:!", "--max-message-bytes", "65536")
    component = dsh.Component("py-parts", broker.endpoint)
    description = "d" * 1000
    for index in range(200):
        component.tool(lambda: "ok", name="py_parts_%03d" % index, description=description)
        if index == 100:
            component.tool(lambda: "big", name="py_parts_oversized", description="x" * 70000)
    try:
        assert component.start(10)
        expected = ["py_parts_%03d" % index for index in range(200)]
        eventually(lambda: _names(broker.endpoint, "py_parts_") == expected, timeout=5)
        with dsh.Client(broker.endpoint) as client:
            assert client.call("py_parts_000").text == "ok"
            assert client.call("py_parts_199").text == "ok"
    finally:
        component.stop()
