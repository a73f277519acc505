"""Topic, group and offset changes made through an RPC survive a SIGKILL of a real ``orbitmq
broker`` process right after the answer (RocketMQ persists topic config on every update), and
a store with consume queues but no topic config adopts its topics on start.

The periodic flush is set to ten minutes: what must survive is what the RPC made durable
before it answered, not what a timer happened to write."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import pytest
from brokerkit import broker_process, start_broker, stop_broker

from orbitmq.store.config_store import BAK_SUFFIX, TOPICS_FILE
from orbitmq.store.record import InboundMessage, decode
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(90)

NAME = "durable-broker"
SETTINGS = {"config_persist_interval_ms": 600_000}
WIDE = 8


def send(topic: str, queue_id: int, body: bytes) -> broker_pb2.SendMessageRequest:
    return broker_pb2.SendMessageRequest(
        producer_group="PG",
        topic=topic,
        queue_id=queue_id,
        messages=[common_pb2.Message(topic=topic, body=body)],
    )


async def topics(stub: broker_pb2_grpc.BrokerStub) -> dict[str, common_pb2.TopicConfig]:
    reply = await stub.ListTopics(broker_pb2.ListTopicsRequest())
    return {t.topic_name: t for t in reply.topics}


async def read_queue(stub: broker_pb2_grpc.BrokerStub, topic: str, queue_id: int, group: str) -> list[bytes]:
    reply = await stub.PullMessage(
        broker_pb2.PullMessageRequest(
            consumer_group=group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=0,
            max_msg_nums=64,
            commit_offset=-1,
        )
    )
    return [decode(r).body for r in reply.records]


async def read_all(stub: broker_pb2_grpc.BrokerStub, topic: str, group: str) -> dict[int, list[bytes]]:
    """What a new group reads from every read queue of ``topic`` (as the route shows them)."""
    config = (await topics(stub))[topic]
    return {q: await read_queue(stub, topic, q, group) for q in range(config.read_queue_nums)}


def sent_bodies(queues: int, per_queue: int) -> dict[int, list[bytes]]:
    return {q: [f"q{q}-m{i}".encode() for i in range(per_queue)] for q in range(queues)}


async def fill(stub: broker_pb2_grpc.BrokerStub, topic: str, bodies: dict[int, list[bytes]]) -> None:
    for queue_id, messages in bodies.items():
        for body in messages:
            reply = await stub.SendMessage(send(topic, queue_id, body))
            assert reply.status == broker_pb2.SEND_OK


def crash(process: asyncio.subprocess.Process) -> None:
    process.send_signal(signal.SIGKILL)


async def test_a_created_topic_survives_sigkill_right_after_create(tmp_path: Path) -> None:
    data = tmp_path / "data"
    bodies = sent_bodies(WIDE, 10)
    async with broker_process(data, NAME, settings=SETTINGS) as (stub, _, process):
        await stub.CreateTopic(
            broker_pb2.CreateTopicRequest(
                topic=common_pb2.TopicConfig(
                    topic_name="Wide", read_queue_nums=WIDE, write_queue_nums=WIDE, perm=6
                )
            )
        )
        await fill(stub, "Wide", bodies)
        crash(process)
    async with broker_process(data, NAME, settings=SETTINGS) as (stub, _, _process):
        config = (await topics(stub))["Wide"]
        assert (config.read_queue_nums, config.write_queue_nums) == (WIDE, WIDE)
        assert await read_all(stub, "Wide", "new-group") == bodies


async def test_a_queue_count_update_survives_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with broker_process(data, NAME, settings=SETTINGS, graceful_stop=True) as (stub, _, _process):
        await stub.CreateTopic(
            broker_pb2.CreateTopicRequest(topic=common_pb2.TopicConfig(topic_name="Grown", perm=6))
        )  # 4 queues, written by the graceful stop
    bodies = sent_bodies(WIDE, 3)
    async with broker_process(data, NAME, settings=SETTINGS) as (stub, _, process):
        change = await stub.UpdateTopic(
            broker_pb2.UpdateTopicRequest(topic="Grown", read_queue_nums=WIDE, write_queue_nums=WIDE)
        )
        assert change.outcome == broker_pb2.TOPIC_UPDATED
        await fill(stub, "Grown", bodies)
        crash(process)
    async with broker_process(data, NAME, settings=SETTINGS) as (stub, _, _process):
        assert (await topics(stub))["Grown"].write_queue_nums == WIDE
        assert await read_all(stub, "Grown", "new-group") == bodies


async def test_group_offset_and_auto_created_topics_survive_sigkill(tmp_path: Path) -> None:
    """A group made by ``group create``, an offset reset, a topic a send created and the
    ``%RETRY%`` topic a consumer's heartbeat created (it holds no message yet, so only its
    config can bring it back)."""
    data = tmp_path / "data"
    async with broker_process(data, NAME, settings=SETTINGS) as (stub, _, process):
        await stub.CreateSubscriptionGroup(
            broker_pb2.CreateSubscriptionGroupRequest(
                group=broker_pb2.SubscriptionGroupConfig(group_name="billing", retry_max_times=3)
            )
        )
        auto = broker_pb2.SendMessageRequest(
            producer_group="PG",
            topic="AutoMade",
            queue_id=-1,
            default_topic_queue_nums=6,
            messages=[common_pb2.Message(topic="AutoMade", body=b"first")],
        )
        assert (await stub.SendMessage(auto)).status == broker_pb2.SEND_OK
        await fill(stub, "AutoMade", {q: [b"more"] for q in range(6)})
        reset = await stub.ResetOffset(
            broker_pb2.ResetOffsetRequest(consumer_group="billing", topic="AutoMade", offset=1)
        )
        assert set(reset.offsets) == set(range(6))
        await stub.Heartbeat(
            broker_pb2.HeartbeatRequest(
                client_id="c1",
                consumers=[
                    broker_pb2.ConsumerData(
                        group="billing",
                        message_model=common_pb2.CLUSTERING,
                        subscriptions=[common_pb2.Subscription(topic="AutoMade", expression="*")],
                    )
                ],
            )
        )
        crash(process)
    async with broker_process(data, NAME, settings=SETTINGS) as (stub, _, _process):
        groups = await stub.ListSubscriptionGroups(broker_pb2.ListSubscriptionGroupsRequest())
        assert {g.group_name: g.retry_max_times for g in groups.groups}.get("billing") == 3
        known = await topics(stub)
        assert known["AutoMade"].write_queue_nums == 6
        assert "%RETRY%billing" in known
        for queue_id in range(6):
            offset = await stub.QueryConsumerOffset(
                broker_pb2.QueryConsumerOffsetRequest(
                    consumer_group="billing", topic="AutoMade", queue_id=queue_id
                )
            )
            assert offset.offset == reset.offsets[queue_id]


async def test_a_store_with_consume_queues_and_no_topic_config_adopts_its_topics(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Messages in queues 0..7 of ``Wide`` and in a dead-letter topic, then ``topics.json`` (and
    its ``.bak``) gone: the broker serves both again with the queues it holds, the dead letters
    still read-only, and says so in its log."""
    data = tmp_path / "data"
    running = await start_broker(data)
    try:
        await running.stub.CreateTopic(
            broker_pb2.CreateTopicRequest(
                topic=common_pb2.TopicConfig(
                    topic_name="Wide", read_queue_nums=WIDE, write_queue_nums=WIDE, perm=6
                )
            )
        )
        bodies = sent_bodies(WIDE, 2)
        await fill(running.stub, "Wide", bodies)
        # as a send-back past its retries writes it
        await running.broker.put([InboundMessage(topic="%DLQ%billing", body=b"dead", queue_id=0)])
    finally:
        await stop_broker(running)
    topics_file = data / TOPICS_FILE
    topics_file.unlink()
    topics_file.with_name(topics_file.name + BAK_SUFFIX).unlink(missing_ok=True)

    caplog.set_level(logging.WARNING, logger="orbitmq.broker.server")
    running = await start_broker(data)
    try:
        known = await topics(running.stub)
        assert (known["Wide"].read_queue_nums, known["Wide"].write_queue_nums) == (WIDE, WIDE)
        assert known["Wide"].perm == 6
        assert known["%DLQ%billing"].perm == 4
        assert await read_all(running.stub, "Wide", "new-group") == bodies
        adopted = [r.getMessage() for r in caplog.records if "adopted" in r.getMessage()]
        assert adopted and "Wide" in adopted[0] and "%DLQ%billing" in adopted[0], adopted
        assert "RMQ_SYS" not in adopted[0] and "SCHEDULE_TOPIC" not in adopted[0]
    finally:
        await stop_broker(running)
    assert "Wide" in topics_file.read_text(), "an adopted topic is written back at once"
