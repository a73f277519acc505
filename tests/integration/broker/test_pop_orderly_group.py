"""POP for a group configured ``consume_message_orderly``: a queue's next message is handed out
only after the one before it is acked (what RocketMQ 5 FIFO consumer groups rely on), while an
unordered group of the same topic gets everything at once."""

from __future__ import annotations

from brokerkit import RunningBroker

from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, common_pb2

TOPIC = "PopOrderly"


async def pop(broker: RunningBroker, group: str) -> list[tuple[bytes, str]]:
    """One message at most per pop, so what the second pop may hand out tells the modes apart."""
    reply = await broker.stub.PopMessage(
        broker_pb2.PopMessageRequest(
            consumer_group=group, topic=TOPIC, queue_id=-1, max_msg_nums=1, invisible_time_ms=60_000
        )
    )
    return [(decode(m.record).body, m.receipt_handle) for m in reply.messages]


async def test_orderly_group_gets_a_queue_one_message_at_a_time(broker: RunningBroker) -> None:
    await broker.stub.CreateTopic(
        broker_pb2.CreateTopicRequest(
            topic=common_pb2.TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1, perm=6)
        )
    )
    await broker.stub.CreateSubscriptionGroup(
        broker_pb2.CreateSubscriptionGroupRequest(
            group=broker_pb2.SubscriptionGroupConfig(
                group_name="orderly", consume_enable=True, consume_message_orderly=True
            )
        )
    )
    await broker.stub.SendMessage(
        broker_pb2.SendMessageRequest(
            topic=TOPIC, queue_id=0, messages=[common_pb2.Message(topic=TOPIC, body=b) for b in (b"1", b"2")]
        )
    )
    assert [b for b, _ in await pop(broker, "unordered")] == [b"1"]
    assert [b for b, _ in await pop(broker, "unordered")] == [b"2"]  # the next one at once
    ((first, handle),) = await pop(broker, "orderly")
    assert first == b"1"
    assert await pop(broker, "orderly") == []  # nothing more of the queue while "1" is in flight
    ack = broker_pb2.AckMessageRequest(consumer_group="orderly", topic=TOPIC, receipt_handle=handle)
    assert (await broker.stub.AckMessage(ack)).result == broker_pb2.ACK_OK
    assert [b for b, _ in await pop(broker, "orderly")] == [b"2"]
