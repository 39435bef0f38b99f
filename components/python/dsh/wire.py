"""The dsh/1 wire format (schemas/PROTOCOL.md): frames, bodies, endpoints and
socket settings that every party of this package shares.

A DEALER's message is  "" "DSH1" COMMAND [TOKEN] BODY,  each body one msgpack
map; an announce message is  "DSH1" COMMAND BODY  and an event  KIND BODY.
"""

import os

import msgpack
import zmq

#  Names, limits, defaults and error names come from dsh/1's one definition
#  (schemas/dsh_protocol.json, generated into protocol.py)
from .protocol import (BROKERS_MAX, DEFAULT_CALL_TIMEOUT_MS, DEFAULT_ENDPOINT, DEFAULT_HEARTBEAT_MS,  # noqa: F401
                       DEFAULT_LIVENESS, ERROR_NAMES, MAX_MESSAGE_BYTES, PROTOCOL, UNKNOWN_ERROR_NAME)
from .protocol import DEPTH_MAX as MAX_DEPTH

DEFAULT_BROKER = DEFAULT_ENDPOINT


class WireError(ValueError):
    """A message that is not dsh/1: dropped by whoever received it."""


def pack(body):
    return msgpack.packb(body, use_bin_type=True)


def _decimal(number):
    """The shortest decimal text of a number, as JavaScript writes a
    number used as a property name (1.0 -> "1", 0.1 -> "0.1")."""
    if isinstance(number, float) and number.is_integer() and abs(number) < 1e21:
        return str(int(number))
    return repr(number) if isinstance(number, float) else str(number)


def _key_tokens(key):
    """What a key is to any common reader: two keys that share a token are
    one key (PROTOCOL.md, Bodies: one strict decode)."""
    if isinstance(key, (list, dict)):
        raise ValueError("an array or a map as a map key")
    if isinstance(key, bool):
        return [("bool", key)]
    if isinstance(key, (int, float)):
        return [("number", key), ("text", _decimal(key).encode())]
    if isinstance(key, str):
        return [("text", key.encode("utf-8", "surrogatepass"))]
    if isinstance(key, bytes):
        return [("text", key)]
    return [("other", key)]


def _strict_map(pairs):
    """A map that repeats no key (PROTOCOL.md, Bodies: one strict decode):
    a reader that took the first value and one that took the last would see
    two messages. A str and a bin of the same bytes are one key, and so are
    two numbers of one value, and a number and its decimal text. true and 1
    are two keys, but one in a Python dict: such a map is refused too, since
    this reader cannot hold it whole."""
    result, seen = {}, set()
    for key, value in pairs:
        tokens = _key_tokens(key)
        if any(token in seen for token in tokens) or key in result:
            raise ValueError("duplicate key %r" % (key,))
        seen.update(tokens)
        result[key] = value
    return result


def unpack(data):
    """One msgpack map from untrusted bytes, or WireError."""
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=False, object_pairs_hook=_strict_map)
    except Exception as error:  # noqa: BLE001 - msgpack raises several kinds on bad input
        raise WireError("malformed body: %s" % error) from None
    if not isinstance(body, dict):
        raise WireError("the body is not a map")
    if _depth(body) > MAX_DEPTH:
        raise WireError("the body nests deeper than %d" % MAX_DEPTH)
    return body


def _depth(container, level=1):
    """How deep containers nest under container (itself at level); stops
    counting past MAX_DEPTH."""
    deepest = level
    for item in container.values() if isinstance(container, dict) else container:
        if isinstance(item, (dict, list)):
            if level >= MAX_DEPTH:
                return level + 1
            deepest = max(deepest, _depth(item, level + 1))
    return deepest


def dealer_message(command, body, token=None):
    """The frames a DEALER sends: "" "DSH1" COMMAND [TOKEN] BODY."""
    frames = [b"", PROTOCOL, command.encode()]
    if token is not None:
        frames.append(token)
    frames.append(body if isinstance(body, bytes) else pack(body))
    return frames


#  An ANNOUNCE's body stays this far under the broker's maxMessageBytes:
#  room for what the transport adds to a frame (the C SDK's margin)
ANNOUNCE_MARGIN = 256


def _announce_body(head, packed, part=None, parts=None):
    """An ANNOUNCE body: head's fields, part and parts if given, and the
    already packed entries as tools."""
    fields = dict(head)
    if parts is not None:
        fields.update(part=part, parts=parts)
    packer = msgpack.Packer(use_bin_type=True)
    chunks = [packer.pack_map_header(len(fields) + 1)]
    for key, value in fields.items():
        chunks += [packer.pack(key), packer.pack(value)]
    chunks += [packer.pack("tools"), packer.pack_array_header(len(packed))]
    return b"".join(chunks + packed)


def announce_bodies(head, entries, max_message_bytes, too_large=None):
    """The ANNOUNCE bodies of a tool set (PROTOCOL.md, The announce channel):
    one, head's fields and every entry, when it fits in max_message_bytes
    (less ANNOUNCE_MARGIN); else the fewest parts that each fit, the entries
    in order, each with part and parts. An entry too large for a message of
    its own is left out (the broker could not take it), and too_large(entry,
    size) is told of it."""
    limit = max_message_bytes - ANNOUNCE_MARGIN
    packed = [pack(entry) for entry in entries]
    largest_array_header = 5
    whole = len(_announce_body(head, [])) - 1 + largest_array_header + sum(map(len, packed))
    if whole <= limit:
        return [_announce_body(head, packed)]
    room = limit - (len(_announce_body(head, [], 2**32 - 1, 2**32 - 1)) - 1 + largest_array_header)
    slices, used = [], 0
    for entry, data in zip(entries, packed):
        if len(data) > room:
            if too_large is not None:
                too_large(entry, len(data))
            continue
        #  Each slice as long as a message takes: no fewer parts can hold
        #  the entries in order
        if not slices or used + len(data) > room:
            slices.append([])
            used = 0
        slices[-1].append(data)
        used += len(data)
    if len(slices) <= 1:
        return [_announce_body(head, slices[0] if slices else [])]
    return [_announce_body(head, part_entries, part, len(slices)) for part, part_entries in enumerate(slices)]


def parse_dealer(frames):
    """(command, token or None, body) of a message a DEALER received."""
    if len(frames) < 4 or frames[0] != b"" or frames[1] != PROTOCOL:
        raise WireError("not a dsh/1 message")
    command = frames[2].decode("ascii", "replace")
    if len(frames) == 5:
        return command, frames[3], unpack(frames[4])
    if len(frames) == 4:
        return command, None, unpack(frames[3])
    raise WireError("%s with %d frames" % (command, len(frames)))


def brokers(spec=None):
    """The front endpoints of a comma list (None: $DSH_BROKER, else the default)."""
    spec = spec or os.environ.get("DSH_BROKER") or DEFAULT_BROKER
    if isinstance(spec, (list, tuple)):
        entries = list(spec)
    else:
        entries = [entry.strip() for entry in spec.split(",") if entry.strip()]
    if not entries or len(entries) > BROKERS_MAX:
        raise ValueError("a broker list holds 1 to %d endpoints, not %r" % (BROKERS_MAX, spec))
    for entry in entries:
        if not entry.startswith(("tcp://", "ipc://", "inproc://")):
            raise ValueError("%r is not a broker endpoint (tcp://HOST:PORT, ipc://, inproc://)" % entry)
    return entries


def resolve(advertised, front):
    """An advertised endpoint, its wildcard host replaced by the one used to
    reach front (PROTOCOL.md, wildcard host rule)."""
    if not advertised.startswith("tcp://") or not front.startswith("tcp://"):
        return advertised
    host, _, port = advertised[len("tcp://"):].rpartition(":")
    if host not in ("*", "0.0.0.0", "::", "[::]"):
        return advertised
    front_host = front[len("tcp://"):].rpartition(":")[0]
    return "tcp://%s:%s" % (front_host, port)


def keepalive(sock, heartbeat_ms=DEFAULT_HEARTBEAT_MS, liveness=DEFAULT_LIVENESS):
    """Quick reconnects and TCP keepalive, no ZMTP heartbeats: for the
    sockets of components and watchers, whose application heartbeats
    (HEARTBEAT and its answer; PING and PONG) say when the broker is gone
    (PROTOCOL.md, Liveness: connections)."""
    window_ms = heartbeat_ms * liveness
    sock.setsockopt(zmq.CONNECT_TIMEOUT, heartbeat_ms)
    sock.setsockopt(zmq.RECONNECT_IVL, 100)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, max(heartbeat_ms, 100))
    sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, max(window_ms // 1000, 1))
    sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, max(heartbeat_ms // 1000, 1))
    sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, liveness)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    sock.setsockopt(zmq.LINGER, 0)


def heal(sock, heartbeat_ms=DEFAULT_HEARTBEAT_MS, liveness=DEFAULT_LIVENESS):
    """keepalive, and ZMTP heartbeats as the reference SDK's clients set
    them. No TTL: it would make the broker keep, and re-arm on every
    message, a timer per connection (PROTOCOL.md, Liveness: connections)."""
    sock.setsockopt(zmq.HEARTBEAT_IVL, heartbeat_ms)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, heartbeat_ms * liveness)
    keepalive(sock, heartbeat_ms, liveness)


def error_result(call_id, code, text):
    """A RESULT body made here, as dsh makes them: text starting "Error: "."""
    return {"callId": call_id, "content": [{"type": "text", "text": text}], "isError": True,
            "error": {"name": ERROR_NAMES.get(code, UNKNOWN_ERROR_NAME), "code": code}}
