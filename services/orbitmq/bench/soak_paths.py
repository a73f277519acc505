"""The three ways ``orbitmq bench soak`` produces and consumes, each a :class:`Path`.

* ``client`` — orbitmq's Python ``Producer`` and a ``PushConsumer`` straight to the broker;
* ``proxy`` — ``apache.rocketmq.v2`` through ``orbitmq proxy``: ``SendMessage`` from a producer
  with its Telemetry stream open, ``ReceiveMessage`` + ``AckMessage`` from a simple consumer
  (the generated stubs, so the figures are the proxy's, not a client library's);
* ``sidecar`` — ``SidecarClient.send`` and ``SidecarClient.deliveries`` through
  ``orbitmq sidecar``, which consumes the path's topic for its group.

Every message carries its path's sequence number and the wall-clock microseconds of its send in
user properties; a consumed message reports both, so the soak tells loss (an acknowledged
sequence number never consumed) and end-to-end latency without any state shared with the
servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Protocol

import grpc

from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_types import ConsumerSettings, ConsumeStatus
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.rocketmq_v2 import definition_pb2 as d
from orbitmq.rocketmq_v2 import service_pb2 as s
from orbitmq.rocketmq_v2 import service_pb2_grpc
from orbitmq.sidecar.client import SidecarClient
from orbitmq.store.record import StoredMessage

SEQ = "soak_seq"
SENT_US = "soak_sent_us"
BODY = bytes(1024)
RECEIVERS = 8
"""Receives outstanding on the proxy path."""
RECEIVE_BATCH = 32
INVISIBLE_S = 60
LONG_POLL_S = 5

Consumed = Callable[[int, int], None]
"""Called with (sequence number, microseconds the message was sent at) for each delivery."""


class SoakPath(Protocol):
    name: str

    async def start(self, consumed: Consumed) -> None: ...

    async def send(self, seq: int) -> None:
        """Send one message; returns once it is acknowledged (raises when it is not)."""
        ...

    async def close(self) -> None: ...


def _properties(seq: int) -> dict[str, str]:
    return {SEQ: str(seq), SENT_US: str(time.time_ns() // 1000)}


def _report(consumed: Consumed, properties: dict[str, str] | object) -> None:
    props = properties if isinstance(properties, dict) else dict(properties)  # type: ignore[call-overload]
    if SEQ in props:
        consumed(int(props[SEQ]), int(props[SENT_US]))


class ClientPath:
    """orbitmq's own producer and push consumer."""

    name = "client"

    def __init__(self, namesrv: str, topic: str, heartbeat_ms: int = 30_000) -> None:
        self._topic = topic
        self._producer = Producer("soak-client", namesrv, heartbeat_ms=heartbeat_ms)
        self._namesrv = namesrv
        self._heartbeat_ms = heartbeat_ms
        self._consumer: PushConsumer | None = None

    async def start(self, consumed: Consumed) -> None:
        def listener(messages: list[StoredMessage]) -> ConsumeStatus:
            for message in messages:
                _report(consumed, message.properties)
            return ConsumeStatus.CONSUME_SUCCESS

        self._consumer = PushConsumer(
            "soak-client",
            self._namesrv,
            listener=listener,
            settings=ConsumerSettings(heartbeat_ms=self._heartbeat_ms),
        )
        self._consumer.subscribe(self._topic)
        await self._consumer.start()
        await self._producer.start()

    async def send(self, seq: int) -> None:
        await self._producer.send(Message(self._topic, BODY, properties=_properties(seq)))

    async def close(self) -> None:
        await self._producer.close()
        if self._consumer is not None:
            await self._consumer.close()


class ProxyPath:
    """``apache.rocketmq.v2`` through the proxy, with the generated stubs."""

    name = "proxy"

    def __init__(self, endpoint: str, topic: str, broker_name: str) -> None:
        self._endpoint = endpoint
        self._topic = topic
        self._broker_name = broker_name
        self._channel = grpc.aio.insecure_channel(endpoint, options=GRPC_OPTIONS)
        self._stub = service_pb2_grpc.MessagingServiceStub(self._channel)
        self._producer_id = (("x-mq-client-id", f"soak-producer@{uuid.uuid4().hex[:8]}"),)
        self._consumer_id = (("x-mq-client-id", f"soak-consumer@{uuid.uuid4().hex[:8]}"),)
        self._telemetry: list[grpc.aio.StreamStreamCall] = []
        self._receivers: list[asyncio.Task[None]] = []

    async def _open_telemetry(self, metadata: tuple[tuple[str, str], ...], settings: d.Settings) -> None:
        call = self._stub.Telemetry(metadata=metadata)
        await call.write(s.TelemetryCommand(settings=settings))
        reply = await asyncio.wait_for(call.read(), 10)
        if reply.status.code != d.OK:
            raise RuntimeError(f"proxy telemetry refused: {reply.status.message}")
        self._telemetry.append(call)

    async def start(self, consumed: Consumed) -> None:
        topic = d.Resource(name=self._topic)
        await self._open_telemetry(
            self._producer_id, d.Settings(client_type=d.PRODUCER, publishing=d.Publishing(topics=[topic]))
        )
        group = d.Resource(name="soak-proxy")
        await self._open_telemetry(
            self._consumer_id,
            d.Settings(client_type=d.SIMPLE_CONSUMER, subscription=d.Subscription(group=group)),
        )
        self._receivers = [asyncio.create_task(self._receive(consumed)) for _ in range(RECEIVERS)]

    async def send(self, seq: int) -> None:
        message = d.Message(topic=d.Resource(name=self._topic), body=BODY, user_properties=_properties(seq))
        message.system_properties.message_id = uuid.uuid4().hex.upper()
        message.system_properties.message_type = d.NORMAL
        reply = await self._stub.SendMessage(
            s.SendMessageRequest(messages=[message]), metadata=self._producer_id, timeout=10
        )
        if reply.status.code != d.OK:
            raise RuntimeError(f"proxy send: {d.Code.Name(reply.status.code)} {reply.status.message}")

    async def _receive(self, consumed: Consumed) -> None:
        group, topic = d.Resource(name="soak-proxy"), d.Resource(name=self._topic)
        request = s.ReceiveMessageRequest(
            group=group,
            message_queue=d.MessageQueue(topic=topic, id=-1, broker=d.Broker(name=self._broker_name)),
            filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
            batch_size=RECEIVE_BATCH,
        )
        request.invisible_duration.FromSeconds(INVISIBLE_S)
        request.long_polling_timeout.FromSeconds(LONG_POLL_S)
        while True:
            try:
                messages = [
                    frame.message
                    async for frame in self._stub.ReceiveMessage(
                        request, metadata=self._consumer_id, timeout=LONG_POLL_S + 25
                    )
                    if frame.HasField("message")
                ]
                if not messages:
                    continue
                entries = [
                    s.AckMessageEntry(
                        message_id=m.system_properties.message_id,
                        receipt_handle=m.system_properties.receipt_handle,
                    )
                    for m in messages
                ]
                reply = await self._stub.AckMessage(
                    s.AckMessageRequest(group=group, topic=topic, entries=entries),
                    metadata=self._consumer_id,
                    timeout=10,
                )
                for message, entry in zip(messages, reply.entries, strict=False):
                    if entry.status.code == d.OK:  # unacked ones come back after INVISIBLE_S
                        _report(consumed, message.user_properties)
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.5)

    async def close(self) -> None:
        for task in self._receivers:
            task.cancel()
        for task in self._receivers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for metadata in (self._producer_id, self._consumer_id):
            with contextlib.suppress(grpc.aio.AioRpcError):
                await self._stub.NotifyClientTermination(
                    s.NotifyClientTerminationRequest(), metadata=metadata, timeout=5
                )
        for call in self._telemetry:
            call.cancel()
        await self._channel.close()


class SidecarPath:
    """The sidecar's ``Send`` and its delivery stream (the sidecar consumes the topic)."""

    name = "sidecar"

    def __init__(self, address: str, topic: str) -> None:
        self._topic = topic
        self._client = SidecarClient(address)
        self._deliveries: asyncio.Task[None] | None = None

    async def start(self, consumed: Consumed) -> None:
        async def take() -> None:
            async for delivery in self._client.deliveries(app_id="soak", max_in_flight=256):
                properties = delivery.properties
                await delivery.ack()
                _report(consumed, properties)

        self._deliveries = asyncio.create_task(take())

    async def send(self, seq: int) -> None:
        await self._client.send(self._topic, BODY, properties=_properties(seq))

    async def close(self) -> None:
        if self._deliveries is not None:
            self._deliveries.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._deliveries
        await self._client.close()
