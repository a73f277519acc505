"""POP with a filter, on a real broker: a SQL92 subscription delivers exactly the messages whose
properties match (evaluated on the broker, as for pulls), the others are skipped for good (never
in flight, never revived, no attempt counted, yet past the group's consume offset), an invalid
expression is refused naming it and the fault, and a long-polling pop finds a wanted message
behind more unwanted ones than one scan looks at."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest
from brokerkit import RunningBroker, start_broker, stop_broker

from orbitmq.common.rpc import failure_of
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, common_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(90)

TOPIC = "PopSql92"
GROUP = "pop-sql92"
CONDITION = "a > 5 AND region = 'eu'"


async def create_topic(broker: RunningBroker, topic: str) -> None:
    await broker.stub.CreateTopic(
        broker_pb2.CreateTopicRequest(
            topic=common_pb2.TopicConfig(topic_name=topic, read_queue_nums=1, write_queue_nums=1, perm=6)
        )
    )


async def send(broker: RunningBroker, topic: str, messages: list[common_pb2.Message]) -> None:
    reply = await broker.stub.SendMessage(
        broker_pb2.SendMessageRequest(producer_group="p", topic=topic, queue_id=0, messages=messages)
    )
    assert reply.status == broker_pb2.SEND_OK


async def pop(
    broker: RunningBroker,
    expression: str,
    kind: int = common_pb2.SQL92,
    *,
    group: str = GROUP,
    topic: str = TOPIC,
    max_nums: int = 32,
    invisible_ms: int = 60_000,
    poll_ms: int = 0,
) -> list[tuple[bytes, int, str]]:
    reply = await broker.stub.PopMessage(
        broker_pb2.PopMessageRequest(
            consumer_group=group,
            topic=topic,
            queue_id=-1,
            max_msg_nums=max_nums,
            invisible_time_ms=invisible_ms,
            poll_time_ms=poll_ms,
            subscription=common_pb2.Subscription(topic=topic, expression=expression, expression_type=kind),
        )
    )
    return [(decode(m.record).body, m.delivery_attempt, m.receipt_handle) for m in reply.messages]


async def progress(broker: RunningBroker, group: str = GROUP) -> tuple[int, int, int]:
    """(consumer offset, in flight, done above the offset) of the group's one queue."""
    stats = await broker.stub.GetConsumeStats(
        broker_pb2.GetConsumeStatsRequest(consumer_group=group, topic=TOPIC)
    )
    (queue,) = stats.queues
    return queue.consumer_offset, queue.pop_in_flight, queue.pop_done_above


async def test_sql92_pop_delivers_the_matching_messages_and_skips_the_rest_for_good(
    broker: RunningBroker,
) -> None:
    await create_topic(broker, TOPIC)
    messages = [
        common_pb2.Message(
            topic=TOPIC, body=f"m{i}".encode(), properties={"a": str(i), "region": "eu" if i % 2 else "us"}
        )
        for i in range(12)
    ]
    messages.append(common_pb2.Message(topic=TOPIC, body=b"bare"))  # no properties: unknown, not a match
    await send(broker, TOPIC, messages)

    first = await pop(broker, CONDITION, invisible_ms=500)
    assert [(body, attempt) for body, attempt, _ in first] == [(b"m7", 1), (b"m9", 1), (b"m11", 1)]
    assert await pop(broker, CONDITION) == []  # the matches are in flight, the rest skipped
    assert await progress(broker) == (7, 3, 3)  # m0..m6 done, m8, m10 and bare done above m7

    await asyncio.sleep(0.6)  # the three expire: only they come back, each on its second attempt
    again = await pop(broker, CONDITION)
    assert [(body, attempt) for body, attempt, _ in again] == [(b"m7", 2), (b"m9", 2), (b"m11", 2)]
    for _, _, handle in again:
        ack = broker_pb2.AckMessageRequest(consumer_group=GROUP, topic=TOPIC, receipt_handle=handle)
        assert (await broker.stub.AckMessage(ack)).result == broker_pb2.ACK_OK
    assert await progress(broker) == (13, 0, 0)  # past the skipped ones, nothing in flight
    assert await pop(broker, "*", common_pb2.TAG) == []  # skipped is done for the group

    other = await pop(broker, "region = 'us' OR a IS NULL", group="pop-sql92-other")
    assert [body for body, _, _ in other] == [b"m0", b"m2", b"m4", b"m6", b"m8", b"m10", b"bare"]


async def test_an_invalid_sql92_expression_is_refused_naming_it_and_the_fault(broker: RunningBroker) -> None:
    await create_topic(broker, TOPIC)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await pop(broker, "a > AND region = 'eu'")
    failure = failure_of(raised.value)
    assert failure is not None and failure.reason == ErrorReason.INVALID_EXPRESSION
    assert "a > AND region = 'eu'" in failure.message and "column 5" in failure.message


async def test_a_long_poll_finds_a_wanted_message_behind_more_than_one_scan_of_others(
    tmp_path: Path,
) -> None:
    broker = await start_broker(tmp_path / "broker", max_message_bytes=32 * 1024)
    try:
        await scan_past_others(broker)
    finally:
        await stop_broker(broker)


async def scan_past_others(broker: RunningBroker) -> None:
    """More unwanted messages than one scan looks at, then a wanted one; the records that skip
    them fit the broker's 32 KiB message limit."""
    scan_units = broker.broker.store.config.max_filter_scan_units
    topic = "PopFilterScan"
    await create_topic(broker, topic)
    unwanted = scan_units + 100
    for start in range(0, unwanted, 1000):
        batch = [
            common_pb2.Message(topic=topic, body=b"x", properties={"TAGS": "B"})
            for _ in range(min(1000, unwanted - start))
        ]
        await send(broker, topic, batch)
    await send(broker, topic, [common_pb2.Message(topic=topic, body=b"wanted", properties={"TAGS": "A"})])

    started = time.monotonic()
    got = await pop(broker, "A", common_pb2.TAG, topic=topic, max_nums=1, poll_ms=10_000)
    assert [body for body, _, _ in got] == [b"wanted"]
    assert time.monotonic() - started < 5, "found by looking further at once, not after the poll"
