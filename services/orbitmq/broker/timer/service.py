"""The broker's timer: loads pending timers from the store, delivers them when due.

One loop on the master (:meth:`TimerService.run`): read new timer-queue units into the heap,
deliver what is due, then sleep until the next due time, the precision bound, or an append to
the timer queue, whichever comes first, so a timer is delivered within milliseconds of its time
rather than at the next tick. A batch of deliveries and its timer-log record are appended
together (see :mod:`orbitmq.broker.timer` for why that makes restarts deliver nothing twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from orbitmq.broker.reput import restore
from orbitmq.broker.timer.state import Pending, TimerRecord, TimerRecordError, TimerState
from orbitmq.common.clock import Clock
from orbitmq.common.tally import LatencyTally
from orbitmq.common.topics import TIMER_LOG_TOPIC, TIMER_TOPIC
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import InboundMessage
from orbitmq.store.results import PutResult

log = logging.getLogger(__name__)

Put = Callable[[list[InboundMessage]], Awaitable[PutResult]]
TIMER_QUEUE = 0
LOG_QUEUE = 0
BATCH_MAX_MESSAGES = 256
BATCH_MAX_BYTES = 1024 * 1024
"""A delivery batch's limits: one append each, small enough to keep the loop responsive."""
CHECKPOINT_EVERY = 64
"""Batch records between checkpoints: a restart reads at most about this many back."""
SCAN_CHUNK = 4096
"""Timer-queue units read per look; the loop yields between looks."""
LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 60)
"""Delivery lateness (seconds after the requested time) histogram bounds."""


class TimerService:
    """Args:
    store: the broker's open message store.
    clock: epoch milliseconds (due times are wall-clock times).
    put: the broker's acknowledged put (SYNC_FLUSH and SYNC_MASTER apply to deliveries).
    precision_ms: the longest the loop sleeps without looking at its heap again.
    """

    def __init__(self, store: MessageStore, clock: Clock, put: Put, *, precision_ms: int) -> None:
        self._store = store
        self._clock = clock
        self._put = put
        self._precision_s = precision_ms / 1000
        self._wake = asyncio.Event()
        self._since_checkpoint = 0
        self.state = TimerState()
        self.delivered: dict[str, int] = {}
        """Timers delivered by real topic since the start."""
        self.lateness = LatencyTally(LATENESS_BUCKETS)
        self.records_read = 0
        """Timer-log records the last :meth:`load` read back (at most about CHECKPOINT_EVERY)."""

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> int:
        """Rebuild the state from the timer log and queue (blocking; run it in a thread);
        returns how many timers are pending."""
        records: list[TimerRecord] = []
        log_queue = self._store.consume_queue(TIMER_LOG_TOPIC, LOG_QUEUE)
        if log_queue is not None:
            for offset in range(log_queue.max_offset - 1, log_queue.min_offset - 1, -1):
                record = self._record_at(log_queue.unit_at(offset))
                if record is not None:
                    records.append(record)
                    if record.is_checkpoint:
                        break
        state = TimerState.replay(reversed(records))
        queue = self._store.consume_queue(TIMER_TOPIC, TIMER_QUEUE)
        if queue is not None:
            state.raise_low(queue.min_offset)
        self.state = state
        self.records_read = len(records)
        self._since_checkpoint = 0
        while self.scan(SCAN_CHUNK):
            pass
        log.info(
            "timer: %d pending from offset %d (%d log records read back)", len(state), state.low, len(records)
        )
        return len(state)

    def _record_at(self, unit: tuple[int, int, int] | None) -> TimerRecord | None:
        if unit is None:
            return None
        message = self._store.message_at(unit[0])
        if message is None:
            return None
        try:
            return TimerRecord.decode(message.body)
        except TimerRecordError as error:
            log.error("timer: skipping a record at commit-log offset %d: %s", unit[0], error)
            return None

    def scan(self, max_units: int) -> int:
        """Read up to ``max_units`` new timer-queue units into the heap; returns how many."""
        queue = self._store.consume_queue(TIMER_TOPIC, TIMER_QUEUE)
        if queue is None:
            return 0
        state = self.state
        state.raise_low(queue.min_offset)  # retention took the oldest: nothing left to deliver there
        start = state.scanned
        units = queue.units(start, max_units)
        for offset, (physical, size, deliver_at) in enumerate(units, start):
            state.add(offset, physical, size, deliver_at)
        return len(units)

    def notify_append(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Dispatcher listener: a timer was stored, perhaps due before the one the loop sleeps for."""
        if topic == TIMER_TOPIC:
            self._wake.set()

    # -- delivering ----------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            self._wake.clear()
            scanned = self.scan(SCAN_CHUNK)
            moved = await self.deliver_due()
            if moved >= BATCH_MAX_MESSAGES or scanned >= SCAN_CHUNK:
                await asyncio.sleep(0)  # more to do: let requests in, then go on
                continue
            wait_s = self._precision_s
            next_due = self.state.next_due_ms()
            if next_due is not None:
                wait_s = min(wait_s, max(0, next_due - self._clock.now_ms()) / 1000)
            if moved < 0:  # the put failed: do not spin on it
                wait_s = self._precision_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_s)

    async def deliver_due(self) -> int:
        """Deliver one batch of due timers; how many were delivered, -1 if the put failed."""
        budget = min(BATCH_MAX_BYTES, self._store.commitlog.max_record_bytes() // 2)  # fits a segment
        due = self.state.pop_due(self._clock.now_ms(), BATCH_MAX_MESSAGES, budget)
        if not due:
            return 0
        messages, offsets = self._deliveries(due)
        self._since_checkpoint += 1
        if self._since_checkpoint >= CHECKPOINT_EVERY:
            record = self.state.checkpoint_with(offsets)
        else:
            record = TimerRecord(tuple(offsets))
        entry = InboundMessage(topic=TIMER_LOG_TOPIC, body=record.encode(), queue_id=LOG_QUEUE)
        result = await self._put([*messages, entry])  # the record last: see the package docstring
        if not result.status.stored:
            self.state.put_back(due)
            log.warning("timer: %d due messages not delivered (%s); will retry", len(due), result.reason)
            return -1
        if record.is_checkpoint:
            self._since_checkpoint = 0
        self.state.mark_done(offsets)
        self._observe(messages, due)
        return len(messages)

    def _deliveries(self, due: list[Pending]) -> tuple[list[InboundMessage], list[int]]:
        messages, offsets = [], []
        for _, queue_offset, physical, _ in due:
            offsets.append(queue_offset)
            stored = self._store.message_at(physical)
            if stored is None:  # retention removed it: nothing left to deliver
                log.warning("timer: message at commit-log offset %d is gone; dropped", physical)
                continue
            messages.append(restore(stored))
        return messages, offsets

    def _observe(self, messages: list[InboundMessage], due: list[Pending]) -> None:
        now = self._clock.now_ms()
        delivered = self.delivered
        for message in messages:
            delivered[message.topic] = delivered.get(message.topic, 0) + 1
        for deliver_at, *_ in due:
            self.lateness.observe(max(0, now - deliver_at) / 1000)

    @property
    def pending(self) -> int:
        return len(self.state)
