"""Deliveries between the sidecar's push consumer and the application streams.

The consumer's listener calls :meth:`DeliveryHub.deliver` with its batch of messages and waits
for the application's verdict on each; application streams take pending deliveries as their
in-flight limit allows and answer them. A batch costs one future and one wake-up however many
messages it holds (a future and a condition variable per message were most of the sidecar's
CPU). A stream that goes away puts its unanswered deliveries back at the front, so another
stream (or the next to connect) gets them — nothing is acknowledged on the broker until an
application said SUCCESS.

Delivery ids are numbers given at hand-out, so one stream message holds consecutive ids (an
application asking for records gets them as a first id and a count), and a stream's holdings
are keyed by plain ints.

Memory stays bounded without a limit on waiting deliveries: they are messages the consumer
already holds in its process queues, whose flow control stops pulling when they are full, so a
slow or absent application only makes deliveries wait.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from orbitmq.common.topics import Property
from orbitmq.store.record import (
    HEADER,
    MESSAGE_MAGIC,
    RECORD_FIXED_BYTES,
    U16,
    LazyProperties,
    StoredMessage,
    encode_host,
    encode_properties,
)
from orbitmq.v1 import sidecar_pb2
from orbitmq.v1.sidecar_pb2 import AckStatus

ACK_NAMES = {AckStatus.SUCCESS: "SUCCESS", AckStatus.LATER: "LATER", AckStatus.SUSPEND: "SUSPEND"}
"""Verdicts an application may give; anything else (unset, unknown) counts as LATER."""
SUCCESS: int = AckStatus.SUCCESS
"""As a plain int: the enum wrapper's attribute lookup is a Python call."""

Verdict = int | None
"""An :class:`AckStatus`, or None for a delivery withdrawn unanswered (the sidecar drained)."""


class _Batch:
    """The verdicts of one listener call's messages; ``done`` resolves once all are settled."""

    __slots__ = ("done", "remaining", "verdicts")

    def __init__(self, size: int, done: asyncio.Future[list[Verdict]]) -> None:
        self.verdicts: list[Verdict] = [None] * size
        self.remaining = size
        self.done = done

    def settle(self, index: int, verdict: Verdict) -> None:
        self.verdicts[index] = verdict
        self.remaining -= 1
        if self.remaining == 0 and not self.done.done():
            self.done.set_result(self.verdicts)


class Pending:
    """One message of a listener call, waiting or handed out (``delivery_id`` 0 until then)."""

    __slots__ = ("batch", "delivery_id", "index", "message")

    def __init__(self, message: StoredMessage, batch: _Batch, index: int) -> None:
        self.message = message
        self.batch = batch
        self.index = index
        self.delivery_id = 0


@dataclass(eq=False)
class AppStream:
    app_id: str
    max_in_flight: int
    records: bool = False
    """The application asked for deliveries as commit-log records (:func:`to_records`)."""
    holding: dict[int, Pending] = field(default_factory=dict)
    attached: bool = False
    wake: asyncio.Future[None] | None = None
    """Set while the stream's take waits; resolved when something it waits for changes."""


class StreamDetached(Exception):
    """The application stream went away while waiting for a delivery."""


class DeliveryHub:
    def __init__(self, max_in_flight: int = 1 << 30) -> None:
        self.max_in_flight = max_in_flight
        """Most deliveries handed out and unanswered at once, over all streams."""
        self._waiting: deque[Pending] = deque()
        self._in_flight = 0
        self._streams: list[AppStream] = []
        self._last_id = 0
        self.paused = False
        self.delivered = 0
        self.redelivered = 0
        self.acks: dict[str, int] = {}

    @property
    def in_flight(self) -> int:
        """Deliveries handed to an application and not yet answered."""
        return self._in_flight

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def streams(self) -> int:
        """Application streams attached now."""
        return len(self._streams)

    async def deliver(self, messages: list[StoredMessage]) -> list[Verdict]:
        """Offer ``messages`` to the applications; returns each one's verdict, in order. A
        message withdrawn by a drain before anyone answered it gets None (unacknowledged)."""
        if not messages:
            return []
        batch = _Batch(len(messages), asyncio.get_running_loop().create_future())
        self._waiting.extend([Pending(message, batch, index) for index, message in enumerate(messages)])
        self._notify()
        try:
            return await batch.done
        except asyncio.CancelledError:  # the listener was cancelled: take back what is unanswered
            self._withdraw(batch)
            raise

    def _withdraw(self, batch: _Batch) -> None:
        self._waiting = deque(p for p in self._waiting if p.batch is not batch)
        for stream in self._streams:
            for pending in [p for p in stream.holding.values() if p.batch is batch]:
                del stream.holding[pending.delivery_id]
                self._in_flight -= 1

    def _notify(self) -> None:
        for stream in self._streams:
            wake = stream.wake
            if wake is not None and not wake.done():
                wake.set_result(None)

    async def attach(self, stream: AppStream) -> None:
        stream.attached = True
        self._streams.append(stream)

    def end(self, stream: AppStream) -> None:
        """The stream takes no more: a take waiting for it (or the next) raises
        :class:`StreamDetached`. What it holds stays held until :meth:`detach`."""
        stream.attached = False
        if stream.wake is not None and not stream.wake.done():
            stream.wake.set_result(None)

    async def detach(self, stream: AppStream) -> None:
        """The stream is gone: what it held unanswered goes back to the front, in order."""
        self.end(stream)
        self._streams.remove(stream)
        orphans = [stream.holding[i] for i in sorted(stream.holding)]
        self._in_flight -= len(orphans)
        self._waiting.extendleft(reversed(orphans))
        self.redelivered += len(orphans)
        stream.holding.clear()
        self._notify()

    def _ready(self, stream: AppStream) -> bool:
        return (
            bool(self._waiting)
            and not self.paused
            and len(stream.holding) < stream.max_in_flight
            and self._in_flight < self.max_in_flight
        )

    async def next_for(self, stream: AppStream, most: int = 1) -> list[Pending]:
        """The next deliveries for ``stream`` (at least one, at most ``most`` and its free room),
        once it has room and the hub is not paused; their ids are consecutive."""
        while stream.attached and not self._ready(stream):
            stream.wake = asyncio.get_running_loop().create_future()
            try:
                await stream.wake
            finally:
                stream.wake = None
        if not stream.attached:  # gone while waiting: take nothing
            raise StreamDetached(stream.app_id)
        room = min(
            most,
            stream.max_in_flight - len(stream.holding),
            self.max_in_flight - self._in_flight,
            len(self._waiting),
        )
        popleft = self._waiting.popleft
        taken = [popleft() for _ in range(room)]
        first = self._last_id + 1
        self._last_id += room
        holding = stream.holding
        for delivery_id, pending in enumerate(taken, first):
            pending.delivery_id = delivery_id
            holding[delivery_id] = pending
        self._in_flight += room
        self.delivered += room
        return taken

    async def ack(self, stream: AppStream, delivery_id: int, status: int) -> None:
        """An application's verdict; unknown ids (answered twice, or by the wrong stream) are ignored."""
        await self.ack_many(stream, ((delivery_id, status),))

    async def ack_many(self, stream: AppStream, acks: Iterable[tuple[int, int]]) -> None:
        holding, counts = stream.holding, self.acks
        freed = 0
        for delivery_id, status in acks:
            pending = holding.pop(delivery_id, None)
            if pending is None:
                continue
            name = ACK_NAMES.get(status)
            if name is None:
                name, status = "LATER", AckStatus.LATER
            counts[name] = counts.get(name, 0) + 1
            pending.batch.settle(pending.index, status)
            freed += 1
        if freed:
            self._in_flight -= freed
            self._notify()

    async def ack_succeeded(self, stream: AppStream, delivery_ids: Iterable[int]) -> None:
        """SUCCESS for each of ``delivery_ids`` (``Acks.succeeded``): :meth:`ack_many`'s work
        without a verdict to check or a pair to build per message."""
        pop = stream.holding.pop
        freed = 0
        for delivery_id in delivery_ids:
            pending = pop(delivery_id, None)
            if pending is not None:  # _Batch.settle, inline: this runs for every message
                batch = pending.batch
                batch.verdicts[pending.index] = SUCCESS
                batch.remaining -= 1
                if not batch.remaining and not batch.done.done():
                    batch.done.set_result(batch.verdicts)
                freed += 1
        if freed:
            self.acks["SUCCESS"] = self.acks.get("SUCCESS", 0) + freed
            self._in_flight -= freed
            self._notify()

    async def set_paused(self, paused: bool) -> None:
        self.paused = paused
        self._notify()

    def cancel_waiting(self) -> int:
        """Drain: deliveries no application holds are withdrawn (they stay unacknowledged)."""
        withdrawn = len(self._waiting)
        while self._waiting:
            pending = self._waiting.popleft()
            pending.batch.settle(pending.index, None)
        return withdrawn

    def cancel_all(self) -> int:
        withdrawn = self.cancel_waiting()
        for stream in self._streams:
            for pending in stream.holding.values():
                pending.batch.settle(pending.index, None)
                withdrawn += 1
            stream.holding.clear()
        self._in_flight = 0
        return withdrawn


def to_deliveries(taken: list[Pending]) -> sidecar_pb2.Deliveries:
    """One stream message for ``taken``. Each delivery is built in place (``add``): building
    them apart and passing the list copies every one, body included."""
    out = sidecar_pb2.Deliveries()
    add = out.deliveries.add
    for pending in taken:
        m = pending.message
        properties = m.properties
        if isinstance(properties, LazyProperties):  # a dict fills the map without Python calls
            properties = properties.as_dict()
        add(
            delivery_id=str(pending.delivery_id),
            topic=m.topic,
            queue_id=m.queue_id,
            queue_offset=m.queue_offset,
            msg_id=properties.get(Property.UNIQ_KEY) or m.msg_id,
            keys=m.keys,
            tags=m.tags or "",
            properties=properties,
            body=m.body,
            reconsume_times=m.reconsume_times,
            born_timestamp_ms=m.born_timestamp_ms,
            store_timestamp_ms=m.store_timestamp_ms,
        )
    return out


_HEADER_PACKED_HOSTS = struct.Struct("!iIIiiqqiq20sq20siqi")
"""The record header (``record.HEADER``) with each host's address and port as one 20-byte field."""
assert _HEADER_PACKED_HOSTS.size == HEADER.size


_PORT = struct.Struct("!I")


@lru_cache(maxsize=4096)
def _packed_host(host: str) -> bytes:
    """A record's host field: the 16-byte address and the port."""
    address, port = encode_host(host)
    return address + _PORT.pack(port)


@lru_cache(maxsize=4096)
def _topic_field(topic: str) -> bytes:
    """A record's topic length and topic."""
    raw = topic.encode()
    return U16.pack(len(raw)) + raw


def to_records(taken: list[Pending]) -> sidecar_pb2.Deliveries:
    """One stream message for ``taken`` as commit-log records (``ConsumeHello.records``).

    Each message is encoded again from its decoded fields (the consumer keeps no record bytes,
    and a retried message shows its original topic), with its properties as the record held
    them: a struct pack and a join a message instead of a protobuf message of twelve fields.
    Topic and hosts, the same for most messages, are encoded once a call."""
    records = []
    append, pack, u16 = records.append, _HEADER_PACKED_HOSTS.pack, U16.pack
    topic = born = stored = None
    for pending in taken:
        m = pending.message
        properties = m.properties
        raw = (
            properties._raw  # the record's own bytes, never parsed here
            if type(properties) is LazyProperties
            else encode_properties(dict(properties))
        )
        if m.topic is not topic:
            topic = m.topic
            topic_field = _topic_field(topic)
        if m.born_host is not born:
            born = m.born_host
            born_field = _packed_host(born)
        if m.store_host is not stored:
            stored = m.store_host
            store_field = _packed_host(stored)
        body = m.body
        header = pack(
            RECORD_FIXED_BYTES - 2 + len(topic_field) + len(raw) + len(body),
            MESSAGE_MAGIC,
            m.body_crc,
            m.queue_id,
            m.flag,
            m.queue_offset,
            m.physical_offset,
            m.sys_flag,
            m.born_timestamp_ms,
            born_field,
            m.store_timestamp_ms,
            store_field,
            m.reconsume_times,
            m.prepared_transaction_offset,
            len(body),
        )
        append(b"".join((header, body, topic_field, u16(len(raw)), raw)))
    return sidecar_pb2.Deliveries(records=records, first_delivery_id=taken[0].delivery_id)
