"""The DataFrame side of messages: the read schema, messages to Arrow batches, and rows of a
written DataFrame to messages.

Reads hand Spark ``pyarrow.RecordBatch`` es built column by column rather than a tuple per
message: Spark then skips its per-row Python conversion, the larger share of a read's cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from orbitmq import native
from orbitmq.client.message import Message
from orbitmq.common import properties as common_properties
from orbitmq.common.topics import Property, split_keys
from orbitmq.store.record import LazyProperties, RecordError, StoredMessage, decode
from orbitmq_spark.options import OptionError

SYSTEM_PROPERTIES = common_properties.SYSTEM_PROPERTIES
"""Properties the system uses (the one list, :mod:`orbitmq.common.properties`); shown as columns
(tags, keys, msg_id) or not at all, and refused in a written row's properties."""

SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("broker", StringType(), False),
        StructField("queue", IntegerType(), False),
        StructField("queue_offset", LongType(), False),
        StructField("msg_id", StringType(), False),
        StructField("keys", ArrayType(StringType(), False), False),
        StructField("tags", StringType(), True),
        StructField("properties", MapType(StringType(), StringType(), False), False),
        StructField("body", BinaryType(), False),
        StructField("born_timestamp", TimestampType(), False),
        StructField("store_timestamp", TimestampType(), False),
        StructField("reconsume_times", IntegerType(), False),
    ]
)
"""What a read returns, one row per message (``msg_id`` is the producer's unique key, else the
offset message id)."""


def arrow_schema() -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(SCHEMA, timezone="UTC")


def _plain(properties: Mapping[str, str]) -> Mapping[str, str]:
    """The dict behind a record's lazy properties: reads through the ``Mapping`` ABC cost
    several Python calls each, the plain dict's are C calls."""
    return properties.as_dict() if type(properties) is LazyProperties else properties


def _user_properties(properties: Mapping[str, str]) -> list[tuple[str, str]]:
    """Properties other than the system's, as the map column's ``(key, value)`` pairs."""
    if properties.keys() <= SYSTEM_PROPERTIES:  # the usual case: one C-level set comparison
        return []
    return [(k, v) for k, v in properties.items() if k not in SYSTEM_PROPERTIES]


_SCALARS = attrgetter(
    "topic", "queue_offset", "body", "born_timestamp_ms", "store_timestamp_ms", "reconsume_times"
)


def to_batch(schema: pa.Schema, broker: str, messages: Sequence[StoredMessage]) -> pa.RecordBatch:
    """One Arrow batch of ``messages`` (all of one queue of ``broker``).

    The plain fields are read in one C-level pass (``attrgetter`` and a transpose), the
    properties once per message as a plain dict.
    """
    count = len(messages)
    if not count:
        return pa.RecordBatch.from_arrays([pa.array([], type=field.type) for field in schema], schema=schema)
    topics, queue_offsets, bodies, born, stored, reconsumes = zip(*map(_SCALARS, messages), strict=True)
    properties = [_plain(m.properties) for m in messages]
    uniq, tags, keys = Property.UNIQ_KEY, Property.TAGS, Property.KEYS
    types = [field.type for field in schema]
    arrays = [
        pa.array(topics, type=types[0]),
        pa.array([broker] * count, type=types[1]),
        pa.array([m.queue_id for m in messages], type=types[2]),
        pa.array(queue_offsets, type=types[3]),
        pa.array([p.get(uniq) or m.msg_id for m, p in zip(messages, properties, strict=True)], type=types[4]),
        pa.array([split_keys(p.get(keys)) for p in properties], type=types[5]),
        pa.array([p.get(tags) for p in properties], type=types[6]),
        pa.array([_user_properties(p) for p in properties], type=types[7]),
        pa.array(bodies, type=types[8]),
        pa.array([t * 1000 for t in born], type=types[9]),
        pa.array([t * 1000 for t in stored], type=types[10]),
        pa.array(reconsumes, type=types[11]),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_NAMES = (Property.UNIQ_KEY.encode(), Property.KEYS.encode(), Property.TAGS.encode())
_SYSTEM_NAMES = tuple(sorted(name.encode() for name in SYSTEM_PROPERTIES))


def records_to_batch(
    schema: pa.Schema, broker: str, records: Sequence[bytes], start: int, end: int
) -> pa.RecordBatch:
    """One Arrow batch of the pulled ``records`` (whole records, one queue of ``broker``) whose
    queue offset is in ``[start, end)``: the same batch :func:`to_batch` makes of them.

    With ``orbitmq._native`` the columns' buffers are built in C straight from the records (no
    Python object per message; bodies copied once, into the body column), which is most of a
    read's cost in the Python worker; without it, or for records whose properties the Python
    path must read (non-ASCII text, a name twice), the records are decoded here."""
    try:
        built = native.pull_columns(records, start, end, _NAMES, _SYSTEM_NAMES)
    except ValueError as error:
        raise RecordError(str(error)) from None
    if built is not None:
        return _from_columns(schema, broker, records, start, end, *built)
    messages = [m for m in map(decode, records) if start <= m.queue_offset < end]
    return to_batch(schema, broker, messages)


def _from_columns(
    schema: pa.Schema,
    broker: str,
    records: Sequence[bytes],
    start: int,
    end: int,
    count: int,
    columns: tuple[bytes, ...],
    missing_ids: list[int],
) -> pa.RecordBatch:
    """The batch of ``pull_columns``' buffers (see its docstring for their order)."""
    (
        topic_off,
        topic,
        queue,
        queue_offset,
        id_off,
        ids,
        keys_off,
        key_off,
        key,
        tag_valid,
        tag_off,
        tag,
        props_off,
        pkey_off,
        pkey,
        pval_off,
        pval,
        body_off,
        body,
        born,
        stored,
        reconsume,
    ) = (pa.py_buffer(c) for c in columns)
    types = [field.type for field in schema]

    def strings(kind: pa.DataType, length: int, offsets: pa.Buffer, data: pa.Buffer) -> pa.Array:
        return pa.Array.from_buffers(kind, length, [None, offsets, data])

    msg_ids = strings(types[4], count, id_off, ids)
    if missing_ids:  # no unique key: the offset message id, which needs the store host (rare)
        kept = [m for m in map(decode, records) if start <= m.queue_offset < end]
        filled = msg_ids.to_pylist()
        for row in missing_ids:
            filled[row] = kept[row].msg_id
        msg_ids = pa.array(filled, type=types[4])
    key_items = len(key_off) // 4 - 1
    props_items = len(pkey_off) // 4 - 1
    map_type = types[7]
    key_strings = strings(types[5].value_type, key_items, key_off, key)
    arrays = [
        strings(types[0], count, topic_off, topic),
        pa.array([broker] * count, type=types[1]),
        pa.Array.from_buffers(types[2], count, [None, queue]),
        pa.Array.from_buffers(types[3], count, [None, queue_offset]),
        msg_ids,
        pa.Array.from_buffers(types[5], count, [None, keys_off], children=[key_strings]),
        pa.Array.from_buffers(types[6], count, [tag_valid, tag_off, tag]),
        pa.MapArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), count + 1, [None, props_off]),
            strings(map_type.key_type, props_items, pkey_off, pkey),
            strings(map_type.item_type, props_items, pval_off, pval),
            type=map_type,
        ),
        pa.Array.from_buffers(types[8], count, [None, body_off, body]),
        pa.Array.from_buffers(types[9], count, [None, born]),
        pa.Array.from_buffers(types[10], count, [None, stored]),
        pa.Array.from_buffers(types[11], count, [None, reconsume]),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


WRITE_COLUMNS: dict[str, tuple[type[DataType], ...]] = {
    "body": (BinaryType, StringType),
    "keys": (StringType, ArrayType),
    "tags": (StringType,),
    "properties": (MapType,),
    "sharding_key": (StringType,),
}
"""Columns a written DataFrame may have, and the Spark types each accepts (body is required)."""


def check_write_schema(schema: StructType) -> None:
    """A DataFrame to write must have ``body`` and only the columns above, with those types."""
    names = [f.name for f in schema.fields]
    unknown = [n for n in names if n not in WRITE_COLUMNS]
    if unknown:
        raise OptionError(
            "schema",
            f"column {unknown[0]!r} is not one the orbitmq writer takes; "
            f"allowed: {', '.join(WRITE_COLUMNS)} (body required)",
        )
    if "body" not in names:
        raise OptionError("schema", "the DataFrame needs a 'body' column (binary or string)")
    for field in schema.fields:
        allowed = WRITE_COLUMNS[field.name]
        ok = isinstance(field.dataType, allowed)
        if isinstance(field.dataType, ArrayType):
            ok = ok and isinstance(field.dataType.elementType, StringType)
        if isinstance(field.dataType, MapType):
            ok = (
                ok
                and isinstance(field.dataType.keyType, StringType)
                and isinstance(field.dataType.valueType, StringType)
            )
        if not ok:
            raise OptionError(
                "schema",
                f"column {field.name!r} has type {field.dataType.simpleString()}; "
                f"it must be {' or '.join(t.__name__.removesuffix('Type').lower() for t in allowed)}"
                + (" of strings" if field.name in ("keys", "properties") else ""),
            )


def to_message(topic: str, row: Mapping[str, Any]) -> tuple[Message, str | None]:
    """A written row as a message and its sharding key (None: any queue)."""
    body = row["body"]
    if body is None:
        raise ValueError(f"a row to write to topic {topic} has a null body; every message needs one")
    if isinstance(body, str):
        body = body.encode()
    properties = dict(row.get("properties") or {})
    reserved = sorted(SYSTEM_PROPERTIES & set(properties))
    if reserved:
        raise ValueError(
            f"property {reserved[0]!r} of a row to write to topic {topic} is reserved by orbitmq; "
            "use the keys and tags columns instead"
        )
    keys = row.get("keys")
    message = Message(
        topic,
        bytes(body),
        tags=row.get("tags") or None,
        keys=list(keys) if isinstance(keys, list | tuple) else keys,
        properties=properties,
    )
    return message, row.get("sharding_key")
