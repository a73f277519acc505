"""Commit-log record codec.

Every message a broker stores becomes one *record* in the commit log. Records are written
back to back; a record never spans two segment files. When a record does not fit in what is
left of a segment, a *blank* record fills the rest and the writer rolls to the next segment
(RocketMQ's ``END_FILE_MIN_BLANK_LENGTH`` rule: at least :data:`BLANK_MIN_BYTES` always stay
free for that marker).

Message record (big-endian, offsets in bytes)::

     0  total_size        i32   whole record, this field included
     4  magic             u32   MESSAGE_MAGIC
     8  body_crc          u32   CRC-32C (Castagnoli) of the body
    12  queue_id          i32
    16  flag              i32   free for applications
    20  queue_offset      i64   index of the message's unit in its consume queue
    28  physical_offset   i64   commit-log offset of byte 0 of this record
    36  sys_flag          i32   SysFlag bits (transaction type, ...)
    40  born_timestamp    i64   ms, producer clock
    48  born_host         16B   IPv6 or IPv4-mapped address of the producer
    64  born_port         u32
    68  store_timestamp   i64   ms, broker clock
    76  store_host        16B   address of the storing broker
    92  store_port        u32
    96  reconsume_times   i32
   100  prepared_tx_off   i64   commit-log offset of the half message (transactions)
   108  body_length       i32
   112  body              body_length bytes
     .  topic_length      u16   (topic ≤ 127 ASCII characters)
     .  topic
     .  properties_length u16
     .  properties        name \\x01 value \\x02 ... (UTF-8)

Blank record (fills the end of a segment)::

     0  total_size  i32   bytes from here to the end of the segment
     4  magic       u32   BLANK_MAGIC

A record is valid only when its magic, its size and its body CRC all check; recovery stops at
the first record that does not, which is how a torn tail after a crash is found.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import IntFlag
from functools import cache, lru_cache
from operator import methodcaller
from typing import Any, NamedTuple

from crc32c import crc32c

from orbitmq.common.topics import Property, split_keys

body_crc = crc32c
"""The record checksum: CRC-32C, hardware-accelerated on x86 and ARM (2.5x zlib's CRC-32 here)."""

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
BLANK_MIN_BYTES = 8
"""Room always kept at the end of a segment for the blank record."""

HEADER = struct.Struct("!iIIiiqqiq16sIq16sIiqi")
HEADER_BYTES = HEADER.size  # 112
SHARED_FIELDS = struct.Struct("!iq16sIq16sIiq")
"""Header bytes 36..108 (sys flag .. prepared transaction offset): the same for a whole send."""
SHARED_POSITION = 36
PREFIX = struct.Struct("!iI")
"""total_size and magic: all a scanner needs to step from one record to the next."""
U16 = struct.Struct("!H")
TIMESTAMP_FIELD = struct.Struct("!q")
STORE_TIMESTAMP_POS = 68
QUEUE_OFFSET_POS = 20
PHYSICAL_OFFSET_POS = 28
BODY_POS = HEADER_BYTES

MAX_TOPIC_BYTES = 127
MAX_PROPERTIES_BYTES = 32_767
"""The u16 length field could hold more; RocketMQ's Short.MAX_VALUE limit is kept."""

_GET_TAGS = methodcaller("get", Property.TAGS)
_INDEXED_KEYS = frozenset({Property.KEYS, Property.UNIQ_KEY})

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class SysFlag(IntFlag):
    """Bits of the record's ``sys_flag`` field (RocketMQ's MessageSysFlag values)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x1 << 2
    TRANSACTION_COMMIT = 0x2 << 2
    TRANSACTION_ROLLBACK = 0x3 << 2


TRANSACTION_MASK = 0x3 << 2


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_MASK


RECORD_FIXED_BYTES = HEADER_BYTES + 2 + 2
"""Header plus the two u16 length fields: a record's size without body, topic and properties."""


def record_overhead(topic_bytes: int, properties_bytes: int) -> int:
    """Size of a record minus its body."""
    return RECORD_FIXED_BYTES + topic_bytes + properties_bytes


@lru_cache(maxsize=4096)
def encode_host(host: str) -> tuple[bytes, int]:
    """``"10.0.0.1:10911"`` or ``"[::1]:10911"`` → (16-byte address, port)."""
    address, _, port = host.rpartition(":")
    if not address or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"host {host!r} must be 'address:port' with a port from 0 to 65535")
    address = address.strip("[]")
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise ValueError(f"host {host!r} must have an IPv4 or IPv6 address, not {address!r}") from None
    if isinstance(ip, ipaddress.IPv4Address):
        ip = ipaddress.IPv6Address(f"::ffff:{ip}")
    return ip.packed, int(port)


@lru_cache(maxsize=4096)
def decode_host(packed: bytes, port: int) -> str:
    ip = ipaddress.IPv6Address(packed)
    if ip.ipv4_mapped is not None:
        return f"{ip.ipv4_mapped}:{port}"
    return f"[{ip}]:{port}"


def encode_properties(properties: dict[str, str]) -> bytes:
    """Properties in RocketMQ's ``name\\x01value\\x02`` form."""
    if not properties:
        return b""
    return "".join([f"{name}\x01{value}\x02" for name, value in properties.items()]).encode()


def decode_properties(raw: bytes | memoryview) -> dict[str, str]:
    if not raw:
        return {}
    text = bytes(raw).decode()
    result: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        if pair:
            name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
            result[name] = value
    return result


class LazyProperties(Mapping[str, str]):
    """A record's properties, parsed on first use: a consumer that only reads bodies (or a
    ``*`` subscription) never pays the ~2 µs parse per message. Reads like a ``dict``."""

    __slots__ = ("_parsed", "_raw")

    def __init__(self, raw: bytes) -> None:
        self._raw = raw
        self._parsed: dict[str, str] | None = None

    def _dict(self) -> dict[str, str]:
        parsed = self._parsed
        if parsed is None:
            parsed = self._parsed = decode_properties(self._raw)
        return parsed

    def as_dict(self) -> dict[str, str]:
        """The parsed properties as a plain dict (shared: do not modify)."""
        return self._dict()

    def __getitem__(self, name: str) -> str:
        return self._dict()[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._dict().get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._dict()

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __eq__(self, other: object) -> bool:
        return self._dict() == (other._dict() if isinstance(other, LazyProperties) else other)

    __hash__ = None  # type: ignore[assignment]  # like a dict

    def __repr__(self) -> str:
        return repr(self._dict())


def check_properties(properties: dict[str, str]) -> str | None:
    """The reason a property map cannot be stored, or None (the slow, explaining check)."""
    for name, value in properties.items():
        for text, what in ((name, "name"), (value, "value")):
            if not isinstance(text, str):
                return f"property {what} {text!r} must be a string"
            if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
                return f"property {what} {text!r} must not contain the characters \\x01 or \\x02"
        if not name:
            return "property names must not be empty"
    return None


def separators_intact(raw: bytes, count: int) -> bool:
    """Fast check of encoded properties: one ``\\x01`` and one ``\\x02`` per pair, no empty name.

    Names or values that contain a separator, or an empty name, break it; only then is the
    slower :func:`check_properties` run to say which property is at fault.
    """
    if not raw:
        return True
    return (
        raw.count(b"\x01") == count and raw.count(b"\x02") == count and raw[0] != 1 and b"\x02\x01" not in raw
    )


def tags_code(tag: str | None) -> int:
    """The consume-queue tag hash: crc32 of the tag, 0 when there is none.

    Consume-queue filtering compares these codes; clients re-check the tag text, so two tags
    that share a code cost a wasted transfer, never a wrong delivery.
    """
    if not tag:
        return 0
    return zlib.crc32(tag.encode())


class _PropertyViews:
    """Tag and keys read from the properties, shared by both message types."""

    __slots__ = ()
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(Property.TAGS)

    @property
    def keys(self) -> tuple[str, ...]:
        return split_keys(self.properties.get(Property.KEYS))


@dataclass(slots=True)
class InboundMessage(_PropertyViews):
    """A message as handed to the store for appending (RocketMQ's MessageExtBrokerInner)."""

    topic: str
    body: bytes
    queue_id: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp_ms: int = 0
    born_host: str = "127.0.0.1:0"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


@dataclass(slots=True)
class MessageBatch:
    """The messages of one send request: one topic, queue, producer and send time for all.

    Only bodies, properties and flags differ from message to message, so they are kept as
    parallel lists and everything else once. The store validates the shared fields once and
    builds the batch's records with per-message work only where the messages differ, which is
    what makes a 128-message send cost a fraction of 128 single puts.
    """

    topic: str
    queue_id: int
    bodies: list[bytes]
    properties: list[dict[str, str]]
    flags: list[int]
    sys_flag: int = 0
    born_timestamp_ms: int = 0
    born_host: str = "127.0.0.1:0"
    reconsume_times: int = 0

    def __len__(self) -> int:
        return len(self.bodies)

    @property
    def tags(self) -> list[str | None]:
        return list(map(_GET_TAGS, self.properties))

    @property
    def indexed(self) -> list[tuple[int, str | None, str | None]] | None:
        """(index, KEYS, UNIQ_KEY) of the messages that carry either; None when none does."""
        properties = self.properties
        if all(map(_INDEXED_KEYS.isdisjoint, properties)):
            return None
        return [
            (i, p.get(Property.KEYS), p.get(Property.UNIQ_KEY))
            for i, p in enumerate(properties)
            if not _INDEXED_KEYS.isdisjoint(p)
        ]

    def message(self, index: int) -> InboundMessage:
        """One message of the batch as an :class:`InboundMessage` (for checks that explain a refusal)."""
        return InboundMessage(
            self.topic,
            self.bodies[index],
            self.queue_id,
            self.properties[index],
            self.flags[index],
            self.sys_flag,
            self.born_timestamp_ms,
            self.born_host,
            self.reconsume_times,
        )


class ScanColumns(NamedTuple):
    """What the C scanner read from the messages of a send (see :mod:`orbitmq.native`)."""

    layout: bytes
    """Where each message's parts are in the request: the record writer's input, opaque here."""
    count: int
    payload_bytes: int
    """Bodies plus encoded properties, over all messages."""
    body_max: int
    properties_max: int
    """Longest body, longest encoded properties: checked against the store's limits."""
    indexed: list[tuple[int, str | None, str | None]] | None
    """(message index, KEYS, UNIQ_KEY) of the messages that carry either; None when none does."""


@dataclass(slots=True)
class ScannedBatch:
    """The messages of one send still in the request's bytes, checked by the C scanner.

    The C path's counterpart of :class:`MessageBatch` (see :mod:`orbitmq.native`): no Python
    object per message, only what the scanner read (:class:`ScanColumns`: the dispatcher's
    ``indexed``, the record writer's ``layout`` with each message's tag code). ``unpacked``
    gives the same messages as a :class:`MessageBatch`; the store puts that instead whenever
    a check fails, so refusals have one source.
    """

    topic: str
    queue_id: int
    request: bytes
    columns: ScanColumns
    unpacked: Callable[[], MessageBatch]
    sys_flag: int = 0
    born_timestamp_ms: int = 0
    born_host: str = "127.0.0.1:0"
    reconsume_times: int = 0

    def __len__(self) -> int:
        return self.columns.count

    @property
    def count(self) -> int:
        return self.columns.count

    @property
    def indexed(self) -> list[tuple[int, str | None, str | None]] | None:
        return self.columns.indexed

    @property
    def first_unique_key(self) -> str | None:
        indexed = self.indexed
        return indexed[0][2] if indexed and indexed[0][0] == 0 else None


@dataclass(frozen=True, slots=True)
class StoredMessage(_PropertyViews):
    """A decoded record: what queries and clients see (RocketMQ's MessageExt)."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    body: bytes
    properties: Mapping[str, str]
    """A :class:`LazyProperties` when decoded from a record; read it like a dict, copy to change it."""
    flag: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: str
    store_timestamp_ms: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body_crc: int
    size: int

    @property
    def msg_id(self) -> str:
        from orbitmq.store.message_id import encode_offset_msg_id

        return encode_offset_msg_id(self.store_host, self.physical_offset)


class RecordError(ValueError):
    """A byte range that is not a valid record (torn, corrupt, or not a record boundary)."""


def encode(
    message: InboundMessage,
    *,
    properties_raw: bytes,
    topic_raw: bytes,
    queue_offset: int,
    physical_offset: int,
    store_timestamp_ms: int,
    store_host: tuple[bytes, int],
) -> bytes:
    """One complete record; lengths were checked by the caller."""
    body = message.body
    born_address, born_port = encode_host(message.born_host)
    total = record_overhead(len(topic_raw), len(properties_raw)) + len(body)
    header = HEADER.pack(
        total,
        MESSAGE_MAGIC,
        body_crc(body),
        message.queue_id,
        message.flag,
        queue_offset,
        physical_offset,
        message.sys_flag,
        message.born_timestamp_ms,
        born_address,
        born_port,
        store_timestamp_ms,
        store_host[0],
        store_host[1],
        message.reconsume_times,
        message.prepared_transaction_offset,
        len(body),
    )
    return b"".join(
        (header, body, U16.pack(len(topic_raw)), topic_raw, U16.pack(len(properties_raw)), properties_raw)
    )


def encode_blank(size: int) -> bytes:
    return PREFIX.pack(size, BLANK_MAGIC) + bytes(size - PREFIX.size)


def decode(buf: bytes | memoryview, *, check_crc: bool = True) -> StoredMessage:
    """Decode one full record; raises :class:`RecordError` when it does not check."""
    if len(buf) < HEADER_BYTES:
        raise RecordError(f"record of {len(buf)} bytes is shorter than the {HEADER_BYTES}-byte header")
    (
        total,
        magic,
        body_crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_ts,
        born_addr,
        born_port,
        store_ts,
        store_addr,
        store_port,
        reconsume_times,
        prepared_offset,
        body_length,
    ) = HEADER.unpack_from(buf, 0)
    if magic != MESSAGE_MAGIC:
        raise RecordError(f"magic {magic:#x} is not a message record")
    if total > len(buf) or body_length < 0 or BODY_POS + body_length + 4 > total:
        raise RecordError(f"record sizes do not fit: total {total}, body {body_length}, buffer {len(buf)}")
    body = bytes(buf[BODY_POS : BODY_POS + body_length])
    if check_crc and crc32c(body) != body_crc:
        raise RecordError(f"body CRC mismatch at physical offset {physical_offset}")
    pos = BODY_POS + body_length
    (topic_length,) = U16.unpack_from(buf, pos)
    pos += 2
    topic = bytes(buf[pos : pos + topic_length]).decode()
    pos += topic_length
    (properties_length,) = U16.unpack_from(buf, pos)
    pos += 2
    if pos + properties_length != total:
        raise RecordError(f"record length {total} does not match its fields at offset {physical_offset}")
    properties = LazyProperties(bytes(buf[pos : pos + properties_length])) if properties_length else {}
    # Positional: about 1.5 µs cheaper per message than keywords, on the consumer's hot path.
    return StoredMessage(
        topic,
        queue_id,
        queue_offset,
        physical_offset,
        body,
        properties,
        flag,
        sys_flag,
        born_ts,
        decode_host(born_addr, born_port),
        store_ts,
        decode_host(store_addr, store_port),
        reconsume_times,
        prepared_offset,
        body_crc,
        total,
    )


def decode_all(records: Sequence[bytes], *, check_crc: bool = True) -> list[StoredMessage]:
    """Every record of a pull decoded, as :func:`decode` decodes each one.

    In C (``_native.decode_records``) when the extension has it: a push consumer decodes every
    message it consumes, and building a frozen dataclass field by field in Python is most of
    the ~3 µs a message that costs. Whenever a record does not check, :func:`decode` runs on
    them all and raises its :class:`RecordError`."""
    decoder = _native_decoder()
    if decoder is not None:
        decoded = decoder(
            records, StoredMessage, _STORED_SLOTS, LazyProperties, _LAZY_SLOTS, decode_host, check_crc
        )
        if decoded is not None:
            return decoded  # type: ignore[no-any-return]
    return [decode(record, check_crc=check_crc) for record in records]


_C_FIELDS = (
    "topic", "queue_id", "queue_offset", "physical_offset", "body", "properties", "flag", "sys_flag",
    "born_timestamp_ms", "born_host", "store_timestamp_ms", "store_host", "reconsume_times",
    "prepared_transaction_offset", "body_crc", "size",
)  # fmt: skip
"""The fields of :class:`StoredMessage` in the order ``_native.decode_records`` fills them."""
_STORED_SLOTS = tuple(StoredMessage.__dict__[f.name] for f in fields(StoredMessage))
_LAZY_SLOTS = (LazyProperties.__dict__["_raw"], LazyProperties.__dict__["_parsed"])


@cache
def _native_decoder() -> Callable[..., list[StoredMessage] | None] | None:
    """``_native.decode_records``, or None: not built, turned off, an older build, or a
    :class:`StoredMessage` whose fields are not :data:`_C_FIELDS` (the C code sets slots
    without running ``__init__``, so a field it does not know would be left unset)."""
    from orbitmq.native import NATIVE  # imports this module: not at the top

    if tuple(f.name for f in fields(StoredMessage)) != _C_FIELDS or hasattr(StoredMessage, "__post_init__"):
        return None
    return getattr(NATIVE, "decode_records", None)
