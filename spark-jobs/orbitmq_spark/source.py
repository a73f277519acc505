"""The ``orbitmq`` data source: batch and streaming reads of topics, batch and streaming writes.

    spark.dataSource.register(OrbitmqDataSource)
    spark.read.format("orbitmq").option("namesrv", "127.0.0.1:9876").option("topic", "T").load()

Options are checked when the source is created (``load()`` / ``save()`` / ``start()``);
everything that needs the cluster — topics exist, name servers answer, offsets resolve, ends
not before starts — when the read is planned, on the driver, before any task starts. A batch
read plans one partition per queue range (``minPartitions`` cuts large ranges further); a
stream keeps ``{"topic": {"broker:queue": offset}}`` per micro-batch in Spark's checkpoint,
lists the queues again at every trigger (a queue added to a topic is read from its start) and
caps a micro-batch at ``maxOffsetsPerTrigger`` slots.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from orbitmq_spark import brokers, offsets, rows
from orbitmq_spark.options import OffsetKind, OffsetSpec, ReadOptions, parse_read_options, parse_write_options

log = logging.getLogger(__name__)


class OrbitmqDataSource(DataSource):
    """Format ``orbitmq``; see the module docstring and docs/operations/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "orbitmq"

    def schema(self) -> StructType:
        return rows.SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(_writer_setup(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(_writer_setup(self.options, schema))


class RangePartition(InputPartition):
    """One task: one queue's slots ``[start, end)``."""

    def __init__(self, piece: offsets.QueueRange) -> None:
        super().__init__(piece)
        self.piece = piece


ROWS_PER_BATCH = 4096
"""Messages per Arrow batch handed to Spark. A broker pull returns at most its transfer cap
(32 messages by default), and each batch costs fixed work in pyarrow and in Spark's Arrow
stream: several pulls go into one batch."""


def _read(options: ReadOptions, partition: InputPartition) -> Iterator[Any]:
    piece = partition.piece  # type: ignore[attr-defined]
    schema = rows.arrow_schema()
    pending: list[Any] = []
    if brokers.takes_raw(options):  # records to columns in bulk (in C when built)
        for records in brokers.read_range(options, piece, raw=True):
            pending.extend(records)
            if len(pending) >= ROWS_PER_BATCH:
                yield from _columns(schema, piece, pending)
                pending = []
        if pending:
            yield from _columns(schema, piece, pending)
        return
    for messages in brokers.read_range(options, piece):
        pending.extend(messages)
        if len(pending) >= ROWS_PER_BATCH:
            yield rows.to_batch(schema, piece.broker, pending)
            pending = []
    if pending:
        yield rows.to_batch(schema, piece.broker, pending)


def _columns(schema: Any, piece: offsets.QueueRange, records: list[bytes]) -> Iterator[Any]:
    batch = rows.records_to_batch(schema, piece.broker, records, piece.start, piece.end)
    if batch.num_rows:
        yield batch


def _plan(
    view: brokers.ClusterView,
    options: ReadOptions,
    option: str,
    spec: OffsetSpec,
    queues: Sequence[Any],
    bounds: dict[offsets.QueueKey, offsets.QueueBounds],
) -> dict[offsets.QueueKey, int]:
    """Resolve ``spec`` for ``queues``, asking the brokers only what it needs."""
    committed = view.committed(queues) if spec.kind is OffsetKind.GROUP else None
    wants_time = OffsetKind.TIMESTAMP in (spec.kind, spec.fallback)
    by_time = view.offsets_at(queues, spec.timestamp_ms) if wants_time else None
    return offsets.resolve(option, spec, bounds, committed=committed, by_time=by_time)


class BatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        view = brokers.ClusterView(self.options)
        try:
            queues = view.queues()
            bounds = view.bounds(queues)
            starts = _plan(view, self.options, "startingOffsets", self.options.starting, queues, bounds)
            ends = _plan(view, self.options, "endingOffsets", self.options.ending, queues, bounds)
        finally:
            view.close()
        ranges = offsets.check_ranges(starts, ends, bounds, self.options.fail_on_data_loss)
        pieces = offsets.split(ranges, self.options.min_partitions)
        log.info(
            "orbitmq batch read of %s: %d partitions over %d queues",
            ",".join(self.options.topics),
            len(pieces),
            len(queues),
        )
        return [RangePartition(p) for p in pieces]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets per queue in the checkpoint; the look-up client lives as long as the query.

    With ``trigger(availableNow=True)`` the query reads what the queues held when it started
    (in batches of ``maxOffsetsPerTrigger``) and stops: a resumable batch job on a checkpoint.
    """

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._view: brokers.ClusterView | None = None
        self._target: dict[offsets.QueueKey, int] | None = None

    def __getstate__(self) -> dict[str, Any]:  # executors get the options, never the client
        return {"options": self.options, "_view": None, "_target": None}

    def _cluster(self) -> brokers.ClusterView:
        if self._view is None:
            self._view = brokers.ClusterView(self.options)
        return self._view

    def _latest(self) -> tuple[list[Any], dict[offsets.QueueKey, offsets.QueueBounds]]:
        view = self._cluster()
        queues = view.queues(refresh=True)  # new queues appear at the next trigger
        return queues, view.bounds(queues)

    def initialOffset(self) -> dict:
        queues, bounds = self._latest()
        starts = _plan(
            self._cluster(), self.options, "startingOffsets", self.options.starting, queues, bounds
        )
        return offsets.to_json_dict(starts)

    def prepareForTriggerAvailableNow(self) -> None:
        _, bounds = self._latest()
        self._target = {key: bound.max_offset for key, bound in bounds.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        _, bounds = self._latest()
        begin = offsets.from_json_dict(start)
        # A queue the checkpoint does not know yet was added after the query started: from its start.
        latest = {key: bound.max_offset for key, bound in bounds.items()}
        current = {key: begin.get(key, bound.min_offset) for key, bound in bounds.items()}
        if self._target is not None:  # availableNow: nothing past what was there at the start
            latest = {
                key: max(current[key], min(end, self._target.get(key, current[key])))
                for key, end in latest.items()
            }
        if isinstance(limit, ReadMaxRows):
            latest = offsets.cap(current, latest, limit.max_rows)
        # Queues in the checkpoint that the route no longer lists keep their offsets.
        return offsets.to_json_dict({**begin, **latest})

    def reportLatestOffset(self) -> dict | None:
        _, bounds = self._latest()
        return offsets.to_json_dict({key: bound.max_offset for key, bound in bounds.items()})

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, finish = offsets.from_json_dict(start), offsets.from_json_dict(end)
        _, bounds = self._latest()
        ranges = {}
        for key, stop in finish.items():
            bound = bounds.get(key)
            first = begin.get(key, bound.min_offset if bound else stop)
            if bound is not None and stop > first:
                first = offsets.skip_lost(key, first, bound.min_offset, self.options.fail_on_data_loss)
                ranges[key] = (first, max(first, stop))
        return [RangePartition(p) for p in offsets.split(ranges, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the checkpoint holds the offsets (no group offsets are moved)."""

    def stop(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None


# -- writing -----------------------------------------------------------------------------------


class SentCount(WriterCommitMessage):
    def __init__(self, messages: int, batches: int) -> None:
        self.messages = messages
        self.batches = batches


def _writer_setup(options: dict[str, str], schema: StructType) -> Any:
    """Check the options, the DataFrame's columns and that the topic exists, on the driver."""
    write_options = parse_write_options(options)
    rows.check_write_schema(schema)
    brokers.check_topic_exists(write_options)
    return write_options


def _write(options: Any, iterator: Iterator[Any]) -> SentCount:
    sender = brokers.BatchSender(options)
    try:
        for row in iterator:
            message, sharding_key = rows.to_message(options.topic, row.asDict())
            sender.add(message, sharding_key)
        sender.finish()
    finally:
        sender.close()
    return SentCount(sender.sent, sender.batches)


def _total(messages: Sequence[WriterCommitMessage | None]) -> int:
    return sum(m.messages for m in messages if isinstance(m, SentCount))


class BatchWriter(DataSourceWriter):
    """Each task sends its rows with batch sends; a failed send fails the task (Spark retries
    it: delivery is at least once, so a retried task may send some rows twice)."""

    def __init__(self, options: Any) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> SentCount:
        return _write(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("orbitmq write to %s: %d messages sent", self.options.topic, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "orbitmq write to %s failed; %d messages were sent by tasks that finished",
            self.options.topic,
            _total(messages),
        )


class StreamWriter(DataSourceStreamWriter):
    def __init__(self, options: Any) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> SentCount:
        return _write(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info(
            "orbitmq stream write to %s, batch %d: %d messages sent",
            self.options.topic,
            batchId,
            _total(messages),
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("orbitmq stream write to %s, batch %d failed", self.options.topic, batchId)
