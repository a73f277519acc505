"""Topic auto-creation through the proxy (the RocketMQ 5 path) behaves as a send to the broker
does: a name the system owns is ``ILLEGAL_TOPIC`` and created nowhere; with the brokers'
``auto_create_topic`` off, a send to a missing topic is ``TOPIC_NOT_FOUND`` naming it, for the
official client too."""

from __future__ import annotations

import sys
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc
from v2kit import V2Cluster, call, message, official_producer, v2_cluster

from orbitmq.v1 import broker_pb2

pytestmark = pytest.mark.timeout(60)

CLIENT = (("x-mq-client-id", "test-client@1"),)
FAST_S = 5.0


def _message(topic: str) -> d.Message:
    built = d.Message(topic=d.Resource(name=topic), body=b"x")
    built.system_properties.message_id = "01AB"
    built.system_properties.message_type = d.NORMAL
    return built


async def _send(endpoint: str, topic: str) -> s.SendMessageResponse:
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        return await stub.SendMessage(
            s.SendMessageRequest(messages=[_message(topic)]), metadata=CLIENT, timeout=FAST_S
        )


async def _broker_topics(cluster: V2Cluster) -> set[str]:
    reply = await cluster.broker.stub.ListTopics(broker_pb2.ListTopicsRequest())
    return {t.topic_name for t in reply.topics}


async def test_a_send_through_the_proxy_does_not_create_a_reserved_name(tmp_path: Path) -> None:
    async with v2_cluster(tmp_path) as cluster:
        for topic in ("TBW102", "%DLQ%billing", "DefaultCluster", "broker-a"):
            reply = await _send(cluster.endpoint, topic)
            assert reply.status.code == d.ILLEGAL_TOPIC, reply.status
            assert f"topic name {topic!r} is reserved" in reply.status.message
            assert topic not in await _broker_topics(cluster)


async def test_with_auto_creation_off_a_missing_topic_is_topic_not_found(tmp_path: Path) -> None:
    async with v2_cluster(tmp_path, auto_create_topic=False) as cluster:
        reply = await _send(cluster.endpoint, "Ordres")
        assert reply.status.code == d.TOPIC_NOT_FOUND, reply.status
        assert "topic 'Ordres' does not exist" in reply.status.message
        async with official_producer(cluster.endpoint, []) as producer:
            with pytest.raises(Exception, match="Ordres") as raised:
                await call(producer.send, message("Ordres", b"by the official client"))
        assert "TOPIC_NOT_FOUND" in str(raised.value) or "40402" in str(raised.value), raised.value
        assert "Ordres" not in await _broker_topics(cluster)
