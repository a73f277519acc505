"""The POP state of a broker: pure and event-sourced (no I/O, time passed in).

Per (group, topic, queue), offsets fall in three bands::

    0 ........ floor ............................ frontier ............ max offset
    | all done | in flight (attempt, lease, until) | never delivered  |
               |  or done (acked, skipped, DLQ'd)  |                  |

``floor`` is the POP group's consumer offset (everything below is done), ``frontier`` the first
offset never handed out. Decisions (:meth:`PopState.plan`, :meth:`PopState.ack`, ...) check a
request against the state and return a *record*; :meth:`PopState.apply` is the one transition,
used alike when serving and when replaying records after a restart or a failover.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple


class PopKey(NamedTuple):
    group: str
    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class Lease:
    """One message in flight: its delivery attempt (1 = first), the lease number its receipt
    handle carries, and when it becomes visible again (epoch ms)."""

    attempt: int
    lease: int
    invisible_until_ms: int


# -- records: every change of the state --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delivered:
    """Offsets handed out (new ones from the frontier, or expired ones again)."""

    key: PopKey
    entries: tuple[tuple[int, int, int], ...]
    """(offset, attempt, lease) per message."""
    invisible_until_ms: int


@dataclass(frozen=True, slots=True)
class Acked:
    key: PopKey
    offset: int
    lease: int


@dataclass(frozen=True, slots=True)
class Started:
    """Where a group begins in a queue it never popped: the queue's first offset kept, or its
    next one for a group created ``--consume-from last``. Recorded so that a restart resumes
    from there, not from wherever the queue's ends have moved to meanwhile."""

    key: PopKey
    offset: int


@dataclass(frozen=True, slots=True)
class Skipped:
    """Offsets done without delivery (the group's filter does not match them)."""

    key: PopKey
    offsets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Changed:
    """A message's invisibility changed; its old lease is void, the new one is ``lease``."""

    key: PopKey
    offset: int
    old_lease: int
    lease: int
    invisible_until_ms: int


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """Past the maximum attempts: stored in the dead-letter topic, done here."""

    key: PopKey
    offset: int
    lease: int


Record = Started | Delivered | Acked | Skipped | Changed | DeadLettered


class AckOutcome(Enum):
    ACKED = "ACKED"
    """Done now (a record to persist comes with it)."""
    ALREADY_DONE = "ALREADY_DONE"
    """Acked before (a repeated ack): nothing to do, and not an error."""
    STALE = "STALE"
    """The message was handed out again since this handle was issued (a newer lease)."""
    UNKNOWN = "UNKNOWN"
    """No such delivery: the offset was never handed out (a forged or foreign handle)."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What a pop of one queue should do now, decided by :meth:`PopState.plan`."""

    redeliver: tuple[int, ...] = ()
    """Expired messages to hand out again, oldest first."""
    new: tuple[int, ...] = ()
    """Offsets from the frontier, in order."""
    dead: tuple[int, ...] = ()
    """Expired messages that used up their attempts: for the dead-letter topic."""

    @property
    def offsets(self) -> tuple[int, ...]:
        return self.redeliver + self.new


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """A POP queue's progress for one group (see the bands in the module docstring)."""

    consume_offset: int
    """``floor``: everything below is done (acked, skipped or dead-lettered)."""
    delivered_offset: int
    """``frontier``: the first offset never handed out."""
    in_flight: int
    """Handed out and not done: invisible, or expired and waiting to go out again."""
    expired: int
    """Of the in-flight ones, those whose invisibility has run out."""
    done_above: int
    """Done out of order above ``consume_offset``."""


@dataclass
class QueuePop:
    floor: int = 0
    frontier: int = 0
    in_flight: dict[int, Lease] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    """Done offsets at or above ``floor`` (acks out of order)."""

    def finish(self, offset: int) -> None:
        self.in_flight.pop(offset, None)
        if offset >= self.floor:
            self.done.add(offset)
        while self.floor in self.done:
            self.done.remove(self.floor)
            self.floor += 1

    def is_done(self, offset: int) -> bool:
        return offset < self.floor or offset in self.done


class PopState:
    """All POP groups of one broker (see the module docstring)."""

    def __init__(self) -> None:
        self._queues: dict[PopKey, QueuePop] = {}
        self.next_lease = 1
        """Lease numbers are unique across the broker's life (part of the replayed state)."""

    def queue(self, key: PopKey) -> QueuePop:
        state = self._queues.get(key)
        if state is None:
            state = self._queues[key] = QueuePop()
        return state

    def keys(self) -> list[PopKey]:
        return sorted(self._queues)

    def started(self, key: PopKey) -> bool:
        return key in self._queues

    def start_at(self, key: PopKey, offset: int) -> Started:
        """Begin a group that never popped this queue at ``offset``; the record to persist."""
        record = Started(key, offset)
        self.apply(record)
        return record

    # -- decisions ------------------------------------------------------------------------------

    def plan(
        self, key: PopKey, now_ms: int, max_nums: int, max_offset: int, *, fifo: bool, max_attempts: int
    ) -> Plan:
        """Up to ``max_nums`` offsets to hand out now, and the expired ones out of attempts.

        Expired messages come first (the oldest waited longest); a FIFO group gets nothing new
        while any message of the queue is still invisible, and its expired messages again
        before anything newer, so a message group's order holds.
        """
        if max_nums < 1:
            raise ValueError(f"max_nums must be at least 1, not {max_nums}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {max_attempts}")
        state = self.queue(key)
        expired = sorted(o for o, lease in state.in_flight.items() if lease.invisible_until_ms <= now_ms)
        dead = tuple(o for o in expired if state.in_flight[o].attempt >= max_attempts)
        retry = [o for o in expired if state.in_flight[o].attempt < max_attempts]
        if fifo and len(expired) < len(state.in_flight):
            return Plan(dead=dead)  # something is still invisible: the queue waits
        redeliver = tuple(retry[:max_nums])
        room = 0 if fifo and retry else max_nums - len(redeliver)
        start = state.frontier
        new = tuple(range(start, max(start, min(max_offset, start + room))))
        return Plan(redeliver, new, dead)

    def deliver(self, key: PopKey, offsets: Iterable[int], now_ms: int, invisible_ms: int) -> Delivered:
        """Hand out ``offsets`` (from a :class:`Plan`) for ``invisible_ms``; the record to persist."""
        if invisible_ms < 0:
            raise ValueError(f"invisible_ms must be >= 0, not {invisible_ms}")
        state = self.queue(key)
        entries = []
        frontier = state.frontier
        lease = self.next_lease
        for offset in offsets:
            current = state.in_flight.get(offset)
            if current is not None:
                attempt = current.attempt + 1
            elif offset == frontier:
                attempt, frontier = 1, frontier + 1
            else:
                raise ValueError(
                    f"offset {offset} of {key} is neither in flight nor the next undelivered one ({frontier})"
                )
            entries.append((offset, attempt, lease))
            lease += 1
        record = Delivered(key, tuple(entries), now_ms + invisible_ms)
        self.apply(record)
        return record

    def ack(self, key: PopKey, offset: int, lease: int) -> tuple[AckOutcome, Acked | None]:
        """Acknowledge the delivery with ``lease``; a record only when this changes the state."""
        outcome, _ = self._check_lease(key, offset, lease)
        if outcome is not AckOutcome.ACKED:
            return outcome, None
        record = Acked(key, offset, lease)
        self.apply(record)
        return AckOutcome.ACKED, record

    def change_invisible(
        self, key: PopKey, offset: int, lease: int, now_ms: int, invisible_ms: int, *, renew: bool = False
    ) -> tuple[AckOutcome, Changed | None]:
        """Make an in-flight message invisible for ``invisible_ms`` from now, under a new lease
        (its handle changes, as RocketMQ's ChangeInvisibleDuration returns a new one); with
        ``renew`` under the same lease: the same delivery kept hidden longer (a proxy renewing
        an auto-renewed message for a client that still holds the handle)."""
        if invisible_ms < 0:
            raise ValueError(f"invisible_ms must be >= 0, not {invisible_ms}")
        outcome, _ = self._check_lease(key, offset, lease)
        if outcome is not AckOutcome.ACKED:
            return outcome, None
        record = Changed(key, offset, lease, lease if renew else self.next_lease, now_ms + invisible_ms)
        self.apply(record)
        return AckOutcome.ACKED, record

    def skip(self, key: PopKey, offsets: Iterable[int]) -> Skipped:
        """Mark frontier offsets done without delivering them (filtered out)."""
        state = self.queue(key)
        offsets = tuple(offsets)
        for expected, offset in enumerate(offsets, start=state.frontier):
            if offset != expected:
                raise ValueError(
                    f"skipped offsets of {key} must continue the frontier {state.frontier}: {offsets}"
                )
        record = Skipped(key, offsets)
        self.apply(record)
        return record

    def dead_letter(self, key: PopKey, offset: int) -> DeadLettered:
        lease = self.queue(key).in_flight.get(offset)
        if lease is None:
            raise ValueError(f"offset {offset} of {key} is not in flight")
        record = DeadLettered(key, offset, lease.lease)
        self.apply(record)
        return record

    def _check_lease(self, key: PopKey, offset: int, lease: int) -> tuple[AckOutcome, Lease | None]:
        state = self._queues.get(key)
        if state is None or offset >= state.frontier:
            return AckOutcome.UNKNOWN, None
        if state.is_done(offset):
            return AckOutcome.ALREADY_DONE, None
        current = state.in_flight.get(offset)
        if current is None or current.lease != lease:
            return AckOutcome.STALE, None
        return AckOutcome.ACKED, current

    # -- the one transition ---------------------------------------------------------------------

    def apply(self, record: Record) -> None:
        """Apply ``record``. Records older than the state (a replay that starts before a
        snapshot's position) are harmless: replaying the rest of the log in order ends in the
        same state, since later records carry the later leases."""
        if isinstance(record, Started):
            if record.key not in self._queues:  # a start only ever begins a queue's state
                self._queues[record.key] = QueuePop(floor=record.offset, frontier=record.offset)
            return
        state = self.queue(record.key)
        if isinstance(record, Delivered):
            for offset, attempt, lease in record.entries:
                if state.is_done(offset):
                    continue
                state.in_flight[offset] = Lease(attempt, lease, record.invisible_until_ms)
                state.frontier = max(state.frontier, offset + 1)
                self.next_lease = max(self.next_lease, lease + 1)
        elif isinstance(record, Acked | DeadLettered):
            current = state.in_flight.get(record.offset)
            if current is not None and current.lease == record.lease:
                state.finish(record.offset)
        elif isinstance(record, Skipped):
            for offset in record.offsets:
                state.frontier = max(state.frontier, offset + 1)
                state.finish(offset)
        elif isinstance(record, Changed):
            current = state.in_flight.get(record.offset)
            if current is not None and current.lease == record.old_lease:
                state.in_flight[record.offset] = Lease(
                    current.attempt, record.lease, record.invisible_until_ms
                )
            self.next_lease = max(self.next_lease, record.lease + 1)
        else:
            raise TypeError(f"not a POP record: {record!r}")

    # -- snapshots ------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, object]:
        """The whole state as JSON-able data (bounds a replay: records after it only)."""
        return {
            "next_lease": self.next_lease,
            "queues": [
                {
                    "group": key.group,
                    "topic": key.topic,
                    "queue_id": key.queue_id,
                    "floor": q.floor,
                    "frontier": q.frontier,
                    "in_flight": [
                        [o, f.attempt, f.lease, f.invisible_until_ms] for o, f in sorted(q.in_flight.items())
                    ],
                    "done": sorted(q.done),
                }
                for key, q in sorted(self._queues.items())
            ],
        }

    @classmethod
    def from_snapshot(cls, data: dict[str, object]) -> PopState:
        state = cls()
        state.next_lease = int(data["next_lease"])  # type: ignore[call-overload]
        for item in data["queues"]:  # type: ignore[attr-defined]
            key = PopKey(item["group"], item["topic"], int(item["queue_id"]))
            state._queues[key] = QueuePop(
                floor=int(item["floor"]),
                frontier=int(item["frontier"]),
                in_flight={int(o): Lease(int(a), int(lease), int(u)) for o, a, lease, u in item["in_flight"]},
                done={int(o) for o in item["done"]},
            )
        return state

    def next_visible_ms(self, key: PopKey) -> int | None:
        """When the first in-flight message of the queue becomes visible again (None: none)."""
        state = self._queues.get(key)
        if state is None or not state.in_flight:
            return None
        return min(lease.invisible_until_ms for lease in state.in_flight.values())

    def in_flight_by_topic(self) -> dict[tuple[str, str], int]:
        """Messages in flight per (group, topic), for metrics and admin: every (group, topic)
        the state knows, 0 when nothing is in flight (a gauge that vanished at 0 would stop a
        graph's line and leave an alert nothing to compare)."""
        counts: dict[tuple[str, str], int] = {}
        for key, state in self._queues.items():
            counts[key.group, key.topic] = counts.get((key.group, key.topic), 0) + len(state.in_flight)
        return counts

    @property
    def is_empty(self) -> bool:
        """No group has popped anything: nothing a snapshot would need to keep."""
        return not self._queues

    def summary(self, key: PopKey, now_ms: int) -> QueueSummary | None:
        """What ``orbitmq admin group progress`` shows of a POP queue (None: never popped)."""
        state = self._queues.get(key)
        if state is None:
            return None
        expired = sum(1 for lease in state.in_flight.values() if lease.invisible_until_ms <= now_ms)
        return QueueSummary(state.floor, state.frontier, len(state.in_flight), expired, len(state.done))

    def topics_of(self, group: str) -> set[str]:
        """Topics ``group`` has popped on this broker."""
        return {key.topic for key in self._queues if key.group == group}

    def in_flight_count(self, key: PopKey) -> int:
        state = self._queues.get(key)
        return len(state.in_flight) if state else 0
