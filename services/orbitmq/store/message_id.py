"""Message ids.

The *offset id* names where a message lives: the storing broker's address and the record's
commit-log offset, hex encoded — 32 characters for an IPv4 broker (4 address + 4 port + 8
offset bytes), 56 for IPv6. Any broker can be asked for it and the owner reads the record
without an index lookup. The *unique key* (``UNIQ_KEY``) is made by the producer and indexed;
it is the ``msg_id`` that producers and consumers show: 32 hex characters like an IPv4 offset
id from orbitmq's and RocketMQ 4's clients, 34 from RocketMQ 5's (their v1 message id: ``01``,
then MAC address, process id, seconds since 2021 and a sequence number; it names no broker, so
only the index finds it). A 32-character id may be either kind, so :func:`read_msg_id` reports
every reading of an id and the caller tries the offset first, as RocketMQ's ``queryMsgById`` does.
"""

from __future__ import annotations

import ipaddress
import string
import struct
from dataclasses import dataclass
from functools import lru_cache

from orbitmq.store.record import decode_host, encode_host

_V4 = struct.Struct("!4sIq")
_V6 = struct.Struct("!16sIq")


@lru_cache(maxsize=256)
def msg_id_prefix(store_host: str) -> str:
    """The hex of address and port: everything of an offset id except the offset."""
    packed, port = encode_host(store_host)
    mapped = ipaddress.IPv6Address(packed).ipv4_mapped
    if mapped is not None:
        return _V4.pack(mapped.packed, port, 0).hex().upper()[:-16]
    return _V6.pack(packed, port, 0).hex().upper()[:-16]


def encode_offset_msg_id(store_host: str, physical_offset: int) -> str:
    return f"{msg_id_prefix(store_host)}{physical_offset:016X}"


UNIQUE_KEY_CHARS = 32
"""Length of a producer's unique key from orbitmq's and RocketMQ 4's clients (32 hex)."""
V5_MESSAGE_ID_CHARS = 34
"""Length of a RocketMQ 5 client's message id (``MessageIdCodec``: a version byte and 16 bytes)."""
V5_MESSAGE_ID_VERSION = "01"
"""The version byte every RocketMQ 5 client writes (its codec's ``MESSAGE_ID_VERSION_V1``)."""

_OFFSET_ID_RULE = (
    f"an offset id has {_V4.size * 2} hex characters (IPv4 broker address, port, commit-log "
    f"offset) or {_V6.size * 2} (IPv6)"
)
_UNIQUE_KEY_RULE = (
    f"a unique key (the msg_id producers and consumers print) has {UNIQUE_KEY_CHARS}, or "
    f"{V5_MESSAGE_ID_CHARS} beginning {V5_MESSAGE_ID_VERSION} (RocketMQ 5 clients)"
)


@dataclass(frozen=True, slots=True)
class MessageIdReading:
    """What an id can be: an offset id (decoded), a unique key, or both when 32 hex characters."""

    offset: tuple[str, int] | None
    """(store host, physical offset) when the id decodes as an offset id."""
    unique_key: str | None
    """The id itself when it has the shape of a unique key."""


def read_msg_id(msg_id: str) -> MessageIdReading:
    """Every reading of ``msg_id``; an id that is neither kind raises a ValueError naming the rule."""
    _require_hex(msg_id)
    if len(msg_id) == V5_MESSAGE_ID_CHARS:
        if not msg_id.startswith(V5_MESSAGE_ID_VERSION):
            raise ValueError(
                f"message id {msg_id!r} has {V5_MESSAGE_ID_CHARS} characters but begins "
                f"{msg_id[:2]!r}: {_UNIQUE_KEY_RULE}"
            )
        return MessageIdReading(None, msg_id)
    if len(msg_id) not in (_V4.size * 2, _V6.size * 2, UNIQUE_KEY_CHARS):
        raise ValueError(
            f"message id {msg_id!r} has {len(msg_id)} characters: {_OFFSET_ID_RULE}, and {_UNIQUE_KEY_RULE}"
        )
    if len(msg_id) != UNIQUE_KEY_CHARS:
        return MessageIdReading(decode_offset_msg_id(msg_id), None)
    try:
        offset: tuple[str, int] | None = decode_offset_msg_id(msg_id)
    except ValueError:  # a unique key's bytes need not make a valid address and offset
        offset = None
    return MessageIdReading(offset, msg_id)


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """(store host, physical offset); a malformed id names itself and the rule."""
    _require_hex(msg_id)
    raw = bytes.fromhex(msg_id) if len(msg_id) % 2 == 0 else b""
    if len(raw) == _V4.size:
        address, port, offset = _V4.unpack(raw)
        packed = ipaddress.IPv6Address(f"::ffff:{ipaddress.IPv4Address(address)}").packed
    elif len(raw) == _V6.size:
        packed, port, offset = _V6.unpack(raw)
    else:
        raise ValueError(f"message id {msg_id!r} has {len(msg_id)} characters: {_OFFSET_ID_RULE}")
    if offset < 0:
        raise ValueError(f"message id {msg_id!r} encodes a negative offset {offset}")
    return decode_host(packed, port), offset


def _require_hex(msg_id: str) -> None:
    """Both kinds of id are hexadecimal; name the first character that is not."""
    bad = next((c for c in msg_id if c not in string.hexdigits), None)
    if bad is not None:
        raise ValueError(f"message id {msg_id!r} contains {bad!r}, not hexadecimal")
