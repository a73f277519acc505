"""``orbitmq._native.decode_records`` through ``record.decode_all``: the messages built in C
from pulled records equal, field for field and type for type, what ``record.decode`` builds;
a record that does not check gets ``decode``'s own error."""

from __future__ import annotations

import dataclasses
import gc
import random

import pytest

from orbitmq import native
from orbitmq.store import record
from orbitmq.store.record import (
    InboundMessage,
    LazyProperties,
    RecordError,
    StoredMessage,
    decode,
    decode_all,
    encode,
    encode_host,
    encode_properties,
)

needs_c = pytest.mark.skipif(native.NATIVE is None, reason="orbitmq._native is not built (or turned off)")

HOSTS = ["10.0.0.7:4321", "127.0.0.1:10911", "[::1]:9876", "[2001:db8::5]:65535", "0.0.0.0:0"]


def _record(rng: random.Random, offset: int, topic: str) -> bytes:
    properties = {
        f"p{k}-{rng.choice(['', 'é', 'x' * 40])}": rng.choice(["", "v", "ünï", "a b"])
        for k in range(rng.choice([0, 0, 1, 3, 12]))
    }
    message = InboundMessage(
        topic=topic,
        body=rng.randbytes(rng.choice([0, 1, 100, 1024, 5000])),
        queue_id=rng.randrange(-(2**31), 2**31),
        properties=properties,
        flag=rng.randrange(-(2**31), 2**31),
        sys_flag=rng.randrange(0, 16),
        born_timestamp_ms=rng.randrange(-(2**63), 2**63),
        born_host=rng.choice(HOSTS),
        reconsume_times=rng.randrange(0, 17),
        prepared_transaction_offset=rng.randrange(0, 2**63),
    )
    return encode(
        message,
        properties_raw=encode_properties(properties),
        topic_raw=topic.encode(),
        queue_offset=offset,
        physical_offset=rng.randrange(0, 2**63),
        store_timestamp_ms=rng.randrange(0, 2**63),
        store_host=encode_host(rng.choice(HOSTS)),
    )


def _records(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    topics = ["T", "%RETRY%group", "Tøpic", "x" * 127]
    return [_record(rng, offset, rng.choice(topics)) for offset in range(count)]


def _same(c_made: StoredMessage, python_made: StoredMessage) -> None:
    assert c_made == python_made
    for f in dataclasses.fields(StoredMessage):
        mine, theirs = getattr(c_made, f.name), getattr(python_made, f.name)
        assert type(mine) is type(theirs), f.name
    if isinstance(c_made.properties, LazyProperties):
        assert c_made.properties.as_dict() == python_made.properties.as_dict()  # type: ignore[attr-defined]


@needs_c
@pytest.mark.parametrize("seed", range(20))
def test_c_decoding_equals_python_decoding(seed: int) -> None:
    records = _records(seed, 300)
    decoded = decode_all(records, check_crc=seed % 2 == 0)
    assert len(decoded) == len(records)
    for c_made, raw in zip(decoded, records, strict=True):
        _same(c_made, decode(raw))
    assert decoded[0].msg_id == decode(records[0]).msg_id
    assert decode_all([]) == []


@needs_c
def test_the_c_path_is_the_one_taken() -> None:
    assert record._native_decoder() is not None
    records = _records(99, 4)
    assert native.NATIVE.decode_records(  # type: ignore[union-attr]
        records,
        StoredMessage,
        record._STORED_SLOTS,
        LazyProperties,
        record._LAZY_SLOTS,
        record.decode_host,
        True,
    ) == [decode(r) for r in records]


@needs_c
def test_messages_built_in_c_are_ordinary_objects() -> None:
    """Frozen as ever, replaceable, untracked by the cyclic GC, and freed with their list."""
    message = next(m for m in decode_all(_records(5, 20)) if isinstance(m.properties, LazyProperties))
    # Nothing in them can form a cycle: the cyclic GC does not walk a backlog of them.
    assert not gc.is_tracked(message)
    assert not gc.is_tracked(message.properties)
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.topic = "other"  # type: ignore[misc]
    assert dataclasses.replace(message, topic="Other").topic == "Other"
    body = message.body
    del message
    gc.collect()
    assert isinstance(body, bytes)
    for _ in range(200):  # a leak of the list, a message or a slot value shows as growth
        decode_all(_records(6, 50))
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(200):
        decode_all(_records(6, 50))
    gc.collect()
    assert len(gc.get_objects()) - before < 100


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        (lambda r: r[:50], "shorter than"),
        (lambda r: r[:4] + b"\0\0\0\0" + r[8:], "magic"),
        (lambda r: r[:8] + bytes([r[8] ^ 1]) + r[9:], "CRC"),
        (lambda r: r[:-1], "sizes do not fit"),
        (lambda r: r[:108] + (10**6).to_bytes(4, "big") + r[112:], "sizes do not fit"),
    ],
)
def test_a_bad_record_gets_the_python_paths_error(damage: object, error: str) -> None:
    good = _records(3, 5)
    bad = damage(_record(random.Random(1), 9, "T"))  # type: ignore[operator]
    with pytest.raises(RecordError, match=error):
        decode_all([*good, bad, *good], check_crc=True)


def test_the_topic_must_be_utf8() -> None:
    raw = bytearray(_record(random.Random(2), 0, "Tx"))
    body_length = int.from_bytes(raw[108:112], "big")
    raw[112 + body_length + 2] = 0xFF  # the topic's first byte
    with pytest.raises(UnicodeDecodeError):
        decode_all([bytes(raw)])
