"""The v2 offset RPCs through ``orbitmq proxy`` (RocketMQ 5's pull consumers use them; the
official Python client has no pull consumer, so the generated stubs ``orbitmq.rocketmq_v2`` are
the client here): QueryOffset (BEGINNING, END, TIMESTAMP), PullMessage (status, messages,
next_offset; long polling woken by a send), UpdateOffset and GetOffset (the group's committed
offset, the same one orbitmq's own consumers and admin tools see), and their error codes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from v2kit import V2Cluster, v2_cluster

from orbitmq.client import Message, Producer
from orbitmq.client.producer import WriteQueue
from orbitmq.rocketmq_v2 import definition_pb2 as d
from orbitmq.rocketmq_v2 import service_pb2 as s
from orbitmq.rocketmq_v2 import service_pb2_grpc
from orbitmq.v1 import broker_pb2

pytestmark = pytest.mark.timeout(60)

CLIENT = (("x-mq-client-id", "v2-pull-client@1"),)
TOPIC = "V2Offsets"
GROUP = d.Resource(name="v2-pull")
FAST_S = 5.0


def queue(queue_id: int = 0, broker: str = "broker-a", topic: str = TOPIC) -> d.MessageQueue:
    return d.MessageQueue(topic=d.Resource(name=topic), id=queue_id, broker=d.Broker(name=broker))


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[V2Cluster]:
    async with v2_cluster(tmp_path) as running:
        yield running


@pytest.fixture
async def stub(cluster: V2Cluster) -> AsyncIterator[service_pb2_grpc.MessagingServiceStub]:
    async with grpc.aio.insecure_channel(cluster.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


async def send(cluster: V2Cluster, bodies: list[bytes], queue_id: int = 0, tags: str | None = None) -> None:
    place = WriteQueue("broker-a", queue_id, cluster.broker.broker.address)
    async with Producer("v2-offsets-producer", cluster.namesrv.address) as producer:
        for body in bodies:
            await producer.send(Message(TOPIC, body, tags=tags, properties={"k": "v"}), queue=place)


async def pull(
    stub: service_pb2_grpc.MessagingServiceStub, offset: int, batch: int = 32, poll_ms: int = 0, **kw: object
) -> tuple[d.Status, list[d.Message], int | None]:
    request = s.PullMessageRequest(group=GROUP, message_queue=queue(), offset=offset, batch_size=batch, **kw)
    if poll_ms:
        request.long_polling_timeout.FromMilliseconds(poll_ms)
    frames = [f async for f in stub.PullMessage(request, metadata=CLIENT, timeout=poll_ms / 1000 + FAST_S)]
    kinds = [f.WhichOneof("content") for f in frames]
    assert kinds[0] == "status" and all(k == "message" for k in kinds[1:-1]), kinds
    next_offset = frames[-1].next_offset if kinds[-1] == "next_offset" else None
    return frames[0].status, [f.message for f in frames[1:-1]], next_offset


async def test_query_offset_beginning_end_and_by_timestamp(
    cluster: V2Cluster, stub: service_pb2_grpc.MessagingServiceStub
) -> None:
    """QueryOffset: BEGINNING is the queue's first offset, END the next one to be written,
    TIMESTAMP the first message stored at or after the time."""
    await send(cluster, [b"a0", b"a1"])
    await asyncio.sleep(0.05)
    split_ms = int(time.time() * 1000)
    await asyncio.sleep(0.05)
    await send(cluster, [b"b0"])

    async def query(policy: int, at_ms: int | None = None) -> s.QueryOffsetResponse:
        request = s.QueryOffsetRequest(message_queue=queue(), query_offset_policy=policy)  # type: ignore[arg-type]
        if at_ms is not None:
            request.timestamp.FromMilliseconds(at_ms)
        return await stub.QueryOffset(request, metadata=CLIENT, timeout=FAST_S)

    begin, end, at = await asyncio.gather(query(d.BEGINNING), query(d.END), query(d.TIMESTAMP, split_ms))
    assert [(r.status.code, r.offset) for r in (begin, end, at)] == [(d.OK, 0), (d.OK, 3), (d.OK, 2)]
    missing = await query(d.TIMESTAMP)
    assert missing.status.code == d.BAD_REQUEST and "timestamp" in missing.status.message


async def test_pull_returns_messages_and_next_offset_and_long_polls_until_a_send(
    cluster: V2Cluster, stub: service_pb2_grpc.MessagingServiceStub
) -> None:
    """PullMessage: OK + the messages from the offset (bodies, properties, queue offsets as
    stored) + next_offset; at the end MESSAGE_NOT_FOUND + the same next_offset; a long poll is
    answered as soon as a message arrives, not at its timeout."""
    await send(cluster, [b"m0", b"m1", b"m2"])
    status, messages, next_offset = await pull(stub, 0, batch=2)
    assert status.code == d.OK
    assert [(m.body, m.system_properties.queue_offset, m.user_properties["k"]) for m in messages] == [
        (b"m0", 0, "v"),
        (b"m1", 1, "v"),
    ]
    assert all(m.system_properties.message_id and not m.system_properties.receipt_handle for m in messages)
    assert next_offset == 2
    status, messages, next_offset = await pull(stub, 2)
    assert (status.code, [m.body for m in messages], next_offset) == (d.OK, [b"m2"], 3)
    status, messages, next_offset = await pull(stub, 3)
    assert (status.code, messages, next_offset) == (d.MESSAGE_NOT_FOUND, [], 3)

    started = time.monotonic()
    held = asyncio.create_task(pull(stub, 3, poll_ms=10_000))
    await asyncio.sleep(0.5)
    assert not held.done()
    await send(cluster, [b"m3"])
    status, messages, next_offset = await asyncio.wait_for(held, FAST_S)
    assert (status.code, [m.body for m in messages], next_offset) == (d.OK, [b"m3"], 4)
    assert time.monotonic() - started < 5.0


async def test_pull_filters_by_tag_and_refuses_bad_offsets_and_queues(
    cluster: V2Cluster, stub: service_pb2_grpc.MessagingServiceStub
) -> None:
    """A tag filter leaves the others out (next_offset still moves past them); an offset past
    the end is ILLEGAL_OFFSET with the offset to go on from; an unknown queue, topic or a
    negative offset are refused with the protocol's codes and a message naming the value."""
    await send(cluster, [b"red"], tags="red")
    await send(cluster, [b"blue"], tags="blue")
    status, messages, next_offset = await pull(
        stub, 0, filter_expression=d.FilterExpression(type=d.TAG, expression="blue")
    )
    assert (status.code, [m.body for m in messages], next_offset) == (d.OK, [b"blue"], 2)
    assert messages[0].system_properties.tag == "blue"

    status, _, next_offset = await pull(stub, 10)  # past the end: the broker's correction (min, as min = 0)
    assert status.code == d.ILLEGAL_OFFSET and "offset 10" in status.message and next_offset == 0

    async def refused(request: s.PullMessageRequest) -> d.Status:
        frames = [f async for f in stub.PullMessage(request, metadata=CLIENT, timeout=FAST_S)]
        assert len(frames) == 1
        return frames[0].status

    bad = await refused(s.PullMessageRequest(group=GROUP, message_queue=queue(), offset=-1, batch_size=1))
    assert bad.code == d.ILLEGAL_OFFSET and "-1" in bad.message
    bad = await refused(s.PullMessageRequest(group=GROUP, message_queue=queue(9), batch_size=1))
    assert bad.code == d.BAD_REQUEST and "queue id 9" in bad.message
    bad = await refused(s.PullMessageRequest(group=GROUP, message_queue=queue(topic="V2Nope"), batch_size=1))
    assert bad.code == d.TOPIC_NOT_FOUND and "V2Nope" in bad.message
    bad = await refused(s.PullMessageRequest(group=GROUP, message_queue=queue(), batch_size=0))
    assert bad.code == d.BAD_REQUEST and "batch_size 0" in bad.message


async def test_update_and_get_offset_are_the_groups_committed_offset(
    cluster: V2Cluster, stub: service_pb2_grpc.MessagingServiceStub
) -> None:
    """UpdateOffset commits the group's offset (orbitmq's own offset table: the broker and
    ``admin group progress`` see it); GetOffset reads it back. Before any commit GetOffset is
    OFFSET_NOT_FOUND for a known group and CONSUMER_GROUP_NOT_FOUND for an unknown one; an offset
    past the queue's end or below 0 is ILLEGAL_OFFSET."""
    await send(cluster, [b"x0", b"x1", b"x2"])
    await cluster.broker.stub.CreateSubscriptionGroup(
        broker_pb2.CreateSubscriptionGroupRequest(
            group=broker_pb2.SubscriptionGroupConfig(group_name=GROUP.name, consume_enable=True)
        )
    )

    async def get(group: d.Resource = GROUP) -> s.GetOffsetResponse:
        request = s.GetOffsetRequest(group=group, message_queue=queue())
        return await stub.GetOffset(request, metadata=CLIENT, timeout=FAST_S)

    async def update(offset: int) -> s.UpdateOffsetResponse:
        request = s.UpdateOffsetRequest(group=GROUP, message_queue=queue(), offset=offset)
        return await stub.UpdateOffset(request, metadata=CLIENT, timeout=FAST_S)

    never = await get()
    assert never.status.code == d.OFFSET_NOT_FOUND and "v2-pull" in never.status.message
    unknown = await get(d.Resource(name="v2-nobody"))
    assert unknown.status.code == d.CONSUMER_GROUP_NOT_FOUND and "v2-nobody" in unknown.status.message

    assert (await update(2)).status.code == d.OK
    got = await get()
    assert (got.status.code, got.offset) == (d.OK, 2)
    committed = await cluster.broker.stub.QueryConsumerOffset(
        broker_pb2.QueryConsumerOffsetRequest(consumer_group=GROUP.name, topic=TOPIC, queue_id=0)
    )
    assert committed.offset == 2

    past = await update(4)
    assert past.status.code == d.ILLEGAL_OFFSET and "past the end (3)" in past.status.message
    negative = await update(-1)
    assert negative.status.code == d.ILLEGAL_OFFSET
    assert (await get()).offset == 2
