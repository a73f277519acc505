"""Deliveries between the sidecar's push consumer and the application streams.

The consumer's listener calls :meth:`DeliveryHub.deliver` for a message and waits for the
application's verdict; application streams take pending deliveries as their in-flight limit
allows and answer them. A stream that goes away puts its unanswered deliveries back at the
front, so another stream (or the next to connect) gets them — nothing is acknowledged on the
broker until an application said SUCCESS.

Memory stays bounded without a limit here: the consumer runs at most ``max_in_flight``
listener calls at once (its worker count) and its flow control stops pulling when the process
queues are full, so a slow or absent application only makes deliveries wait.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from dataclasses import dataclass, field

from orbitmq.store.record import StoredMessage
from orbitmq.v1 import sidecar_pb2
from orbitmq.v1.sidecar_pb2 import AckStatus


@dataclass(eq=False)
class Pending:
    delivery_id: str
    message: StoredMessage
    verdict: asyncio.Future[int]
    stream: AppStream | None = None


@dataclass(eq=False)
class AppStream:
    app_id: str
    max_in_flight: int
    holding: dict[str, Pending] = field(default_factory=dict)
    attached: bool = False


class StreamDetached(Exception):
    """The application stream went away while waiting for a delivery."""


class DeliveryHub:
    def __init__(self) -> None:
        self._waiting: deque[Pending] = deque()
        self._handed: dict[str, Pending] = {}
        self._streams: list[AppStream] = []
        self._changed = asyncio.Condition()
        self._ids = itertools.count(1)
        self.paused = False
        self.delivered = 0
        self.redelivered = 0
        self.acks: dict[str, int] = {}

    @property
    def in_flight(self) -> int:
        """Deliveries handed to an application and not yet answered."""
        return len(self._handed)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def deliver(self, message: StoredMessage) -> int:
        """Offer ``message`` to the application; returns its :class:`AckStatus`. Cancelled
        (leaving the message unacknowledged) when the sidecar drains before an answer."""
        verdict: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        pending = Pending(f"{next(self._ids)}", message, verdict)
        self._waiting.append(pending)
        await self._notify()
        try:
            return await verdict
        finally:
            self._forget(pending)

    def _forget(self, pending: Pending) -> None:
        self._handed.pop(pending.delivery_id, None)
        if pending.stream is not None:
            pending.stream.holding.pop(pending.delivery_id, None)
        if pending in self._waiting:
            self._waiting.remove(pending)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def attach(self, stream: AppStream) -> None:
        stream.attached = True
        self._streams.append(stream)

    async def detach(self, stream: AppStream) -> None:
        """The stream is gone: what it held unanswered goes back to the front, in order."""
        stream.attached = False
        self._streams.remove(stream)
        orphans = sorted(stream.holding.values(), key=lambda p: int(p.delivery_id))
        for pending in reversed(orphans):
            self._handed.pop(pending.delivery_id, None)
            pending.stream = None
            if not pending.verdict.done():
                self._waiting.appendleft(pending)
                self.redelivered += 1
        stream.holding.clear()
        await self._notify()

    async def next_for(self, stream: AppStream, most: int = 1) -> list[Pending]:
        """The next deliveries for ``stream`` (at least one, at most ``most`` and its free room),
        once it has room and the hub is not paused."""
        async with self._changed:
            await self._changed.wait_for(
                lambda: (
                    not stream.attached
                    or (
                        bool(self._waiting) and not self.paused and len(stream.holding) < stream.max_in_flight
                    )
                )
            )
            if not stream.attached:  # gone while waiting: take nothing
                raise StreamDetached(stream.app_id)
            taken = []
            while self._waiting and len(taken) < most and len(stream.holding) < stream.max_in_flight:
                pending = self._waiting.popleft()
                pending.stream = stream
                stream.holding[pending.delivery_id] = pending
                self._handed[pending.delivery_id] = pending
                taken.append(pending)
            self.delivered += len(taken)
            return taken

    async def ack(self, stream: AppStream, delivery_id: str, status: int) -> None:
        """An application's verdict; unknown ids (answered twice, or by the wrong stream) are ignored."""
        if self._settle(stream, delivery_id, status):
            await self._notify()

    async def ack_many(self, stream: AppStream, acks: list[tuple[str, int]]) -> None:
        if any([self._settle(stream, delivery_id, status) for delivery_id, status in acks]):
            await self._notify()

    def _settle(self, stream: AppStream, delivery_id: str, status: int) -> bool:
        pending = stream.holding.pop(delivery_id, None)
        if pending is None:
            return False
        self._handed.pop(delivery_id, None)
        name = AckStatus.Name(status) if status in AckStatus.values() and status else "LATER"
        self.acks[name] = self.acks.get(name, 0) + 1
        if not pending.verdict.done():
            pending.verdict.set_result(
                status if status != AckStatus.ACK_STATUS_UNSPECIFIED else AckStatus.LATER
            )
        return True

    async def set_paused(self, paused: bool) -> None:
        self.paused = paused
        await self._notify()

    def cancel_waiting(self) -> int:
        """Drain: deliveries no application holds are withdrawn (they stay unacknowledged)."""
        withdrawn = 0
        while self._waiting:
            pending = self._waiting.popleft()
            if not pending.verdict.done():
                pending.verdict.cancel()
                withdrawn += 1
        return withdrawn

    def cancel_all(self) -> int:
        withdrawn = self.cancel_waiting()
        for pending in list(self._handed.values()):
            if not pending.verdict.done():
                pending.verdict.cancel()
                withdrawn += 1
        return withdrawn


def to_delivery(pending: Pending) -> sidecar_pb2.Delivery:
    from orbitmq.common.topics import Property

    m = pending.message
    return sidecar_pb2.Delivery(
        delivery_id=pending.delivery_id,
        topic=m.topic,
        queue_id=m.queue_id,
        queue_offset=m.queue_offset,
        msg_id=m.properties.get(Property.UNIQ_KEY) or m.msg_id,
        keys=list(m.keys),
        tags=m.tags or "",
        properties=m.properties,
        body=m.body,
        reconsume_times=m.reconsume_times,
        born_timestamp_ms=m.born_timestamp_ms,
        store_timestamp_ms=m.store_timestamp_ms,
    )
