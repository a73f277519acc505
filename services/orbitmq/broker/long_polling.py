"""Held pulls (RocketMQ's PullRequestHoldService), woken by the dispatcher, not by a timer.

A pull that finds nothing registers here and waits; when the dispatcher reports that a queue
grew past the waiting offset, its future completes and the pull reads again at once. The
registration happens in the same event-loop step as the read that found nothing, so no
message can slip in between.
"""

from __future__ import annotations

import asyncio

QueueId = tuple[str, int]


class PullHolds:
    def __init__(self) -> None:
        self._waiting: dict[QueueId, list[tuple[int, asyncio.Future[None]]]] = {}

    def hold(self, topic: str, queue_id: int, offset: int) -> asyncio.Future[None]:
        """A future that completes when the queue's max offset exceeds ``offset``."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault((topic, queue_id), []).append((offset, future))
        return future

    def release(self, topic: str, queue_id: int, future: asyncio.Future[None]) -> None:
        waiters = self._waiting.get((topic, queue_id))
        if waiters:
            waiters[:] = [(o, f) for o, f in waiters if f is not future]
            if not waiters:
                del self._waiting[(topic, queue_id)]

    def on_queue_grow(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Dispatcher listener: wake the pulls that now have something to read."""
        waiters = self._waiting.get((topic, queue_id))
        if not waiters:
            return
        remaining = []
        for offset, future in waiters:
            if offset < max_offset:
                if not future.done():
                    future.set_result(None)
            else:
                remaining.append((offset, future))
        if remaining:
            self._waiting[(topic, queue_id)] = remaining
        else:
            del self._waiting[(topic, queue_id)]

    def wake_all(self) -> None:
        """Shutdown: let every held pull answer now."""
        for waiters in self._waiting.values():
            for _, future in waiters:
                if not future.done():
                    future.set_result(None)
        self._waiting.clear()

    @property
    def held(self) -> int:
        return sum(len(w) for w in self._waiting.values())
