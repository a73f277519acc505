"""``orbitmq._native.pull_columns`` through ``orbitmq_spark.rows.records_to_batch``: the Arrow
batch built in C from pulled records equals the one the Python path builds from decoded
messages (``rows.to_batch``), for every shape of record the read schema shows."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from orbitmq import native
from orbitmq.common.topics import Property
from orbitmq.store.record import InboundMessage, RecordError, decode, encode, encode_host, encode_properties
from orbitmq_spark import rows

needs_c = pytest.mark.skipif(native.NATIVE is None, reason="orbitmq._native is not built (or turned off)")

SCHEMA = rows.arrow_schema()


def _record(offset: int, body: bytes, properties: dict[str, str], **fields: int) -> bytes:
    message = InboundMessage(
        topic="ColumnsTopic",
        body=body,
        queue_id=3,
        properties=properties,
        born_timestamp_ms=1_700_000_000_000 + offset,
        born_host="10.0.0.7:4321",
        reconsume_times=fields.get("reconsume_times", 0),
    )
    return encode(
        message,
        properties_raw=encode_properties(properties),
        topic_raw=b"ColumnsTopic",
        queue_offset=offset,
        physical_offset=10_000 + offset * 2_000,
        store_timestamp_ms=1_700_000_000_500 + offset,
        store_host=encode_host("127.0.0.1:10911"),
    )


def _python(records: list[bytes], start: int, end: int) -> pa.RecordBatch:
    messages = [m for m in map(decode, records) if start <= m.queue_offset < end]
    return rows.to_batch(SCHEMA, "broker-a", messages)


def _shapes() -> list[bytes]:
    rng = random.Random(7)
    uniq, keys, tags = Property.UNIQ_KEY, Property.KEYS, Property.TAGS
    shapes: list[dict[str, str]] = [
        {uniq: "A" * 32},
        {uniq: "B" * 32, tags: "TagA", keys: "k1 k2"},
        {uniq: "C" * 32, tags: "", keys: "  lone  "},  # empty tag (not null), keys with empty pieces
        {uniq: "D" * 32, "color": "red", "n": "1", keys: ""},  # user properties, empty keys
        {},  # no properties at all: offset message id, no tag, no keys
        {tags: "TagB", "WAIT": "true"},  # no unique key; a system property that is not shown
        {uniq: "", "x": ""},  # empty unique key: the offset id; a user property with no value
    ]
    records = []
    for offset in range(200):
        properties = dict(shapes[offset % len(shapes)])
        body = bytes(rng.getrandbits(8) for _ in range(rng.choice((0, 1, 17, 1024))))
        records.append(_record(offset, body, properties, reconsume_times=offset % 3))
    return records


@needs_c
def test_c_columns_equal_the_python_batch_for_every_record_shape() -> None:
    records = _shapes()
    built = rows.records_to_batch(SCHEMA, "broker-a", records, 0, 200)
    assert native.NATIVE.pull_columns(records, 0, 200, b"UNIQ_KEY", b"KEYS", b"TAGS", ()) is not None
    built.validate(full=True)
    assert built.equals(_python(records, 0, 200))
    assert built.num_rows == 200


def test_only_the_range_is_kept() -> None:
    records = _shapes()
    built = rows.records_to_batch(SCHEMA, "broker-a", records, 13, 150)
    assert built.column("queue_offset").to_pylist() == list(range(13, 150))
    assert built.equals(_python(records, 13, 150))
    empty = rows.records_to_batch(SCHEMA, "broker-a", records, 500, 600)
    assert empty.num_rows == 0 and empty.equals(_python(records, 500, 600))


@needs_c
def test_properties_the_c_path_declines_go_the_python_way() -> None:
    """Non-ASCII text or a property name twice: the C path answers None and the batch is still
    the Python one."""
    unicode = _record(0, b"x", {Property.UNIQ_KEY: "E" * 32, "städte": "Zürich"})
    raw = encode_properties({Property.UNIQ_KEY: "F" * 32, "dup": "1"}) + b"dup\x012\x02"
    message = InboundMessage(topic="ColumnsTopic", body=b"y", queue_id=3)
    twice = encode(
        message,
        properties_raw=raw,
        topic_raw=b"ColumnsTopic",
        queue_offset=1,
        physical_offset=5_000,
        store_timestamp_ms=1,
        store_host=encode_host("127.0.0.1:10911"),
    )
    for records in ([unicode], [twice]):
        assert native.NATIVE.pull_columns(records, 0, 10, b"UNIQ_KEY", b"KEYS", b"TAGS", ()) is None
        assert rows.records_to_batch(SCHEMA, "broker-a", records, 0, 10).equals(_python(records, 0, 10))


def test_a_corrupt_record_is_refused_as_decode_refuses_it() -> None:
    good = _record(0, b"payload", {Property.UNIQ_KEY: "G" * 32})
    body_flip = bytearray(good)
    body_flip[112] ^= 0xFF  # first body byte
    with pytest.raises(RecordError, match="body CRC mismatch at physical offset 10000"):
        rows.records_to_batch(SCHEMA, "broker-a", [bytes(body_flip)], 0, 10)
    with pytest.raises(RecordError, match="shorter than the 112-byte header"):
        rows.records_to_batch(SCHEMA, "broker-a", [good[:50]], 0, 10)
    bad_magic = good[:4] + b"\x00\x00\x00\x00" + good[8:]
    with pytest.raises(RecordError, match="is not a message record"):
        rows.records_to_batch(SCHEMA, "broker-a", [bad_magic], 0, 10)


def test_without_the_c_module_the_records_are_decoded_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "NATIVE", None)
    records = _shapes()
    assert native.pull_columns(records, 0, 200, (b"UNIQ_KEY", b"KEYS", b"TAGS"), ()) is None
    assert rows.records_to_batch(SCHEMA, "broker-a", records, 5, 60).equals(_python(records, 5, 60))
