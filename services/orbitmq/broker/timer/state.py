"""The timer's state, pure (no I/O): pending timers by due time, and what was delivered.

Timer-queue offsets name timers. ``low`` is a low-water mark (every offset below it was
delivered); ``done`` holds the delivered offsets at or above it, so a long timer at ``low``
does not make a restart deliver everything sent after it again. ``scanned`` is how far the
timer queue's units were read into the heap. Memory per pending timer is one heap tuple; message
bodies stay in the commit log until delivery.

Timer-log records (bodies of ``rmq_sys_timer_log`` messages, JSON)::

    {"done": [d0, n0, d1, n1, ...]}               offsets delivered by one batch
    {"low": L, "done": [d0, n0, d1, n1, ...]}      a checkpoint: everything below L, plus these

``done`` is a run-length list: runs of ``n`` consecutive offsets, each starting ``d`` after the
end of the previous run (the first after ``low``, or after 0 in a batch record), so a long run
of deliveries costs two small numbers.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable
from dataclasses import dataclass

Pending = tuple[int, int, int, int]
"""(deliver at epoch ms, timer-queue offset, commit-log offset, size): a heap entry."""


class TimerRecordError(ValueError):
    """A timer-log body that is not a record this module wrote."""


@dataclass(frozen=True, slots=True)
class TimerRecord:
    """One timer-log record: the offsets in ``done``; ``low`` set makes it a checkpoint."""

    done: tuple[int, ...]
    low: int | None = None

    @property
    def is_checkpoint(self) -> bool:
        return self.low is not None

    def encode(self) -> bytes:
        document: dict[str, object] = {"done": _runs(sorted(self.done), self.low or 0)}
        if self.low is not None:
            document = {"low": self.low, **document}
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> TimerRecord:
        try:
            document = json.loads(body)
            low = document.get("low")
            runs = document["done"]
            if low is not None and (not isinstance(low, int) or low < 0):
                raise TypeError(f"low {low!r} is not a non-negative integer")
            return cls(tuple(_offsets(runs, low or 0)), low)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise TimerRecordError(f"timer-log record {body[:80]!r} is malformed: {error}") from None


def _runs(offsets: list[int], start: int) -> list[int]:
    runs: list[int] = []
    end = start
    for offset in offsets:
        if runs and offset == end:
            runs[-1] += 1
        else:
            runs += [offset - end, 1]
        end = offset + 1
    return runs


def _offsets(runs: list[int], start: int) -> Iterable[int]:
    if len(runs) % 2 or not all(isinstance(x, int) and x >= 0 for x in runs):
        raise ValueError("done must hold pairs of non-negative integers")
    end = start
    for gap, count in zip(runs[::2], runs[1::2], strict=True):
        first = end + gap
        yield from range(first, first + count)
        end = first + count


class TimerState:
    """Pending timers and delivered offsets; one writer (the broker's event loop)."""

    def __init__(self, low: int = 0, done: Iterable[int] = ()) -> None:
        self.low = low
        self.done: set[int] = set()
        self.scanned = low
        self._heap: list[Pending] = []
        self.mark_done(done)

    @classmethod
    def replay(cls, records: Iterable[TimerRecord]) -> TimerState:
        """The state the records leave: the last checkpoint, then every batch after it."""
        state = cls()
        for record in records:
            if record.is_checkpoint:
                state = cls(record.low or 0, record.done)
            else:
                state.mark_done(record.done)
        return state

    def __len__(self) -> int:
        return len(self._heap)

    def raise_low(self, offset: int) -> None:
        """Offsets below ``offset`` are gone (retention removed them): count them as done."""
        if offset > self.low:
            self.done = {o for o in self.done if o >= offset}
            self.low = offset
            self.scanned = max(self.scanned, offset)
            self._advance()

    def add(self, queue_offset: int, physical_offset: int, size: int, deliver_at_ms: int) -> bool:
        """A timer-queue unit read in order; False when it was already delivered or seen."""
        if queue_offset < self.scanned:
            return False
        self.scanned = queue_offset + 1
        if queue_offset < self.low or queue_offset in self.done:
            return False
        heapq.heappush(self._heap, (deliver_at_ms, queue_offset, physical_offset, size))
        return True

    def next_due_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int, max_count: int, max_bytes: int) -> list[Pending]:
        """The timers due at ``now_ms``, earliest first, up to a count and a byte budget (the
        first one always, whatever its size)."""
        heap, due, total = self._heap, [], 0
        while heap and heap[0][0] <= now_ms and len(due) < max_count:
            if due and total + heap[0][3] > max_bytes:
                break
            entry = heapq.heappop(heap)
            due.append(entry)
            total += entry[3]
        return due

    def put_back(self, entries: Iterable[Pending]) -> None:
        """Timers popped but not delivered (the put failed): pending again."""
        for entry in entries:
            heapq.heappush(self._heap, entry)

    def mark_done(self, offsets: Iterable[int]) -> None:
        low = self.low
        self.done.update(o for o in offsets if o >= low)
        self._advance()

    def _advance(self) -> None:
        self.low = _raise_low(self.low, self.done)
        self.scanned = max(self.scanned, self.low)

    def checkpoint(self) -> TimerRecord:
        return TimerRecord(tuple(self.done), self.low)

    def checkpoint_with(self, offsets: Iterable[int]) -> TimerRecord:
        """The checkpoint once ``offsets`` are delivered, the state left as it is (the batch
        that delivers them may still fail)."""
        done = self.done | {o for o in offsets if o >= self.low}
        low = _raise_low(self.low, done)
        return TimerRecord(tuple(done), low)


def _raise_low(low: int, done: set[int]) -> int:
    """The low-water mark past every delivered offset that follows it (taken out of ``done``)."""
    while low in done:
        done.discard(low)
        low += 1
    return low
