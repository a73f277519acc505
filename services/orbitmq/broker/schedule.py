"""Delayed messages (RocketMQ's ScheduleMessageService).

A message with delay level L waits in ``SCHEDULE_TOPIC_XXXX`` queue L-1, whose consume-queue
units carry the time the message is due instead of a tag hash. Each tick, every level's queue
is read from its progress offset while units are due; each due message is put back on its real
topic and the progress moves on. Progress is the delay-offset table, persisted with the other
config files, so deliveries resume after a restart where they stopped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from orbitmq.broker.reput import restore
from orbitmq.common.clock import Clock
from orbitmq.common.topics import SCHEDULE_TOPIC, Property
from orbitmq.store.config_store import DelayOffsetTable
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import InboundMessage
from orbitmq.store.results import PutResult

log = logging.getLogger(__name__)

Put = Callable[[InboundMessage], Awaitable[PutResult]]


class ScheduleService:
    def __init__(
        self,
        store: MessageStore,
        progress: DelayOffsetTable,
        levels: int,
        clock: Clock,
        put: Put,
        tick_ms: int,
    ) -> None:
        self._store = store
        self._progress = progress
        self._levels = levels
        self._clock = clock
        self._put = put
        self._tick_s = tick_ms / 1000
        self.delivered = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._tick_s)
            await self.deliver_due()

    async def deliver_due(self) -> int:
        """Move every due message to its real topic; returns how many moved."""
        moved = 0
        for level in range(1, self._levels + 1):
            moved += await self._deliver_level(level)
        self.delivered += moved
        return moved

    async def _deliver_level(self, level: int) -> int:
        queue = self._store.consume_queue(SCHEDULE_TOPIC, level - 1)
        if queue is None:
            return 0
        offset = max(self._progress.get(level), queue.min_offset)
        now, moved = self._clock.now_ms(), 0
        latest = now + self._store.config.delay_levels_ms[level - 1]
        while offset < queue.max_offset:
            unit = queue.unit_at(offset)
            # Due later than now + the level's delay: stored before the wall clock stepped back.
            # Waiting for the clock to catch up would hold every later message of the level as
            # long as the step; it goes now (RocketMQ's correctDeliverTimestamp).
            if unit is None or now < unit[2] <= latest:
                break
            message = self._store.message_at(unit[0])
            if message is not None:
                result = await self._put(restore(message, drop=(Property.DELAY,)))
                if not result.status.stored:
                    log.warning("delayed message at %d not re-put (%s); will retry", unit[0], result.reason)
                    break
                moved += 1
            offset += 1
            self._progress.set(level, offset)
        return moved

    def pending(self) -> dict[int, int]:
        """Messages still waiting per level (for metrics and admin)."""
        waiting = {}
        for level in range(1, self._levels + 1):
            queue = self._store.consume_queue(SCHEDULE_TOPIC, level - 1)
            if queue is not None:
                waiting[level] = max(0, queue.max_offset - max(self._progress.get(level), queue.min_offset))
        return waiting
