"""Clients that come and go: what ``orbitmq bench soak --churn N`` does to the servers' tables.

Each short-lived client opens a channel of its own, announces itself, does one thing and goes,
as an application that starts, sends or reads once and exits does:

* broker producers: ``Heartbeat`` (producer group), a ``Session`` stream, one ``SendMessage``;
* broker consumers: ``Heartbeat`` (consumer group with a subscription), ``LockBatch`` of one
  queue (orderly consumers do), one ``PullMessage``;
* proxy producers: a ``Telemetry`` stream with its settings, one ``SendMessage``;
* proxy consumers: a ``Telemetry`` stream, one ``ReceiveMessage`` with ``auto_renew`` (the proxy
  keeps what it hands out hidden while the client lives), its ``AckMessage`` (a silent leaver
  acks nothing: the proxy releases its message when it is gone);
* sidecar applications: a delivery stream, one delivery acknowledged, one ``Send``;
* orbitmq's own ``Producer`` in this process: started (routes, heartbeat, session), one send,
  closed (it always closes: what it leaves behind is this process's, which the soak watches).

Nine in ten leave politely (``UnregisterClient``, ``UnlockBatch``, ``NotifyClientTermination``,
streams closed); one in ten just vanishes (channel closed mid-stream, nothing said), which
only the servers' expiry sweeps clean up. Groups are fixed, so each label set the churn adds
to a metrics page appears once, with its first client.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import Awaitable, Callable

import grpc

from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.rocketmq_v2 import definition_pb2 as d
from orbitmq.rocketmq_v2 import service_pb2 as s
from orbitmq.rocketmq_v2 import service_pb2_grpc
from orbitmq.sidecar.client import SidecarClient
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2

PRODUCER_GROUP = "soak-churn-producers"
CONSUMER_GROUP = "soak-churn-consumers"
PROXY_GROUP = "soak-churn-proxy"
CONCURRENCY = 16
VANISH_EVERY = 10
"""One client in this many leaves without a word."""
CALL_S = 10.0


class Churn:
    """Runs short-lived clients of every kind in turn against one broker, proxy and sidecar."""

    def __init__(
        self, namesrv: str, broker: str, broker_name: str, proxy: str, sidecar: str, topic: str
    ) -> None:
        self._namesrv = namesrv
        self._broker = broker
        self._broker_name = broker_name
        self._proxy = proxy
        self._sidecar = sidecar
        self._topic = topic
        self.done = 0
        self.failed: list[str] = []

    async def run(self, clients: int, first: int = 0) -> None:
        """``clients`` come and go, ``CONCURRENCY`` at a time (numbered from ``first``: ids
        stay unique over runs)."""
        kinds: list[Callable[[int, bool], Awaitable[None]]] = [
            self._broker_producer,
            self._broker_consumer,
            self._proxy_producer,
            self._proxy_consumer,
            self._sidecar_app,
            self._python_producer,
        ]
        numbers = iter(range(first, first + clients))

        async def worker() -> None:
            for n in numbers:
                kind = kinds[n % len(kinds)]
                vanish = (n // len(kinds)) % VANISH_EVERY == VANISH_EVERY - 1  # of every kind
                try:
                    await asyncio.wait_for(kind(n, vanish), 4 * CALL_S)
                except (grpc.aio.AioRpcError, TimeoutError, RuntimeError) as error:
                    if len(self.failed) < 20:
                        self.failed.append(f"{kind.__name__} #{n}: {error!r}"[:300])
                self.done += 1

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))

    async def _broker_producer(self, n: int, vanish: bool) -> None:
        client_id = f"churn-p-{n}@{uuid.uuid4().hex[:6]}"
        channel = grpc.aio.insecure_channel(self._broker, options=GRPC_OPTIONS)
        try:
            stub = broker_pb2_grpc.BrokerStub(channel)
            await stub.Heartbeat(
                broker_pb2.HeartbeatRequest(
                    client_id=client_id, producers=[broker_pb2.ProducerData(group=PRODUCER_GROUP)]
                ),
                timeout=CALL_S,
            )
            session = stub.Session()
            await session.write(
                broker_pb2.ClientEvent(
                    hello=broker_pb2.SessionHello(client_id=client_id, producer_groups=[PRODUCER_GROUP])
                )
            )
            reply = await stub.SendMessage(
                broker_pb2.SendMessageRequest(
                    producer_group=PRODUCER_GROUP,
                    topic=self._topic,
                    queue_id=n % 4,
                    messages=[common_pb2.Message(topic=self._topic, body=b"churn")],
                ),
                timeout=CALL_S,
            )
            if reply.status != broker_pb2.SEND_OK:
                raise RuntimeError(f"send status {reply.status}")
            if not vanish:
                await session.done_writing()
                await stub.UnregisterClient(
                    broker_pb2.UnregisterClientRequest(client_id=client_id, producer_group=PRODUCER_GROUP),
                    timeout=CALL_S,
                )
            session.cancel()
        finally:
            await channel.close()

    async def _broker_consumer(self, n: int, vanish: bool) -> None:
        client_id = f"churn-c-{n}@{uuid.uuid4().hex[:6]}"
        channel = grpc.aio.insecure_channel(self._broker, options=GRPC_OPTIONS)
        try:
            stub = broker_pb2_grpc.BrokerStub(channel)
            subscription = common_pb2.Subscription(topic=self._topic, expression="*")
            await stub.Heartbeat(
                broker_pb2.HeartbeatRequest(
                    client_id=client_id,
                    consumers=[
                        broker_pb2.ConsumerData(
                            group=CONSUMER_GROUP, subscriptions=[subscription], orderly=True
                        )
                    ],
                ),
                timeout=CALL_S,
            )
            queue = common_pb2.MessageQueue(topic=self._topic, broker_name=self._broker_name, queue_id=n % 4)
            await stub.LockBatch(
                broker_pb2.LockBatchRequest(
                    consumer_group=CONSUMER_GROUP, client_id=client_id, queues=[queue]
                ),
                timeout=CALL_S,
            )
            await stub.PullMessage(
                broker_pb2.PullMessageRequest(
                    consumer_group=CONSUMER_GROUP,
                    topic=self._topic,
                    queue_id=n % 4,
                    queue_offset=0,
                    max_msg_nums=1,
                    subscription=subscription,
                    commit_offset=-1,
                ),
                timeout=CALL_S,
            )
            if not vanish:
                await stub.UnlockBatch(
                    broker_pb2.UnlockBatchRequest(
                        consumer_group=CONSUMER_GROUP, client_id=client_id, queues=[queue]
                    ),
                    timeout=CALL_S,
                )
                await stub.UnregisterClient(
                    broker_pb2.UnregisterClientRequest(client_id=client_id, consumer_group=CONSUMER_GROUP),
                    timeout=CALL_S,
                )
        finally:
            await channel.close()

    async def _proxy_client(
        self, client_id: str, settings: d.Settings, vanish: bool, work: Callable[..., Awaitable[None]]
    ) -> None:
        metadata = (("x-mq-client-id", client_id),)
        channel = grpc.aio.insecure_channel(self._proxy, options=GRPC_OPTIONS)
        try:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            telemetry = stub.Telemetry(metadata=metadata)
            await telemetry.write(s.TelemetryCommand(settings=settings))
            reply = await asyncio.wait_for(telemetry.read(), CALL_S)
            if reply.status.code != d.OK:
                raise RuntimeError(f"telemetry: {reply.status.message}")
            await work(stub, metadata)
            if not vanish:
                await stub.NotifyClientTermination(
                    s.NotifyClientTerminationRequest(), metadata=metadata, timeout=CALL_S
                )
                await telemetry.done_writing()
            telemetry.cancel()
        finally:
            await channel.close()

    async def _proxy_producer(self, n: int, vanish: bool) -> None:
        topic = d.Resource(name=self._topic)

        async def send(stub: service_pb2_grpc.MessagingServiceStub, metadata: tuple[tuple[str, str]]) -> None:
            message = d.Message(topic=topic, body=b"churn")
            message.system_properties.message_id = uuid.uuid4().hex.upper()
            message.system_properties.message_type = d.NORMAL
            reply = await stub.SendMessage(
                s.SendMessageRequest(messages=[message]), metadata=metadata, timeout=CALL_S
            )
            if reply.status.code != d.OK:
                raise RuntimeError(f"proxy send: {reply.status.message}")

        settings = d.Settings(client_type=d.PRODUCER, publishing=d.Publishing(topics=[topic]))
        await self._proxy_client(f"churn-v2p-{n}@{uuid.uuid4().hex[:6]}", settings, vanish, send)

    async def _proxy_consumer(self, n: int, vanish: bool) -> None:
        group, topic = d.Resource(name=PROXY_GROUP), d.Resource(name=self._topic)

        async def receive(
            stub: service_pb2_grpc.MessagingServiceStub, metadata: tuple[tuple[str, str]]
        ) -> None:
            request = s.ReceiveMessageRequest(
                group=group,
                message_queue=d.MessageQueue(topic=topic, id=-1, broker=d.Broker(name=self._broker_name)),
                filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
                batch_size=1,
                auto_renew=True,
            )
            request.long_polling_timeout.FromMilliseconds(100)
            got = [
                frame.message
                async for frame in stub.ReceiveMessage(request, metadata=metadata, timeout=CALL_S)
                if frame.HasField("message")
            ]
            if got and not vanish:  # a silent one's message is released when it is gone
                entries = [
                    s.AckMessageEntry(
                        message_id=m.system_properties.message_id,
                        receipt_handle=m.system_properties.receipt_handle,
                    )
                    for m in got
                ]
                await stub.AckMessage(
                    s.AckMessageRequest(group=group, topic=topic, entries=entries),
                    metadata=metadata,
                    timeout=CALL_S,
                )

        settings = d.Settings(client_type=d.PUSH_CONSUMER, subscription=d.Subscription(group=group))
        await self._proxy_client(f"churn-v2c-{n}@{uuid.uuid4().hex[:6]}", settings, vanish, receive)

    async def _sidecar_app(self, n: int, vanish: bool) -> None:
        client = SidecarClient(self._sidecar)
        try:
            await client.send(self._topic, b"churn")
            if vanish:
                return
            deliveries = client.deliveries(app_id=f"churn-{n}", max_in_flight=1)
            with contextlib.suppress(TimeoutError):
                delivery = await asyncio.wait_for(anext(deliveries), 0.2)
                await delivery.ack()
            await deliveries.aclose()
        finally:
            await client.close()

    async def _python_producer(self, n: int, vanish: bool) -> None:
        del vanish  # in this process a client that never closes is this process's leak
        async with Producer(PRODUCER_GROUP, self._namesrv) as producer:
            await producer.send(Message(self._topic, b"churn"))


KINDS = (
    "broker_producer",
    "broker_consumer",
    "proxy_producer",
    "proxy_consumer",
    "sidecar_app",
    "python_producer",
)


def kinds_of(clients: int) -> dict[str, int]:
    """How many clients of each kind :meth:`Churn.run` starts for ``clients``."""
    names = KINDS
    counts = dict.fromkeys(names, 0)
    for name, _ in zip(itertools.cycle(names), range(clients), strict=False):
        counts[name] += 1
    return counts
