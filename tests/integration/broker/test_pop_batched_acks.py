"""A broker AckMessage naming several receipt handles (what the proxy sends for coalesced acks):
one result per handle in order, unknown and repeated handles answered as such, the acked
messages never delivered again, and the group's POP consume offset past them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from brokerkit import RunningBroker, start_broker, stop_broker

from orbitmq.broker.pop.handles import MAX_ACKS_PER_CALL
from orbitmq.common.rpc import failure_of
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, common_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(60)

TOPIC = "PopBatchAcks"
GROUP = "pop-batch-acks"


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[RunningBroker]:
    running = await start_broker(tmp_path / "broker")
    yield running
    await stop_broker(running)


async def pop(broker: RunningBroker, max_nums: int, invisible_ms: int = 60_000) -> list[tuple[bytes, str]]:
    reply = await broker.stub.PopMessage(
        broker_pb2.PopMessageRequest(
            consumer_group=GROUP,
            topic=TOPIC,
            queue_id=-1,
            max_msg_nums=max_nums,
            invisible_time_ms=invisible_ms,
            poll_time_ms=0,
        )
    )
    return [(decode(m.record).body, m.receipt_handle) for m in reply.messages]


async def test_one_call_acks_many_with_a_result_per_handle(broker: RunningBroker) -> None:
    reply = await broker.stub.SendMessage(
        broker_pb2.SendMessageRequest(
            producer_group="p",
            topic=TOPIC,
            queue_id=0,
            messages=[common_pb2.Message(topic=TOPIC, body=f"m{i}".encode()) for i in range(10)],
        )
    )
    assert reply.status == broker_pb2.SEND_OK
    popped = await pop(broker, 10, invisible_ms=300)
    assert [body for body, _ in popped] == [f"m{i}".encode() for i in range(10)]
    handles = [handle for _, handle in popped]
    acked_before = broker.broker.pop.acks[GROUP, TOPIC]

    first = handles[0]
    wanted = [*handles[1:8], first, "not-a-handle"]
    reply = await broker.stub.AckMessage(
        broker_pb2.AckMessageRequest(
            consumer_group=GROUP, topic=TOPIC, receipt_handle=first, receipt_handles=wanted
        )
    )
    assert list(reply.results) == [
        broker_pb2.ACK_OK,  # receipt_handle first
        *[broker_pb2.ACK_OK] * 7,
        broker_pb2.ACK_ALREADY_DONE,  # the first again, in the same call
        broker_pb2.ACK_UNKNOWN_HANDLE,
    ]
    assert reply.result == broker_pb2.ACK_OK
    assert broker.broker.pop.acks[GROUP, TOPIC] - acked_before == 8

    # m8 and m9 were not acked: they come back after their 300 ms; the acked ones never do
    again: list[bytes] = []
    for _ in range(50):
        again += [body for body, _ in await pop(broker, 10)]
        if len(again) >= 2:
            break
        await asyncio.sleep(0.1)
    assert sorted(again) == [b"m8", b"m9"]
    state = broker.broker.pop.state
    assert sum(state.in_flight_by_topic().values()) == 2


async def test_too_many_handles_in_one_call_are_refused_naming_the_limit(broker: RunningBroker) -> None:
    request = broker_pb2.AckMessageRequest(
        consumer_group=GROUP, topic=TOPIC, receipt_handles=["h"] * (MAX_ACKS_PER_CALL + 1)
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await broker.stub.AckMessage(request)
    failure = failure_of(refused.value)
    assert failure.reason is ErrorReason.INVALID_ARGUMENT
    assert f"at most {MAX_ACKS_PER_CALL}" in failure.message
