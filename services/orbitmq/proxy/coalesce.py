"""Acks that arrive while earlier ones of their (broker, group, topic) are on their way go to
the broker together, as one call.

The official clients make one ``AckMessage`` call per message and keep several in flight.
Passed on one by one, each costs the proxy a client call to the broker and the broker a whole
request and a store write; the broker writes the POP records of 32 acks for little more than
one. So, as a store's group commit does: an ack whose key has no call on its way goes at once
(a lone ack waits for nothing: its latency is unchanged); otherwise it waits for the next call,
which takes everything queued meanwhile (up to ``max_items``). Each item still gets its own
result; a call that fails fails every item in it, as each would have failed alone.

The lanes are the producer's (:class:`orbitmq.client.accumulator.Lanes`, which coalesce its
sends, and so the proxy's too); this module only makes the call and hands out its results.
Acks: see :meth:`orbitmq.proxy.consumers.Consumers.ack`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from orbitmq.client.accumulator import Lane, Lanes, Pending

MAX_IN_FLIGHT = 1
"""One call per key on its way (measured on the sends this module once coalesced: with 2, the
official client's 16 sends in flight still went to the broker almost one by one, 1.07 messages
per call; with 1, 1.5 to 2.3)."""

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
    """

    def __init__(
        self,
        flush: Callable[[K, list[T]], Awaitable[list[R]]],
        *,
        max_items: int,
        max_in_flight: int = MAX_IN_FLIGHT,
        owner: str = "proxy:coalesce",
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        super().__init__(owner, "the proxy is closing", max_items=max_items)
        self._flush = flush
        self._max_in_flight = max_in_flight
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
