"""Offset arithmetic of reads (pure): resolving where each queue starts and ends, splitting the
ranges into Spark partitions, capping a micro-batch, and the checkpoint's JSON form.

A queue offset here is always "the next message to read", so a range ``[start, end)`` holds
``end - start`` queue slots (fewer messages come back when a tag or SQL92 filter drops some).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from orbitmq_spark.options import (
    EARLIEST,
    LATEST,
    OffsetKind,
    OffsetSpec,
    OptionError,
    QueueKey,
    parse_per_queue,
    queue_key_text,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueBounds:
    min_offset: int
    max_offset: int
    """One past the last message."""


@dataclass(frozen=True)
class QueueRange:
    """One Spark partition's work: queue slots ``[start, end)`` of one queue."""

    topic: str
    broker: str
    queue_id: int
    start: int
    end: int

    @property
    def key(self) -> QueueKey:
        return (self.topic, self.broker, self.queue_id)

    @property
    def size(self) -> int:
        return self.end - self.start


def describe(key: QueueKey) -> str:
    return f"topic {key[0]} queue {queue_key_text(key[1], key[2])}"


def resolve(
    option: str,
    spec: OffsetSpec,
    bounds: Mapping[QueueKey, QueueBounds],
    *,
    committed: Mapping[QueueKey, int] | None = None,
    by_time: Mapping[QueueKey, int] | None = None,
) -> dict[QueueKey, int]:
    """The concrete offset of every queue in ``bounds`` that ``spec`` means.

    ``committed`` (GROUP: the group's offsets, -1 for never) and ``by_time`` (TIMESTAMP, or a
    GROUP/PER_QUEUE fallback of TIMESTAMP: the first offset stored at or after the time) come
    from the brokers. Per-queue JSON naming a queue the topic does not have is an error.
    """
    if spec.kind is OffsetKind.PER_QUEUE:
        unknown = sorted(set(spec.per_queue) - set(bounds))
        if unknown:
            known = ", ".join(queue_key_text(k[1], k[2]) for k in sorted(bounds) if k[0] == unknown[0][0])
            raise OptionError(
                option,
                f"names {describe(unknown[0])}, which the topic does not have "
                f"(its queues: {known or 'none'})",
            )
    offsets = {}
    for key, bound in bounds.items():
        kind, value = spec.kind, None
        if kind is OffsetKind.PER_QUEUE:
            value = spec.per_queue.get(key)
            if value is None:
                kind = spec.fallback
            elif value == EARLIEST:
                kind = OffsetKind.EARLIEST
            elif value == LATEST:
                kind = OffsetKind.LATEST
        elif kind is OffsetKind.GROUP:
            value = (committed or {}).get(key, -1)
            if value < 0:
                kind, value = spec.fallback, None
        if value is not None and value >= 0:
            offsets[key] = value
        elif kind is OffsetKind.EARLIEST:
            offsets[key] = bound.min_offset
        elif kind is OffsetKind.LATEST:
            offsets[key] = bound.max_offset
        else:  # TIMESTAMP
            offsets[key] = (by_time or {}).get(key, bound.max_offset)
    return offsets


def check_ranges(
    starts: Mapping[QueueKey, int],
    ends: Mapping[QueueKey, int],
    bounds: Mapping[QueueKey, QueueBounds],
    fail_on_data_loss: bool,
) -> dict[QueueKey, tuple[int, int]]:
    """Validated ``[start, end)`` per queue: an end before its start is an error; a start below
    the queue's min offset (retention removed it) is data loss — an error, or with
    ``failOnDataLoss=false`` a logged skip to the min offset. An end past the max offset is
    clipped (nothing is there yet)."""
    ranges = {}
    for key, start in starts.items():
        end = ends[key]
        if end < start:
            raise OptionError(
                "endingOffsets",
                f"{describe(key)} ends at {end}, before its starting offset "
                f"{start}; the end must not precede the start",
            )
        start = skip_lost(key, start, bounds[key].min_offset, fail_on_data_loss)
        ranges[key] = (start, max(start, min(end, bounds[key].max_offset)))
    return ranges


class DataLossError(RuntimeError):
    """Offsets a read still needed are gone (retention deleted them) and failOnDataLoss is true."""


def skip_lost(key: QueueKey, offset: int, min_offset: int, fail_on_data_loss: bool) -> int:
    """``offset``, or the queue's ``min_offset`` when retention removed ``[offset, min_offset)``."""
    if offset >= min_offset:
        return offset
    lost = (
        f"{describe(key)}: offsets {offset}..{min_offset - 1} were removed by retention "
        f"(min offset is now {min_offset})"
    )
    if fail_on_data_loss:
        raise DataLossError(f"{lost}; set option 'failOnDataLoss' to false to skip them and continue")
    log.warning("%s; skipping them (failOnDataLoss=false)", lost)
    return min_offset


def split(ranges: Mapping[QueueKey, tuple[int, int]], min_partitions: int | None) -> list[QueueRange]:
    """One partition per non-empty queue range, and when fewer than ``min_partitions`` the
    larger ranges cut into pieces of about ``total / min_partitions`` slots (Kafka's
    ``minPartitions``): a backlog on a few queues then still uses every core."""
    pieces = [QueueRange(k[0], k[1], k[2], s, e) for k, (s, e) in sorted(ranges.items()) if e > s]
    total = sum(p.size for p in pieces)
    if not min_partitions or len(pieces) >= min_partitions or total == 0:
        return pieces
    target = max(1, -(-total // min_partitions))
    result = []
    for piece in pieces:
        count = max(1, -(-piece.size // target))
        step = -(-piece.size // count)
        for start in range(piece.start, piece.end, step):
            result.append(
                QueueRange(piece.topic, piece.broker, piece.queue_id, start, min(piece.end, start + step))
            )
    return result


def cap(
    start: Mapping[QueueKey, int], latest: Mapping[QueueKey, int], max_offsets: int
) -> dict[QueueKey, int]:
    """The end of a micro-batch reading at most ``max_offsets`` slots over all queues, shared
    in proportion to each queue's backlog (Kafka's ``maxOffsetsPerTrigger``), the rounding
    remainder to the largest backlogs; every queue with a backlog advances by at least one slot
    so none starves (which may pass ``max_offsets`` when it is below the number of queues)."""
    backlog = {k: max(0, latest[k] - start.get(k, latest[k])) for k in latest}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(latest)
    shares = {k: 0 if behind == 0 else max(1, behind * max_offsets // total) for k, behind in backlog.items()}
    left = max_offsets - sum(shares.values())
    for key in sorted(backlog, key=lambda k: (-(backlog[k] - shares[k]), k)):
        if left <= 0:
            break
        if shares[key] < backlog[key]:
            shares[key] += 1
            left -= 1
    return {key: start.get(key, latest[key]) + min(backlog[key], shares[key]) for key in latest}


def to_json_dict(offsets: Mapping[QueueKey, int]) -> dict[str, dict[str, int]]:
    """The checkpoint form: ``{"topic": {"broker:queue": offset}}``."""
    document: dict[str, dict[str, int]] = {}
    for (topic, broker, queue_id), offset in sorted(offsets.items()):
        document.setdefault(topic, {})[queue_key_text(broker, queue_id)] = offset
    return document


def from_json_dict(document: Mapping[str, Mapping[str, int]]) -> dict[QueueKey, int]:
    import json

    return parse_per_queue("checkpoint offset", json.dumps(document), None) if document else {}
