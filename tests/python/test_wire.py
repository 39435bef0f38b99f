"""dsh.wire: one strict decode, as every dsh party decodes (PROTOCOL.md, Bodies)."""

import msgpack
import pytest

from dsh import wire


def test_a_body_that_repeats_a_key_is_refused_at_any_depth():
    for body in (b"\x82\xa1a\x01\xa1a\x02",                                  # at the root
                 b"\x81\xa9arguments\x82\xa4path\xa1x\xa4path\xa1y",          # in arguments
                 b"\x81\xa1x\x82\x01\x01\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00\x02"):  # 1 and 1.0
        with pytest.raises(wire.WireError, match="duplicate key"):
            wire.unpack(body)


def _map(*pairs):
    """A msgpack map of these (key, value) pairs, in order, keys as given."""
    return bytes([0x80 | len(pairs)]) + b"".join(
        msgpack.packb(key, use_bin_type=True) + msgpack.packb(value) for key, value in pairs)


def test_keys_any_common_reader_takes_for_one_are_refused():
    for pairs in ((("a", 1), (b"a", 2)),                # a str and a bin of the same bytes
                  ((1, 1), ("1", 2)),                   # a number and its decimal text
                  ((1.0, 1), ("1", 2)),                 # ... as JavaScript writes 1.0
                  ((0.1, 1), ("0.1", 2)),
                  ((1, 1), (1.0, 2))):                  # two numbers of one value
        with pytest.raises(wire.WireError, match="duplicate key"):
            wire.unpack(_map(*pairs))
    with pytest.raises(wire.WireError, match="an array or a map as a map key"):
        wire.unpack(b"\x81\x91\x01\x02")


def test_distinct_keys_of_other_types_decode():
    assert wire.unpack(_map((1, "a"), (2, "b"), ("x", "c"), (None, "d"))) == {1: "a", 2: "b", "x": "c", None: "d"}


def test_a_body_without_repeats_decodes():
    body = {"callId": "c1", "arguments": {"path": "x", "list": [{"a": 1}, {"a": 2}]}}
    assert wire.unpack(msgpack.packb(body)) == body


def test_a_tool_set_too_large_for_one_message_is_split_in_order():
    head = {"component": "c", "generation": 5, "concurrency": 8}
    entries = [{"name": "t%03d" % index, "description": "d" * 1000, "parameters": {"type": "object"}}
               for index in range(200)]
    #  It fits: one ANNOUNCE, no part fields
    [whole] = wire.announce_bodies(head, entries[:10], 65536)
    assert wire.unpack(whole) == dict(head, tools=entries[:10])
    #  It does not: the fewest parts, each within the limit less the margin
    bodies = wire.announce_bodies(head, entries, 65536)
    assert all(len(body) <= 65536 - wire.ANNOUNCE_MARGIN for body in bodies)
    parts = [wire.unpack(body) for body in bodies]
    assert [(part["part"], part["parts"]) for part in parts] == [(index, 4) for index in range(4)]
    assert all(dict(part, tools=None, part=None, parts=None) == dict(head, tools=None, part=None, parts=None)
               for part in parts)
    assert [tool for part in parts for tool in part["tools"]] == entries
    #  An entry too large for a message of its own is left out, and told
    big = {"name": "big", "description": "x" * 70000, "parameters": {"type": "object"}}
    told = []
    bodies = wire.announce_bodies(head, entries[:3] + [big] + entries[3:], 65536,
                                  lambda entry, size: told.append((entry["name"], size)))
    assert [name for name, _ in told] == ["big"] and told[0][1] > 70000
    assert [tool for body in bodies for tool in wire.unpack(body)["tools"]] == entries
    #  ... and what is left goes whole if it fits
    [alone] = wire.announce_bodies(head, [entries[0], big], 65536, lambda entry, size: None)
    assert wire.unpack(alone) == dict(head, tools=[entries[0]])
