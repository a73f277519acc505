"""Acks that arrive while earlier ones of their (broker, group, topic) are on their way go to
the broker together, as one call.

The official clients make one ``AckMessage`` call per message and keep several in flight.
Passed on one by one, each costs the proxy a client call to the broker and the broker a whole
request and a store write; the broker writes the POP records of 32 acks for little more than
one. So, as a store's group commit does: an ack whose key has no call on its way goes at once
(a lone ack waits for nothing: its latency is unchanged); otherwise it waits for the next call,
which takes everything queued meanwhile (up to ``max_items``). Each item still gets its own
result; a call that fails fails every item in it, as each would have failed alone.

Under load the next call lingers: a batch of more than one (items arrived while the last call
was on its way, so more are coming) waits ``linger_s`` before it goes, taking what arrived
meanwhile. A client acking asynchronously (the Java client's ``ackAsync``, tens outstanding)
does not wait on any one ack, so a few milliseconds more per ack cost it nothing, while each
broker call saved is a gRPC call less on both ends and one POP log write less for several acks.

The lanes are the producer's (:class:`orbitmq.client.accumulator.Lanes`, which coalesce its
sends, and so the proxy's too); this module only makes the call and hands out its results.
Acks: see :meth:`orbitmq.proxy.consumers.Consumers.ack`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from orbitmq.client.accumulator import Lane, Lanes, Pending

MAX_IN_FLIGHT = 1
"""One call per key on its way (measured on the sends this module once coalesced: with 2, the
official client's 16 sends in flight still went to the broker almost one by one, 1.07 messages
per call; with 1, 1.5 to 2.3)."""

LINGER_S = 0.002
"""How long a batch of several waits for more (see the module docstring). The Java SimpleConsumer
draining a backlog (receives of 32, 64 acks outstanding), alternating runs: without it 3.5 acks a
broker call, 2 040-2 540 msg/s, proxy 332-352 and broker 136-152 us CPU a message; 2 ms: 6.6 a
call, 3 200-3 730 msg/s, 250-284 and 66-75 us; 5 ms: about 12 a call, broker 60-62 us, no
faster; 1 ms: about 5 a call, 2 310-2 590 msg/s."""

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")


class _Item(Pending[R], Generic[T, R]):
    __slots__ = ("item",)

    item: T


class Coalescer(Lanes[K, "_Item[T, R]"]):
    """Args:
    flush: makes one call for a key's batch of items; returns one result per item, in order,
        or raises (every item of the batch then fails with that error).
    max_items: most items in one call.
    max_in_flight: calls of one key on their way at once.
    linger_s: how long a batch of more than one waits for more before its call.
    """

    def __init__(
        self,
        flush: Callable[[K, list[T]], Awaitable[list[R]]],
        *,
        max_items: int,
        max_in_flight: int = MAX_IN_FLIGHT,
        linger_s: float = LINGER_S,
        owner: str = "proxy:coalesce",
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        super().__init__(owner, "the proxy is closing", max_items=max_items)
        self._flush = flush
        self._max_in_flight = max_in_flight
        self._linger_s = linger_s
        self.calls = 0
        """Calls made (a lone item is a batch of one); with :attr:`items`, what coalescing saved."""
        self.items = 0

    async def submit(self, key: K, item: T) -> R:
        """``item``'s result, from a call of its own or of a batch."""
        pending: _Item[T, R] = _Item()
        pending.item = item
        pending.alone = False
        self._put(key, pending, self._max_in_flight)
        return await pending

    async def _deliver(self, lane: Lane[K, _Item[T, R]], batch: list[_Item[T, R]]) -> None:
        if self._linger_s > 0 and 1 < len(batch) < self._max_items:
            await asyncio.sleep(self._linger_s)
            waiting = lane.waiting  # what arrived while this batch lingered
            while waiting and len(batch) < self._max_items:
                pending = waiting.popleft()
                if not pending.done():  # its caller gave up (cancelled)
                    batch.append(pending)
        try:
            results = await self._flush(lane.key, [pending.item for pending in batch])
        except Exception as error:  # each item fails as it would have alone
            for pending in batch:
                if not pending.done():
                    pending.set_exception(error)
            return
        self.calls += 1
        self.items += len(batch)
        for result, pending in zip(results, batch, strict=True):
            if not pending.done():  # its caller may have given up (cancelled)
                pending.set_result(result)
