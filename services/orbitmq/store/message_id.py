"""Message ids.

The *offset id* names where a message lives: the storing broker's address and the record's
commit-log offset, hex encoded — 32 characters for an IPv4 broker (4 address + 4 port + 8
offset bytes), 56 for IPv6. Any broker can be asked for it and the owner reads the record
without an index lookup. The *unique key* (``UNIQ_KEY``) is made by the producer and indexed.
"""

from __future__ import annotations

import ipaddress
import struct
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


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """(store host, physical offset); a malformed id names itself and the rule."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError(f"message id {msg_id!r} must be hexadecimal") from None
    if len(raw) == _V4.size:
        address, port, offset = _V4.unpack(raw)
        packed = ipaddress.IPv6Address(f"::ffff:{ipaddress.IPv4Address(address)}").packed
    elif len(raw) == _V6.size:
        packed, port, offset = _V6.unpack(raw)
    else:
        raise ValueError(
            f"message id {msg_id!r} must be {_V4.size * 2} (IPv4) or {_V6.size * 2} (IPv6) hex characters"
        )
    if offset < 0:
        raise ValueError(f"message id {msg_id!r} encodes a negative offset {offset}")
    return decode_host(packed, port), offset
