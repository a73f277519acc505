"""Calls that arrive while earlier ones of their kind are on their way go to the broker
together, as one: acks of a (broker, group, topic).

The official clients make one ``AckMessage`` call per message and keep several in flight.
Passed on one by one, each costs the proxy a client call to the broker and the broker a whole
request and a store write; the broker writes the POP records of 32 acks for little more than
one. So, as a store's group commit does (:class:`Coalescer`): a call that finds fewer than
``max_in_flight`` batches of its key on their way goes at once (a lone call waits for nothing:
its latency is unchanged); otherwise it waits for the next batch, which takes everything queued
meanwhile (up to ``max_items`` items and ``max_size`` of their sizes). Each item still gets its
own result. A batch that fails fails every item in it, as each would have failed alone.

Sends are coalesced by the proxy's producer (:mod:`orbitmq.client.accumulator`).
Acks: see :meth:`orbitmq.proxy.consumers.V2Consumers.ack`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

MAX_IN_FLIGHT = 1
"""One batch per key on its way: with 2, the official client's 16 sends in flight still went
to the broker almost one by one (1.07 messages per call; with 1, 1.5 to 2.3)."""

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")


@dataclasses.dataclass
class _Key(Generic[T, R]):
    waiting: deque[tuple[T, asyncio.Future[R]]] = dataclasses.field(default_factory=deque)
    in_flight: int = 0


class Coalescer(Generic[K, T, R]):
    """Args:
    flush: makes one call for a key's batch of items; returns one result per item, in order,
        or raises (every item of the batch then fails with that error).
    max_items, max_size, size: bounds of one batch (``size`` of an item counts toward
        ``max_size``; a first item larger than it still goes, alone).
    max_in_flight: batches of one key on their way at once.
    """

    def __init__(
        self,
        flush: Callable[[K, list[T]], Awaitable[list[R]]],
        *,
        max_items: int,
        max_in_flight: int = MAX_IN_FLIGHT,
        size: Callable[[T], int] = lambda item: 0,
        max_size: int = sys.maxsize,
    ) -> None:
        for name, value in (
            ("max_items", max_items),
            ("max_size", max_size),
            ("max_in_flight", max_in_flight),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        self._flush = flush
        self._max_items = max_items
        self._max_in_flight = max_in_flight
        self._size = size
        self._max_size = max_size
        self._keys: dict[K, _Key[T, R]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.calls = 0
        """Calls made (a lone item is a batch of one); with :attr:`items`, what coalescing saved."""
        self.items = 0

    async def submit(self, key: K, item: T) -> R:
        """``item``'s result, from a call of its own or of a batch."""
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = _Key()
        if state.in_flight < self._max_in_flight and not state.waiting:
            state.in_flight += 1  # alone and at once, in the caller's task (its cancellation is ours)
            try:
                (result,) = await self._flush(key, [item])
                self.calls += 1
                self.items += 1
                return result
            finally:
                state.in_flight -= 1
                self._drain(key, state)
        done: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        state.waiting.append((item, done))
        self._drain(key, state)
        return await done

    def _drain(self, key: K, state: _Key[T, R]) -> None:
        while state.waiting and state.in_flight < self._max_in_flight:
            batch: list[tuple[T, asyncio.Future[R]]] = []
            size = 0
            while state.waiting and len(batch) < self._max_items:
                item_size = self._size(state.waiting[0][0])
                if batch and size + item_size > self._max_size:
                    break
                size += item_size
                batch.append(state.waiting.popleft())
            state.in_flight += 1
            task = asyncio.get_running_loop().create_task(self._call(key, state, batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if not state.waiting and not state.in_flight:
            self._keys.pop(key, None)  # keys come and go (receipt handles' groups): keep none idle

    async def _call(self, key: K, state: _Key[T, R], batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            try:
                results = await self._flush(key, [item for item, _ in batch])
            except Exception as error:  # each item fails as it would have alone
                for _, done in batch:
                    if not done.done():
                        done.set_exception(error)
                return
            except BaseException:  # cancelled (the proxy is closing): so are the items
                for _, done in batch:
                    done.cancel()
                raise
            self.calls += 1
            self.items += len(batch)
            for result, (_, done) in zip(results, batch, strict=True):
                if not done.done():  # its caller may have given up (cancelled)
                    done.set_result(result)
        finally:
            state.in_flight -= 1
            self._drain(key, state)
