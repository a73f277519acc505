"""The DataFrame side of messages: the read schema, messages to Arrow batches, and rows of a
written DataFrame to messages.

Reads hand Spark ``pyarrow.RecordBatch`` es built column by column rather than a tuple per
message: Spark then skips its per-row Python conversion, the larger share of a read's cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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

from orbitmq.client.message import Message
from orbitmq.common.topics import Property
from orbitmq.store.record import StoredMessage
from orbitmq_spark.options import OptionError

SYSTEM_PROPERTIES = frozenset(v for k, v in vars(Property).items() if k.isupper())
"""Properties the system reads itself; shown as columns (tags, keys, msg_id) or not at all."""

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


def to_batch(schema: pa.Schema, broker: str, messages: Sequence[StoredMessage]) -> pa.RecordBatch:
    """One Arrow batch of ``messages`` (all of one queue of ``broker``)."""
    properties = [dict(m.properties) for m in messages]
    columns = [
        [m.topic for m in messages],
        [broker] * len(messages),
        [m.queue_id for m in messages],
        [m.queue_offset for m in messages],
        [p.get(Property.UNIQ_KEY) or m.msg_id for m, p in zip(messages, properties, strict=True)],
        [list(m.keys) for m in messages],
        [p.get(Property.TAGS) for p in properties],
        [[(k, v) for k, v in p.items() if k not in SYSTEM_PROPERTIES] for p in properties],
        [m.body for m in messages],
        [m.born_timestamp_ms * 1000 for m in messages],
        [m.store_timestamp_ms * 1000 for m in messages],
        [m.reconsume_times for m in messages],
    ]
    arrays = [pa.array(values, type=field.type) for values, field in zip(columns, schema, strict=True)]
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
