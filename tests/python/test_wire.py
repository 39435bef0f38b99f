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


def test_a_body_without_repeats_decodes():
    body = {"callId": "c1", "arguments": {"path": "x", "list": [{"a": 1}, {"a": 2}]}}
    assert wire.unpack(msgpack.packb(body)) == body
