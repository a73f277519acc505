"""``ReceiveMessage`` with ``auto_renew`` (what push consumers send) through ``orbitmq proxy``:
the proxy keeps the message hidden slice after slice while its client is connected, with the
receipt handle the client got still valid for the ack; once the client is gone (its telemetry
stream closed) the message is released and delivered again soon, with its attempt counted.
Raw protocol calls with the generated stubs (``orbitmq.rocketmq_v2``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from v2kit import V2Cluster, v2_cluster

from orbitmq.client import Message, Producer
from orbitmq.rocketmq_v2 import definition_pb2 as d
from orbitmq.rocketmq_v2 import service_pb2 as s
from orbitmq.rocketmq_v2 import service_pb2_grpc

pytestmark = pytest.mark.timeout(60)

TOPIC = "V2AutoRenew"
GROUP = d.Resource(name="v2-auto-renew")
SLICE_MS = 1_000
FAST_S = 5.0


def metadata(client_id: str) -> tuple[tuple[str, str], ...]:
    return (("x-mq-client-id", client_id),)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[V2Cluster]:
    async with v2_cluster(tmp_path, {"auto_renew_slice_ms": SLICE_MS}) as running:
        async with Producer("v2-renew-producer", running.namesrv.address) as producer:
            await producer.send(Message(TOPIC, b"held"))
        yield running


@pytest.fixture
async def stub(cluster: V2Cluster) -> AsyncIterator[service_pb2_grpc.MessagingServiceStub]:
    async with grpc.aio.insecure_channel(cluster.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


async def connect(stub: service_pb2_grpc.MessagingServiceStub, client_id: str) -> grpc.aio.StreamStreamCall:
    """A push consumer's telemetry stream: while it is open the client counts as connected."""
    call = stub.Telemetry(metadata=metadata(client_id))
    settings = d.Settings(client_type=d.PUSH_CONSUMER, subscription=d.Subscription(group=GROUP))
    await call.write(s.TelemetryCommand(settings=settings))
    assert (await asyncio.wait_for(call.read(), FAST_S)).status.code == d.OK
    return call


async def receive(
    stub: service_pb2_grpc.MessagingServiceStub, client_id: str, poll_ms: int = 0
) -> list[d.Message]:
    request = s.ReceiveMessageRequest(
        group=GROUP,
        message_queue=d.MessageQueue(topic=d.Resource(name=TOPIC), id=-1, broker=d.Broker(name="broker-a")),
        batch_size=4,
        auto_renew=True,
    )
    request.long_polling_timeout.FromMilliseconds(poll_ms)
    call = stub.ReceiveMessage(request, metadata=metadata(client_id), timeout=poll_ms / 1000 + FAST_S)
    return [f.message async for f in call if f.WhichOneof("content") == "message"]


async def test_a_held_message_stays_hidden_and_its_first_handle_acks_it(
    cluster: V2Cluster, stub: service_pb2_grpc.MessagingServiceStub
) -> None:
    telemetry = await connect(stub, "holder@1")
    try:
        (got,) = await receive(stub, "holder@1")
        # four slices pass: without renewals it would be visible again after the first
        assert await receive(stub, "other@1", poll_ms=4 * SLICE_MS) == []
        ack = await stub.AckMessage(
            s.AckMessageRequest(
                group=GROUP,
                topic=d.Resource(name=TOPIC),
                entries=[
                    s.AckMessageEntry(
                        message_id=got.system_properties.message_id,
                        receipt_handle=got.system_properties.receipt_handle,
                    )
                ],
            ),
            metadata=metadata("holder@1"),
            timeout=FAST_S,
        )
        assert ack.status.code == d.OK, ack.status.message
        assert await cluster.metric("orbitmq_proxy_invisibility_renewals_total", outcome="renewed") >= 3
    finally:
        telemetry.cancel()


async def test_a_gone_clients_message_is_released_and_delivered_again(
    cluster: V2Cluster, stub: service_pb2_grpc.MessagingServiceStub
) -> None:
    telemetry = await connect(stub, "leaver@1")
    (got,) = await receive(stub, "leaver@1")
    assert got.system_properties.delivery_attempt == 1
    taker = await connect(stub, "taker@1")  # connected: what it gets is renewed, not released
    try:
        telemetry.cancel()  # the client goes away without acking
        started = time.monotonic()
        again = await receive(stub, "taker@1", poll_ms=10_000)
        assert [(m.body, m.system_properties.delivery_attempt) for m in again] == [(b"held", 2)]
        assert time.monotonic() - started < 4.0
        assert await cluster.metric("orbitmq_proxy_invisibility_renewals_total", outcome="released") == 1
    finally:
        taker.cancel()
