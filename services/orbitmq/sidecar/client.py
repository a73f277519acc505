"""The application side of the sidecar: read deliveries, acknowledge them, send messages.

async with SidecarClient("127.0.0.1:7001") as sidecar:
    async for delivery in sidecar.deliveries(app_id="billing-7f9c"):
        handle(delivery.body)
        await delivery.ack()          # or delivery.later() / delivery.suspend()
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from orbitmq.common.properties import check_user_properties
from orbitmq.common.rpc import failure_of
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.common.topics import KEY_SEPARATOR, Property
from orbitmq.v1 import common_pb2, sidecar_pb2, sidecar_pb2_grpc
from orbitmq.v1.sidecar_pb2 import AckStatus

DEFAULT_ADDRESS = "127.0.0.1:7001"


class Delivery:
    """One message from the sidecar; answer it exactly once."""

    def __init__(
        self, proto: sidecar_pb2.Delivery, answers: asyncio.Queue[sidecar_pb2.ConsumeRequest]
    ) -> None:
        self.proto = proto
        self._answers = answers
        self.answered = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.proto, name)

    async def _answer(self, status: int) -> None:
        if self.answered:
            raise RuntimeError(f"delivery {self.proto.delivery_id} was already answered")
        self.answered = True
        self._answers.put_nowait(sidecar_pb2.Ack(delivery_id=self.proto.delivery_id, status=status))

    async def ack(self) -> None:
        """Consumed: the offset may move past it."""
        await self._answer(AckStatus.SUCCESS)

    async def later(self) -> None:
        """Retry it later (concurrent mode: through the group's retry topic)."""
        await self._answer(AckStatus.LATER)

    async def suspend(self) -> None:
        """Orderly mode: pause this queue a moment, then get the same message again."""
        await self._answer(AckStatus.SUSPEND)


class SidecarClient:
    def __init__(self, address: str = DEFAULT_ADDRESS) -> None:
        self.address = address
        self._channel = grpc.aio.insecure_channel(address, options=GRPC_OPTIONS)
        self._stub = sidecar_pb2_grpc.SidecarStub(self._channel)

    async def __aenter__(self) -> SidecarClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    async def deliveries(self, *, app_id: str = "", max_in_flight: int = 0) -> AsyncIterator[Delivery]:
        """Deliveries until the stream ends; unanswered ones are redelivered after it does."""
        answers: asyncio.Queue[sidecar_pb2.Ack] = asyncio.Queue()
        hello = sidecar_pb2.ConsumeRequest(
            hello=sidecar_pb2.ConsumeHello(app_id=app_id, max_in_flight=max_in_flight)
        )

        async def requests() -> AsyncIterator[sidecar_pb2.ConsumeRequest]:
            yield hello
            while True:  # answers given meanwhile travel together
                acks = [await answers.get()]
                while not answers.empty():
                    acks.append(answers.get_nowait())
                yield sidecar_pb2.ConsumeRequest(acks=sidecar_pb2.Acks(acks=acks))

        call = self._stub.Consume(requests())
        try:
            async for batch in call:
                for proto in batch.deliveries:
                    yield Delivery(proto, answers)
        finally:
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
        """Send through the sidecar's producer (which retries through a failover). A send that
        failed for good raises :class:`~orbitmq.common.rpc.RpcFailure` with the reason and a
        one-line message naming the topic and the broker. ``properties`` are user properties: a
        system property's name (``TAGS``, ``UNIQ_KEY``, ...) raises
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
        try:
            return await self._stub.Send(request)
        except grpc.aio.AioRpcError as error:
            failure = failure_of(error)
            if failure is None:  # the sidecar itself is unreachable: the gRPC error says so
                raise
            raise failure from None

    async def pause(self) -> None:
        await self._stub.Pause(sidecar_pb2.PauseRequest())

    async def resume(self) -> None:
        await self._stub.Resume(sidecar_pb2.ResumeRequest())
