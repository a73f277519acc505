"""The application side of the sidecar: read deliveries, acknowledge them, send messages.

async with SidecarClient("127.0.0.1:7001") as sidecar:
    async for delivery in sidecar.deliveries(app_id="billing-7f9c"):
        handle(delivery.body)
        await delivery.ack()          # or delivery.later() / delivery.suspend()
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from orbitmq.common.credentials import Credentials, signed
from orbitmq.common.properties import check_user_properties
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.common.tls import TlsFiles, open_channel
from orbitmq.common.topics import KEY_SEPARATOR, Property
from orbitmq.sidecar.sends import SidecarSends
from orbitmq.store.record import StoredMessage, decode_all
from orbitmq.v1 import common_pb2, sidecar_pb2, sidecar_pb2_grpc
from orbitmq.v1.sidecar_pb2 import AckStatus

DEFAULT_ADDRESS = "127.0.0.1:7001"


class _Answers:
    """Verdicts given and not yet sent: SUCCESS as numbers (``Acks.succeeded``), others as
    ``Ack`` messages. An answer is an append, and a wake-up only when the sender waits. A
    delivery with a string id came from a sidecar that predates records (it sent a ``Delivery``)
    and would not read ``succeeded``: its every verdict goes as an ``Ack``."""

    __slots__ = ("_wake", "closed", "others", "succeeded")

    def __init__(self) -> None:
        self.succeeded: list[int] = []
        self.others: list[sidecar_pb2.Ack] = []
        self._wake: asyncio.Future[None] | None = None
        self.closed = False

    def close(self) -> None:
        """The stream ended: :meth:`take` returns None, and the request generator ends (gRPC's
        ``cancel`` of a call that already failed leaves the task reading it waiting here for
        good, one more at every reconnection)."""
        self.closed = True
        self._given()

    def _given(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def success(self, delivery_id: int | str) -> None:
        if isinstance(delivery_id, str):
            self.other(delivery_id, AckStatus.SUCCESS)
            return
        self.succeeded.append(delivery_id)
        if self._wake is not None:
            self._given()

    def other(self, delivery_id: int | str, status: int) -> None:
        self.others.append(sidecar_pb2.Ack(delivery_id=str(delivery_id), status=status))
        self._given()

    async def take(self) -> sidecar_pb2.ConsumeRequest | None:
        """Every answer given so far (at least one) as one request; None once closed."""
        while not (self.succeeded or self.others):
            if self.closed:
                return None
            self._wake = asyncio.get_running_loop().create_future()
            try:
                await self._wake
            finally:
                self._wake = None
        request = sidecar_pb2.ConsumeRequest(
            acks=sidecar_pb2.Acks(acks=self.others, succeeded=self.succeeded)
        )
        self.succeeded, self.others = [], []
        return request


class Delivery:
    """One message from the sidecar; answer it exactly once."""

    __slots__ = ("_answers", "_id", "_message", "answered")

    def __init__(
        self, message: StoredMessage | sidecar_pb2.Delivery, delivery_id: int | str, answers: _Answers
    ) -> None:
        """``message``: a decoded record, or the ``Delivery`` an older sidecar sent (it has the
        same fields, its ``msg_id`` already the unique key's) with its own id, answered by ``Ack``."""
        self._message = message
        self._id = delivery_id
        self._answers = answers
        self.answered = False

    @property
    def delivery_id(self) -> str:
        return str(self._id)

    @property
    def topic(self) -> str:
        return self._message.topic

    @property
    def queue_id(self) -> int:
        return self._message.queue_id

    @property
    def queue_offset(self) -> int:
        return self._message.queue_offset

    @property
    def msg_id(self) -> str:
        """The producer's unique key (RocketMQ's client message id), else the offset message id."""
        return self._message.properties.get(Property.UNIQ_KEY) or self._message.msg_id

    @property
    def keys(self) -> list[str]:
        return list(self._message.keys)

    @property
    def tags(self) -> str:
        return self._message.tags or ""

    @property
    def properties(self) -> dict[str, str]:
        """Every property of the message, system ones (``TAGS``, ``UNIQ_KEY``, ...) included."""
        return dict(self._message.properties)

    @property
    def body(self) -> bytes:
        return self._message.body

    @property
    def reconsume_times(self) -> int:
        return self._message.reconsume_times

    @property
    def born_timestamp_ms(self) -> int:
        return self._message.born_timestamp_ms

    @property
    def store_timestamp_ms(self) -> int:
        return self._message.store_timestamp_ms

    def _answer(self) -> None:
        if self.answered:
            raise RuntimeError(f"delivery {self._id} was already answered")
        self.answered = True

    async def ack(self) -> None:
        """Consumed: the offset may move past it."""
        self._answer()
        self._answers.success(self._id)

    async def later(self) -> None:
        """Retry it later (concurrent mode: through the group's retry topic)."""
        self._answer()
        self._answers.other(self._id, AckStatus.LATER)

    async def suspend(self) -> None:
        """Orderly mode: pause this queue a moment, then get the same message again."""
        self._answer()
        self._answers.other(self._id, AckStatus.SUSPEND)


class SidecarClient:
    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        tls: TlsFiles | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        """``tls``: the sidecar's CA (and this application's certificate under mutual TLS) when
        the sidecar serves TLS; plaintext without, whatever ``ORBITMQ_TLS_*`` says (those are
        the cluster's, and an application usually reaches its sidecar over localhost).
        ``credentials``: what calls are signed with, for a sidecar with auth on (the sidecar's
        own users; never read from ``ORBITMQ_ACCESS_KEY``, the cluster's, as ``tls`` is not)."""
        self.address = address
        self._channel = signed(open_channel(address, tls, GRPC_OPTIONS), credentials)
        self._stub = sidecar_pb2_grpc.SidecarStub(self._channel)
        self.sends = SidecarSends(self._stub)
        """This client's sends: :attr:`SidecarSends.calls` made for its :attr:`SidecarSends.messages`."""

    async def __aenter__(self) -> SidecarClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.sends.close()
        await self._channel.close()

    async def deliveries(self, *, app_id: str = "", max_in_flight: int = 0) -> AsyncIterator[Delivery]:
        """Deliveries until the stream ends; unanswered ones are redelivered after it does.

        The stream carries the messages as commit-log records, decoded here in C a stream
        message at a time, and SUCCESS verdicts as packed numbers."""
        answers = _Answers()
        hello = sidecar_pb2.ConsumeRequest(
            hello=sidecar_pb2.ConsumeHello(app_id=app_id, max_in_flight=max_in_flight, records=True)
        )

        async def requests() -> AsyncIterator[sidecar_pb2.ConsumeRequest]:
            yield hello
            while (request := await answers.take()) is not None:  # answers given meanwhile travel together
                yield request

        call = self._stub.Consume(requests())
        try:
            async for batch in call:
                first = batch.first_delivery_id
                for index, message in enumerate(decode_all(batch.records, check_crc=False)):
                    yield Delivery(message, first + index, answers)
                # a sidecar from before records ignores the hello's ask and sends Delivery messages
                for proto in batch.deliveries:
                    yield Delivery(proto, proto.delivery_id, answers)
        finally:
            answers.close()
            call.cancel()

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: list[str] | None = None,
        properties: dict[str, str] | None = None,
        sharding_key: str | None = None,
        delay_level: int = 0,
    ) -> sidecar_pb2.SidecarSendResponse:
        """Send through the sidecar's producer (which retries through a failover); sends made
        while others are on their way travel together (:mod:`orbitmq.sidecar.sends`). A send
        that failed for good raises :class:`~orbitmq.common.rpc.RpcFailure` with the reason and
        a one-line message naming the topic and the broker (an unreachable sidecar: the gRPC
        error). ``properties`` are user properties: a system property's name (``TAGS``,
        ``UNIQ_KEY``, ...) raises
        :class:`~orbitmq.common.properties.SystemPropertyError` (a ``ValueError``) before
        anything is sent; tags, keys and the delay level have their own arguments."""
        props = dict(properties or {})
        check_user_properties(props)
        if tags:
            props[Property.TAGS] = tags
        if keys:
            props[Property.KEYS] = KEY_SEPARATOR.join(keys)
        if delay_level:
            props[Property.DELAY] = str(delay_level)
        request = sidecar_pb2.SidecarSendRequest(
            message=common_pb2.Message(topic=topic, body=body, properties=props),
            sharding_key=sharding_key or "",
        )
        return await self.sends.send(request)

    async def pause(self) -> None:
        await self._stub.Pause(sidecar_pb2.PauseRequest())

    async def resume(self) -> None:
        await self._stub.Resume(sidecar_pb2.ResumeRequest())
