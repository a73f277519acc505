"""The process queue: pulled messages of one queue waiting for, or in, consumption.

RocketMQ's ``ProcessQueue``. The puller puts each pulled batch here; consume tasks (user
listeners, in a thread pool) take messages out; the rebalancer drops it when the queue is
assigned elsewhere. Its central job is the **committable offset**: consumption finishes out of
order, but an offset commit means "everything before this is done", so after a removal the
offset to commit is the *smallest offset still in flight* (or one past the largest offset
ever put, when nothing is left). A slow early message therefore holds the committed offset
back, and a crash re-delivers the messages after it: consumers must be idempotent, and in
exchange no message is ever skipped.

It also feeds flow control (message count, body bytes, offset span), expiry of messages whose
consumption hangs, idle detection (no pull for two minutes means the pull loop died), and the
orderly mode's state: the broker lock flag, the "consuming" map of taken messages and the
consume lock that rebalance takes so a queue is never dropped in the middle of a listener.

Messages are kept in a dict offset -> message plus a ``bisect``-maintained sorted list of the
offsets (no third-party sorted container): insertions come in ascending batches, so they append
at the end, and a queue holds at most a few thousand messages (flow control caps it). A pull's
batch that follows everything held is added in bulk, and a removal of the oldest messages in
order (what a settled share of a backlog is) cuts the front of the list at once.

Thread-safe: one ``threading.Lock`` guards the state, held only for in-memory work.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar

from orbitmq.common.clock import MONOTONIC_CLOCK, Clock

PULL_MAX_IDLE_MS = 120_000
"""RocketMQ's ``pullMaxIdleTime``: a queue not pulled for this long has a dead pull loop."""
REBALANCE_LOCK_MAX_LIVE_MS = 30_000
"""RocketMQ's ``REBALANCE_LOCK_MAX_LIVE_TIME``: an orderly lock not renewed for this long is
treated as lost (the broker lets it expire after 60 s, so the client gives up first)."""
NO_OFFSET = -1
"""Returned when there is no offset to commit."""


class Message(Protocol):
    """What the process queue needs from a message."""

    @property
    def queue_offset(self) -> int: ...

    @property
    def body(self) -> bytes: ...


M = TypeVar("M", bound=Message)


def _with_offsets(messages: Iterable[M]) -> list[tuple[int, M]]:
    """``(offset, message)`` pairs, validated before any state changes (a bad batch changes nothing)."""
    batch = []
    for message in messages:
        offset = message.queue_offset
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"message queue offset must be an int >= 0, got {offset!r}")
        batch.append((offset, message))
    return batch


class ProcessQueue(Generic[M]):
    """The buffer of one queue's pulled messages (see the module docstring).

    Args:
        clock: time source for the pull/consume/lock timestamps when no ``now_ms`` is given;
            monotonic by default: they time a lock's lease and idle queues, which a step of the
            wall clock must neither lapse nor prolong.
    """

    def __init__(self, clock: Clock = MONOTONIC_CLOCK) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._buffered: dict[int, M] = {}
        """Pulled and not yet consumed (concurrent mode: including those a listener is running on)."""
        self._offsets: list[int] = []
        """The keys of ``_buffered``, sorted."""
        self._consuming: dict[int, M] = {}
        """Orderly mode: taken by :meth:`take`, not yet committed."""
        self._consume_start_ms: dict[int, int] = {}
        self._count = 0
        self._size_bytes = 0
        self._max_offset_put = NO_OFFSET
        self._dispatched = False
        self._dropped = False
        self._locked = False
        now = clock.now_ms()
        self._last_pull_ms = now
        self._last_consume_ms = now
        self._last_lock_ms = now
        self.consume_lock = threading.Lock()
        """Held by orderly consumption around the listener call; rebalance acquires it (with a
        timeout) before dropping the queue, so the queue is never dropped mid-listener and its
        offset is committed after the last message consumed, not before."""

    # ------------------------------------------------------------------ puller and consumers

    def put(self, messages: Iterable[M]) -> bool:
        """Add pulled messages (offsets already held are ignored).

        Returns whether the caller should dispatch a consume task: True when the queue was
        idle (no task dispatched, or the last one found nothing to take) and now holds
        messages. The flag goes back to idle when :meth:`take` finds nothing; orderly mode
        relies on it to keep exactly one task per queue. Concurrent mode ignores it.
        """
        batch = _with_offsets(messages)
        with self._lock:
            if batch and self._follows(batch):  # a pull's ascending batch: held in bulk
                offsets = [offset for offset, _ in batch]
                self._buffered.update(batch)
                self._offsets.extend(offsets)
                self._count += len(batch)
                self._size_bytes += sum([len(message.body) for _, message in batch])
                self._max_offset_put = max(self._max_offset_put, offsets[-1])
            else:
                for offset, message in batch:
                    if offset not in self._buffered and offset not in self._consuming:
                        self._hold(offset, message)
            if self._buffered and not self._dispatched:
                self._dispatched = True
                return True
            return False

    def remove(self, messages: Iterable[M]) -> int:
        """Forget consumed messages; return the committable offset.

        That is the smallest offset still in flight, else one past the largest offset ever put,
        else -1 if nothing was ever put. Messages not held (already removed) are ignored, so a
        retried removal is harmless.
        """
        with self._lock:
            self._last_consume_ms = self._clock.now_ms()
            if not isinstance(messages, list):
                messages = list(messages)
            offsets = [message.queue_offset for message in messages]
            if offsets and self._offsets[: len(offsets)] == offsets:
                # The usual removal: the oldest buffered messages, in order (a settled share).
                del self._offsets[: len(offsets)]
                buffered, started = self._buffered, self._consume_start_ms
                held = [buffered.pop(offset) for offset in offsets]
                for offset in offsets:
                    started.pop(offset, None)
                self._count -= len(held)
                self._size_bytes -= sum([len(message.body) for message in held])
                return self._committable_offset()
            for offset in offsets:
                held = self._discard(offset)
                if held is None:
                    held = self._consuming.pop(offset, None)
                if held is not None:
                    self._count -= 1
                    self._size_bytes -= len(held.body)
                    self._consume_start_ms.pop(offset, None)
            return self._committable_offset()

    @property
    def committable_offset(self) -> int:
        """What :meth:`remove` would return now (e.g. to persist on drop)."""
        with self._lock:
            return self._committable_offset()

    # ------------------------------------------------------------------------------ orderly

    def take(self, n: int) -> list[M]:
        """Orderly mode: move the ``n`` smallest buffered messages to the consuming map.

        Returns them in offset order. An empty result marks the queue idle, so the next
        :meth:`put` dispatches a new consume task.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"take needs a batch size >= 1, got {n!r}")
        with self._lock:
            self._last_consume_ms = self._clock.now_ms()
            taken_offsets = self._offsets[:n]
            del self._offsets[:n]
            taken = [self._buffered.pop(offset) for offset in taken_offsets]
            for offset, message in zip(taken_offsets, taken, strict=True):
                self._consuming[offset] = message
            if not taken:
                self._dispatched = False
            return taken

    def commit(self) -> int:
        """Orderly mode: the taken messages are consumed; forget them.

        Returns the offset to commit, one past the largest consumed offset, or -1 if nothing
        was taken.
        """
        with self._lock:
            if not self._consuming:
                return NO_OFFSET
            next_offset = max(self._consuming) + 1
            for offset, message in self._consuming.items():
                self._count -= 1
                self._size_bytes -= len(message.body)
                self._consume_start_ms.pop(offset, None)
            self._consuming.clear()
            return next_offset

    def make_available_again(self, messages: Iterable[M]) -> None:
        """Orderly mode, ``SUSPEND_CURRENT_QUEUE_A_MOMENT``: put taken messages back, so the
        next :meth:`take` returns them first again (ordering is preserved, nothing is skipped)."""
        batch = _with_offsets(messages)
        with self._lock:
            for offset, message in batch:
                self._consume_start_ms.pop(offset, None)
                if self._consuming.pop(offset, None) is not None:
                    self._insert(offset, message)  # still counted: taken messages stay held
                elif offset not in self._buffered:
                    self._hold(offset, message)  # not taken from here: newly held

    # --------------------------------------------------------------------------- flow control

    @property
    def count(self) -> int:
        """Messages held (buffered and, in orderly mode, taken but not committed)."""
        with self._lock:
            return self._count

    @property
    def size_bytes(self) -> int:
        """Total body bytes of the messages held."""
        with self._lock:
            return self._size_bytes

    @property
    def span(self) -> int:
        """Largest minus smallest offset held; 0 when empty. A wide span means one slow message
        holds the committed offset far back, so a crash would re-deliver many messages."""
        with self._lock:
            offsets = [*self._offsets[:1], *self._offsets[-1:], *self._consuming]
            return max(offsets) - min(offsets) if offsets else 0

    # -------------------------------------------------------------------------------- expiry

    def mark_consume_start(self, messages: Iterable[M], now_ms: int | None = None) -> None:
        """Record that a listener started on ``messages`` (for :meth:`expired`)."""
        with self._lock:
            now = self._clock.now_ms() if now_ms is None else now_ms
            for message in messages:
                offset = message.queue_offset
                if offset in self._buffered or offset in self._consuming:
                    self._consume_start_ms[offset] = now

    def expired(self, now_ms: int, consume_timeout_ms: int) -> list[M]:
        """Messages still held whose consumption started more than ``consume_timeout_ms`` ago,
        in offset order. The caller sends them back to the broker and removes them, so one hung
        listener does not hold the committed offset back forever."""
        with self._lock:
            late = sorted(
                offset
                for offset, started in self._consume_start_ms.items()
                if now_ms - started > consume_timeout_ms
            )
            return [self._held(offset) for offset in late]

    # ---------------------------------------------------------------------- state and timing

    @property
    def dropped(self) -> bool:
        """Set by rebalance when the queue is no longer this consumer's: stop pulling, stop
        consuming, commit nothing more."""
        return self._dropped

    def drop(self) -> None:
        """Mark the queue dropped (idempotent)."""
        self._dropped = True

    @property
    def last_pull_ms(self) -> int:
        return self._last_pull_ms

    def mark_pulled(self, now_ms: int | None = None) -> None:
        """Record a pull attempt (the puller calls this before each pull)."""
        self._last_pull_ms = self._clock.now_ms() if now_ms is None else now_ms

    @property
    def last_consume_ms(self) -> int:
        """When messages were last removed or taken."""
        return self._last_consume_ms

    def is_pull_expired(self, now_ms: int, max_idle_ms: int = PULL_MAX_IDLE_MS) -> bool:
        """Whether no pull happened for more than ``max_idle_ms``: the pull loop for this queue
        is presumed dead and rebalance should replace the process queue."""
        return now_ms - self._last_pull_ms > max_idle_ms

    @property
    def locked(self) -> bool:
        """Orderly mode: whether this consumer holds the broker lock on the queue."""
        return self._locked

    @property
    def last_lock_time_ms(self) -> int:
        return self._last_lock_ms

    def set_locked(self, locked: bool, now_ms: int | None = None) -> None:
        """Record the result of a broker lock or unlock; a successful lock renews the lock time."""
        with self._lock:
            self._locked = locked
            if locked:
                self._last_lock_ms = self._clock.now_ms() if now_ms is None else now_ms

    def is_lock_expired(self, now_ms: int, max_ms: int = REBALANCE_LOCK_MAX_LIVE_MS) -> bool:
        """Whether the lock was last renewed more than ``max_ms`` ago (consumption must stop)."""
        return now_ms - self._last_lock_ms > max_ms

    # ------------------------------------------------------------------------------ helpers

    def _follows(self, batch: list[tuple[int, M]]) -> bool:
        """Whether ``batch``'s offsets ascend and all come after every offset held (a pull's
        next messages), so none is held already and they append in order."""
        last = batch[0][0]
        if (self._offsets and last <= self._offsets[-1]) or (
            self._consuming and last <= max(self._consuming)
        ):
            return False
        for offset, _ in batch:
            if offset < last:
                return False
            last = offset + 1
        return True

    def _hold(self, offset: int, message: M) -> None:
        """Start holding a message that is neither buffered nor consuming."""
        self._insert(offset, message)
        self._count += 1
        self._size_bytes += len(message.body)
        self._max_offset_put = max(self._max_offset_put, offset)

    def _insert(self, offset: int, message: M) -> None:
        self._buffered[offset] = message
        if not self._offsets or offset > self._offsets[-1]:
            self._offsets.append(offset)  # the usual case: a pulled batch is ascending
        else:
            bisect.insort(self._offsets, offset)

    def _discard(self, offset: int) -> M | None:
        message = self._buffered.pop(offset, None)
        if message is not None:
            index = bisect.bisect_left(self._offsets, offset)
            del self._offsets[index]
        return message

    def _held(self, offset: int) -> M:
        return self._buffered[offset] if offset in self._buffered else self._consuming[offset]

    def _committable_offset(self) -> int:
        in_flight = [*self._offsets[:1], *self._consuming]
        if in_flight:
            return min(in_flight)
        return self._max_offset_put + 1 if self._max_offset_put != NO_OFFSET else NO_OFFSET

    def __repr__(self) -> str:
        return (
            f"ProcessQueue(count={self._count}, size_bytes={self._size_bytes}, "
            f"dropped={self._dropped}, locked={self._locked})"
        )
