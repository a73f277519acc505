"""POP over a real message store: reads queues, keeps :class:`PopState`, persists its records.

The broker (``Broker._start_pop``) calls :meth:`PopService.load` once the store is open (the records in
``RMQ_SYS_POP_LOG`` rebuild the state, on a restarted master as on a promoted slave), then
:meth:`pop`, :meth:`ack` and :meth:`change_invisible` per request. Every answer is given after
its records are stored (``put``, the broker's own, so SYNC_FLUSH and SYNC_MASTER apply): an
acknowledged ack survives a crash; a delivery whose record was lost is simply delivered again.
The state is changed *before* the put, so two concurrent pops never hand out the same offset.

Snapshots and retention: commit-log retention deletes the oldest segments whatever they hold, so
the replay needs a snapshot that retention has not reached. :meth:`run` (a master task) writes
one whenever the last is older than ``snapshot_interval_ms`` (at most half the retention), also
when no request comes, as long as any group has state; records after it are newer still. A
restart or promotion finds the last snapshot by scanning the POP log backwards (a prefix test
per record, no decoding) and replays only from there, so a restart reads at most
``SNAPSHOT_EVERY`` records or ``snapshot_interval_ms`` of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from orbitmq.broker.pop import records
from orbitmq.broker.pop.handles import InvalidReceiptHandle, ReceiptHandle
from orbitmq.broker.pop.records import POP_LOG_TOPIC
from orbitmq.broker.pop.state import AckOutcome, PopKey, PopState, Record
from orbitmq.broker.reput import restore
from orbitmq.common.clock import Clock
from orbitmq.common.topics import DLQ_GROUP_TOPIC_PREFIX, Property
from orbitmq.store.message_filter import MessageFilter, TagFilter
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import InboundMessage, StoredMessage
from orbitmq.store.results import PutResult

log = logging.getLogger(__name__)

Put = Callable[[list[InboundMessage]], Awaitable[PutResult]]
POP_LOG_QUEUE = 0
ANY_QUEUE = -1
"""Key of the event that wakes :meth:`PopService.pop_any` on an append to any queue of a topic."""
DEAD_LETTER_CLAIM_MS = 10_000
"""A message on its way to the dead-letter topic stays invisible this long meanwhile."""
SKIPPED_PER_RECORD = 1024
"""Most offsets one skip record names (about 11 KiB of JSON at most): a filter's scan of many
unwanted messages writes a few records that fit any ``max_message_bytes``, not one huge one."""
SNAPSHOT_EVERY = 10_000
"""Records between snapshots: a restart replays at most about this many after the last one."""
SNAPSHOT_INTERVAL_MS = 600_000
"""Default age of the last snapshot that makes :meth:`PopService.run` write a new one."""
SNAPSHOT_CHECKS_PER_INTERVAL = 4
""":meth:`PopService.run` looks this often per interval: a snapshot is at most 1.25 intervals old."""


class PopPersistError(RuntimeError):
    """The POP log could not store a record; the request fails (and may be retried)."""


@dataclass(frozen=True, slots=True)
class Popped:
    message: StoredMessage
    handle: ReceiptHandle
    attempt: int
    """Delivery attempt, 1 for the first."""
    invisible_until_ms: int


def _wanted(message_filter: MessageFilter, message: StoredMessage) -> bool:
    """Whether the group's filter selects ``message`` (its tag hash passed already): a tag filter
    by the exact tag (no client re-checks a POP delivery, as a pull consumer re-checks a hash), a
    SQL92 filter by the message's properties, the evaluation pulls run."""
    if isinstance(message_filter, TagFilter):
        return message_filter.matches_tag(message.tags)
    return not message_filter.needs_properties or message_filter.matches_properties(message.properties)


class PopService:
    """Args:
    store: the broker's open message store (queues are read from it).
    put: the broker's put (records and dead letters are stored through it).
    clock: time of invisibility deadlines.
    broker_name: named in receipt handles.
    snapshot_interval_ms: the longest time between snapshots (default 10 min); the broker
        passes at most half its retention, so retention never deletes the last snapshot.
    """

    def __init__(
        self,
        store: MessageStore,
        put: Put,
        clock: Clock,
        broker_name: str,
        *,
        snapshot_interval_ms: int = SNAPSHOT_INTERVAL_MS,
    ) -> None:
        if snapshot_interval_ms < 1:
            raise ValueError(f"snapshot_interval_ms must be at least 1, not {snapshot_interval_ms}")
        self._store = store
        self._put = put
        self._clock = clock
        self._broker_name = broker_name
        self._snapshot_interval_ms = snapshot_interval_ms
        self.state = PopState()
        self._since_snapshot = 0
        self.snapshot_at_ms = 0
        """Store time of the last snapshot written or replayed from (0: none)."""
        self._appended: dict[tuple[str, int], asyncio.Event] = {}
        self._next_queue: dict[tuple[str, str], int] = {}
        self.acks: Tally[tuple[str, str]] = Tally()
        """Acks by (group, topic); with :attr:`revives` and :attr:`dead_letters`, for metrics."""
        self.revives: Tally[tuple[str, str]] = Tally()
        """Expired messages delivered again, by (group, topic)."""
        self.dead_letters: Tally[tuple[str, str]] = Tally()
        """Messages moved to the dead-letter topic, by (group, topic)."""

    def load(self) -> int:
        """Rebuild the state from the POP log: the last snapshot and the records after it
        (found scanning backwards, so older records are not read); returns the records read."""
        queue = self._store.consume_queue(POP_LOG_TOPIC, POP_LOG_QUEUE)
        newest_first: list[bytes] = []
        self.snapshot_at_ms = 0
        if queue is not None:
            for offset in range(queue.max_offset - 1, queue.min_offset - 1, -1):
                unit = queue.unit_at(offset)
                message = self._store.message_at(unit[0]) if unit else None
                if message is None:
                    continue
                newest_first.append(message.body)
                if records.is_snapshot(message.body):
                    self.snapshot_at_ms = message.store_timestamp_ms
                    break
        bodies = newest_first[::-1]
        self.state = records.replay(bodies)
        self._since_snapshot = len(bodies) - (1 if self.snapshot_at_ms else 0)
        log.info(
            "POP state of %s: %d record(s) replayed, %s",
            self._broker_name,
            len(bodies),
            "from a snapshot" if self.snapshot_at_ms else "no snapshot found",
        )
        return len(bodies)

    async def run(self) -> None:
        """Write a snapshot whenever one is due (:meth:`snapshot_if_due`), a master task."""
        period_s = self._snapshot_interval_ms / SNAPSHOT_CHECKS_PER_INTERVAL / 1000
        while True:
            try:
                await self.snapshot_if_due()
            except PopPersistError as error:
                log.warning(
                    "POP snapshot of %s not stored (%s); tried again in %.1f s",
                    self._broker_name,
                    error,
                    period_s,
                )
            await asyncio.sleep(period_s)

    async def snapshot_if_due(self) -> bool:
        """Store a snapshot if the last one is older than the interval and any group has state
        (also with no traffic: retention moves on regardless), so the replay's starting point
        always outlives retention; returns whether one was stored."""
        if self.state.is_empty or self._clock.now_ms() - self.snapshot_at_ms < self._snapshot_interval_ms:
            return False
        await self._persist([], snapshot=True)
        return True

    def notify_append(self, topic: str, queue_id: int) -> None:
        """Messages were appended to the queue (the broker's dispatcher calls this, as it wakes
        held pulls): pops waiting on it look again."""
        for key in ((topic, queue_id), (topic, ANY_QUEUE)):
            event = self._appended.pop(key, None)
            if event is not None:
                event.set()

    async def pop_any(
        self,
        group: str,
        topic: str,
        queue_ids: Sequence[int],
        max_nums: int,
        invisible_ms: int,
        *,
        fifo: bool = False,
        max_attempts: int = 17,
        message_filter: MessageFilter | None = None,
        wait_ms: int = 0,
        from_first: bool = True,
    ) -> list[Popped]:
        """Up to ``max_nums`` messages from the queues ``queue_ids`` (a v2 receive names a topic,
        not a queue): the queues are tried in turn from one after the last that answered, so
        a busy queue does not starve the others; long polling as :meth:`pop`, on any queue."""
        if not queue_ids:
            return []
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            start = self._next_queue.get((group, topic), 0) % len(queue_ids)
            popped: list[Popped] = []
            unscanned = False
            for i in range(len(queue_ids)):
                queue_id = queue_ids[(start + i) % len(queue_ids)]
                got, more = await self._pop_once(
                    PopKey(group, topic, queue_id),
                    max_nums - len(popped),
                    invisible_ms,
                    fifo,
                    max_attempts,
                    message_filter,
                    from_first,
                )
                unscanned |= more
                if got:
                    popped.extend(got)
                    self._next_queue[group, topic] = (start + i + 1) % len(queue_ids)
                if len(popped) >= max_nums:
                    break
            remaining_s = deadline - time.monotonic()
            if popped or remaining_s <= 0:
                return popped
            if unscanned:  # the filter's scan stopped short of a queue's end: look further now
                continue
            for queue_id in queue_ids:
                visible_ms = self.state.next_visible_ms(PopKey(group, topic, queue_id))
                if visible_ms is not None:
                    remaining_s = min(remaining_s, max(0.001, (visible_ms - self._clock.now_ms()) / 1000))
            appended = self._appended.setdefault((topic, ANY_QUEUE), asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(appended.wait(), remaining_s)

    async def pop(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_nums: int,
        invisible_ms: int,
        *,
        fifo: bool = False,
        max_attempts: int = 17,
        message_filter: MessageFilter | None = None,
        wait_ms: int = 0,
        from_first: bool = True,
    ) -> list[Popped]:
        """Up to ``max_nums`` messages of one queue, invisible for ``invisible_ms``.

        With ``wait_ms`` > 0 an empty answer is held (long polling, as pulls are) until a
        message is appended (:meth:`notify_append`), an in-flight one becomes visible again, or
        ``wait_ms`` has passed.
        """
        deadline = time.monotonic() + wait_ms / 1000
        key = PopKey(group, topic, queue_id)
        while True:
            popped, more = await self._pop_once(
                key, max_nums, invisible_ms, fifo, max_attempts, message_filter, from_first
            )
            remaining_s = deadline - time.monotonic()
            if popped or remaining_s <= 0:
                return popped
            if more:  # the filter's scan stopped short of the queue's end: look further now
                continue
            visible_ms = self.state.next_visible_ms(key)
            if visible_ms is not None:
                remaining_s = min(remaining_s, max(0.001, (visible_ms - self._clock.now_ms()) / 1000))
            appended = self._appended.setdefault((topic, queue_id), asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(appended.wait(), remaining_s)

    async def _pop_once(
        self,
        key: PopKey,
        max_nums: int,
        invisible_ms: int,
        fifo: bool,
        max_attempts: int,
        message_filter: MessageFilter | None,
        from_first: bool,
    ) -> tuple[list[Popped], bool]:
        """One look at the queue: what it hands out, and whether a filter's scan stopped short
        of the queue's end (the caller looks again at once rather than waiting for an append).
        A group's first look begins it at the queue's first message kept, or (``from_first``
        False: RocketMQ's ``consumeFromMinEnable`` off) at the next message to arrive."""
        group, topic, queue_id = key
        max_offset = self._store.max_offset_in_queue(topic, queue_id)
        pending: list[Record] = []
        if not self.state.started(key):
            first = self._store.min_offset_in_queue(topic, queue_id) if from_first else max_offset
            pending.append(self.state.start_at(key, first))
        now = self._clock.now_ms()
        plan = self.state.plan(key, now, max_nums, max_offset, fifo=fifo, max_attempts=max_attempts)
        # Everything up to the first await changes the state in one step of the event loop, so
        # a concurrent pop of the queue plans on the result. Dead letters are claimed (made
        # invisible for a while) first and marked done only once stored in the DLQ topic: one
        # the store refuses is tried again after the claim, never lost.
        for offset in plan.dead:
            lease = self.state.queue(key).in_flight[offset].lease
            _, claim = self.state.change_invisible(key, offset, lease, now, DEAD_LETTER_CLAIM_MS)
            if claim is not None:
                pending.append(claim)
        messages = {o: self._read(topic, queue_id, o) for o in plan.redeliver}
        gone = [o for o in plan.redeliver if messages[o] is None]  # deleted by retention meanwhile
        pending.extend(self.state.dead_letter(key, o) for o in gone)
        delivered = [o for o in plan.redeliver if messages[o] is not None]
        if delivered:
            pending.append(self.state.deliver(key, delivered, now, invisible_ms))
            self.revives[group, topic] += len(delivered)
        more = False
        if plan.new:
            taken, more = self._take_new(
                key, plan.new, max_offset, message_filter, now, invisible_ms, messages, pending
            )
            delivered.extend(taken)
        for offset in plan.dead:
            if await self._dead_letter(key, offset):
                pending.append(self.state.dead_letter(key, offset))
        await self._persist(pending)
        queue = self.state.queue(key)
        return [
            Popped(
                message,
                ReceiptHandle(self._broker_name, queue_id, offset, queue.in_flight[offset].lease),
                queue.in_flight[offset].attempt,
                queue.in_flight[offset].invisible_until_ms,
            )
            for offset in sorted(delivered)
            if (message := messages[offset]) is not None and offset in queue.in_flight
        ], more

    def _take_new(
        self,
        key: PopKey,
        offsets: tuple[int, ...],
        max_offset: int,
        message_filter: MessageFilter | None,
        now: int,
        invisible_ms: int,
        messages: dict[int, StoredMessage | None],
        pending: list[Record],
    ) -> tuple[list[int], bool]:
        """Hand out the plan's new ``offsets`` (from the frontier on) that the filter selects
        and skip the others for good: never delivered, no attempt counted, done for the group's
        consume offset (and never revived). Each skipped offset lets the scan look one further,
        up to the store's ``max_filter_scan_units`` (the bound a filtered pull has), so a
        receive is not answered empty while wanted messages wait behind others. The filter is
        asked as a pull asks it: the unit's tag hash first (a tag filter skips without reading
        the commit log), then the message. A run of delivered offsets makes one record, a run
        of skipped ones a record per ``SKIPPED_PER_RECORD``. Returns the delivered offsets
        (their messages put in ``messages``), and whether the scan stopped short of
        ``max_offset`` with fewer than wanted."""
        queue = self._store.consume_queue(key.topic, key.queue_id)
        wanted = len(offsets)
        offset, end = offsets[0], offsets[-1] + 1
        limit = min(max_offset, offset + max(wanted, self._store.config.max_filter_scan_units))
        taken: list[int] = []
        run: list[int] = []
        skipped: list[int] = []
        while offset < end:
            unit = queue.unit_at(offset) if queue is not None else None
            message = None
            if unit is not None and (message_filter is None or message_filter.matches_tags_code(unit[2])):
                message = self._store.message_at(unit[0])
                if (
                    message is not None
                    and message_filter is not None
                    and not _wanted(message_filter, message)
                ):
                    message = None
            if message is not None:
                if skipped:
                    pending.append(self.state.skip(key, skipped))
                    skipped = []
                messages[offset] = message
                run.append(offset)
            else:  # filtered out, or deleted by retention since the plan
                if run:
                    pending.append(self.state.deliver(key, run, now, invisible_ms))
                    taken.extend(run)
                    run = []
                skipped.append(offset)
                if len(skipped) == SKIPPED_PER_RECORD:
                    pending.append(self.state.skip(key, skipped))
                    skipped = []
                if end < limit:
                    end += 1
            offset += 1
        if run:
            pending.append(self.state.deliver(key, run, now, invisible_ms))
            taken.extend(run)
        if skipped:
            pending.append(self.state.skip(key, skipped))
        return taken, len(taken) < wanted and end < max_offset

    async def ack(self, group: str, topic: str, handle: str) -> AckOutcome:
        """Acknowledge one delivery; raises :class:`InvalidReceiptHandle` for foreign text."""
        (outcome,) = await self._ack(group, topic, [self._receipt(handle)])
        return outcome

    async def ack_many(self, group: str, topic: str, handles: Sequence[str]) -> list[AckOutcome]:
        """Acknowledge deliveries of one group and topic with one write of their records (what
        a proxy's coalesced acks cost: one put, not one per message); an outcome per handle,
        in order, ``UNKNOWN`` for a malformed or foreign one."""
        receipts: list[ReceiptHandle | None] = []
        for handle in handles:
            try:
                receipts.append(self._receipt(handle))
            except InvalidReceiptHandle:
                receipts.append(None)
        return await self._ack(group, topic, receipts)

    async def _ack(
        self, group: str, topic: str, receipts: Sequence[ReceiptHandle | None]
    ) -> list[AckOutcome]:
        outcomes: list[AckOutcome] = []
        pending: list[Record] = []
        for receipt in receipts:
            if receipt is None:
                outcomes.append(AckOutcome.UNKNOWN)
                continue
            outcome, record = self.state.ack(
                PopKey(group, topic, receipt.queue_id), receipt.offset, receipt.lease
            )
            outcomes.append(outcome)
            if record is not None:
                pending.append(record)
        if pending:
            await self._persist(pending)
            self.acks[group, topic] += len(pending)
        return outcomes

    async def forward_dead_letter(self, group: str, topic: str, handle: str) -> AckOutcome:
        """Move the delivery named by ``handle`` to the group's dead-letter topic now (the
        consumer gave up on it); raises :class:`PopPersistError` when the store refused it (the
        message is then claimed for a while and dead-lettered at its next expiry)."""
        receipt = self._receipt(handle)
        key = PopKey(group, topic, receipt.queue_id)
        now = self._clock.now_ms()
        outcome, claim = self.state.change_invisible(
            key, receipt.offset, receipt.lease, now, DEAD_LETTER_CLAIM_MS
        )
        if claim is None:
            return outcome
        if not await self._dead_letter(key, receipt.offset):
            await self._persist([claim])
            raise PopPersistError(f"dead letter of {key} offset {receipt.offset} not stored")
        await self._persist([claim, self.state.dead_letter(key, receipt.offset)])
        return AckOutcome.ACKED

    async def change_invisible(
        self, group: str, topic: str, handle: str, invisible_ms: int, *, renew: bool = False
    ) -> tuple[AckOutcome, ReceiptHandle | None]:
        """Hide an in-flight message ``invisible_ms`` from now; returns its new handle (the same
        one with ``renew``, see :meth:`PopState.change_invisible`)."""
        receipt = self._receipt(handle)
        key = PopKey(group, topic, receipt.queue_id)
        outcome, record = self.state.change_invisible(
            key, receipt.offset, receipt.lease, self._clock.now_ms(), invisible_ms, renew=renew
        )
        if record is None:
            return outcome, None
        await self._persist([record])
        return outcome, ReceiptHandle(self._broker_name, receipt.queue_id, receipt.offset, record.lease)

    def _receipt(self, handle: str) -> ReceiptHandle:
        receipt = ReceiptHandle.decode(handle)
        if receipt.broker_name != self._broker_name:
            raise InvalidReceiptHandle(
                f"receipt handle {handle!r} is of broker {receipt.broker_name}, not {self._broker_name}"
            )
        return receipt

    def _read(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        queue = self._store.consume_queue(topic, queue_id)
        unit = queue.unit_at(offset) if queue is not None and offset >= queue.min_offset else None
        return self._store.message_at(unit[0]) if unit else None

    async def _dead_letter(self, key: PopKey, offset: int) -> bool:
        """Store the message in the group's dead-letter topic; False when the store refused."""
        message = self._read(key.topic, key.queue_id, offset)
        if message is None:  # deleted by retention: nothing left to keep
            return True
        dead = restore(message)
        dead.properties = {**dead.properties, Property.ORIGIN_MESSAGE_ID: message.msg_id}
        dead.topic, dead.queue_id = f"{DLQ_GROUP_TOPIC_PREFIX}{key.group}", 0
        result = await self._put([dead])
        if not result.status.stored:
            log.warning(
                "dead letter of %s offset %d not stored (%s); retried later", key, offset, result.reason
            )
            return False
        self.dead_letters[key.group, key.topic] += 1
        return True

    async def _persist(self, pending: Sequence[Record], *, snapshot: bool = False) -> None:
        if not pending and not snapshot:
            return
        bodies = [records.encode(r) for r in pending]
        self._since_snapshot += len(bodies)
        if snapshot or self._since_snapshot >= SNAPSHOT_EVERY:
            bodies.append(records.encode_snapshot(self.state))
            self._since_snapshot = 0
            snapshot, self.snapshot_at_ms = True, self._clock.now_ms()
        result = await self._put(
            [InboundMessage(topic=POP_LOG_TOPIC, body=b, queue_id=POP_LOG_QUEUE) for b in bodies]
        )
        if not result.status.stored:
            if snapshot:
                self.snapshot_at_ms = 0  # the next look of :meth:`run` tries again
            raise PopPersistError(f"{len(bodies)} POP records not stored: {result.reason}")
