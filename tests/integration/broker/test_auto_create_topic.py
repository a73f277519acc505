"""A send to a missing topic, over real gRPC to a real broker: created under the same name rules
as ``topic create`` when ``auto_create_topic`` is on, ``TOPIC_NOT_EXIST`` naming it when off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from brokerkit import RunningBroker, start_broker, stop_broker

from orbitmq.common.rpc import failure_of
from orbitmq.v1 import broker_pb2, common_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(60)


def send(topic: str) -> broker_pb2.SendMessageRequest:
    return broker_pb2.SendMessageRequest(
        producer_group="PG",
        topic=topic,
        queue_id=-1,
        messages=[common_pb2.Message(topic=topic, body=b"x")],
    )


async def refusal(running: RunningBroker, topic: str) -> tuple[int, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await running.stub.SendMessage(send(topic))
    failure = failure_of(caught.value)
    assert failure is not None, caught.value.details()
    return failure.reason, failure.message


async def topic_names(running: RunningBroker) -> set[str]:
    reply = await running.stub.ListTopics(broker_pb2.ListTopicsRequest())
    return {t.topic_name for t in reply.topics}


@pytest.fixture
async def cluster_broker(tmp_path: Path) -> AsyncIterator[RunningBroker]:
    running = await start_broker(tmp_path / "b", cluster="EastCluster", broker_name="broker-east")
    yield running
    await stop_broker(running)


async def test_a_send_does_not_create_a_name_the_system_owns(cluster_broker: RunningBroker) -> None:
    for topic in ("TBW102", "%DLQ%billing", "RMQ_SYS_MINE", "rmq_sys_mine", "EastCluster", "broker-east"):
        reason, message = await refusal(cluster_broker, topic)
        assert reason == ErrorReason.INVALID_NAME, message
        assert f"topic name {topic!r} is reserved" in message
        assert topic not in await topic_names(cluster_broker)


async def test_a_send_to_a_system_topic_is_refused(cluster_broker: RunningBroker) -> None:
    for topic in ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_wheel_timer"):
        reason, message = await refusal(cluster_broker, topic)
        assert reason == ErrorReason.NO_PERMISSION and f"topic {topic!r} is a system topic" in message


async def test_ordinary_names_and_retry_topics_are_still_created(cluster_broker: RunningBroker) -> None:
    for topic in ("Orders", "%RETRY%billing"):
        assert (await cluster_broker.stub.SendMessage(send(topic))).status == broker_pb2.SEND_OK
    assert {"Orders", "%RETRY%billing"} <= await topic_names(cluster_broker)


async def test_with_auto_creation_off_a_missing_topic_is_named(tmp_path: Path) -> None:
    running = await start_broker(tmp_path / "b", auto_create_topic=False)
    try:
        reason, message = await refusal(running, "Ordres")
        assert reason == ErrorReason.TOPIC_NOT_EXIST
        assert "topic 'Ordres' does not exist" in message and "auto_create_topic is off" in message
        assert "Ordres" not in await topic_names(running)
        # a consumer's retry topic is the broker's, whatever the setting
        assert (await running.stub.SendMessage(send("%RETRY%billing"))).status == broker_pb2.SEND_OK
    finally:
        await stop_broker(running)
