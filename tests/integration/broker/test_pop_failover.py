"""POP state across a failover: the promoted slave rebuilds it from the replicated POP log, so
acked messages stay acked, in-flight ones stay hidden until their time (then come back with
their attempt counted), and receipt handles issued by the old master still work."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import Cluster, eventually, start_cluster

from orbitmq.common.rpc import failure_of
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(90)

HA = {"replica_config_interval_ms": 100}
TOPIC = "PopFailover"
GROUP = "pop-failover"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=())
    yield running
    await running.close()


async def pop(
    stub: broker_pb2_grpc.BrokerStub, invisible_ms: int = 3_600_000, poll_ms: int = 0
) -> list[tuple[bytes, int, str]]:
    reply = await stub.PopMessage(
        broker_pb2.PopMessageRequest(
            consumer_group=GROUP,
            topic=TOPIC,
            queue_id=-1,
            max_msg_nums=16,
            invisible_time_ms=invisible_ms,
            poll_time_ms=poll_ms,
        )
    )
    return [(decode(m.record).body, m.delivery_attempt, m.receipt_handle) for m in reply.messages]


async def ack(stub: broker_pb2_grpc.BrokerStub, handle: str) -> int:
    request = broker_pb2.AckMessageRequest(consumer_group=GROUP, topic=TOPIC, receipt_handle=handle)
    return (await stub.AckMessage(request)).result


async def test_promoted_slave_serves_the_pop_state_the_old_master_left(cluster: Cluster) -> None:
    old = await cluster.start_broker("a-master", broker_name="broker-a", broker_role="ASYNC_MASTER", **HA)
    new = await cluster.start_broker(
        "a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **HA
    )
    await old.stub.CreateTopic(
        broker_pb2.CreateTopicRequest(
            topic=common_pb2.TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1, perm=6)
        )
    )
    for body in (b"acked", b"hidden", b"expiring"):
        await old.stub.SendMessage(
            broker_pb2.SendMessageRequest(
                topic=TOPIC, queue_id=0, messages=[common_pb2.Message(topic=TOPIC, body=body)]
            )
        )
    handed = {b: h for b, _, h in await pop(old.stub)}
    assert sorted(handed) == [b"acked", b"expiring", b"hidden"]
    assert await ack(old.stub, handed[b"acked"]) == broker_pb2.ACK_OK
    changed = await old.stub.ChangeInvisibleTime(
        broker_pb2.ChangeInvisibleTimeRequest(
            consumer_group=GROUP, topic=TOPIC, receipt_handle=handed[b"expiring"], invisible_time_ms=1_000
        )
    )
    assert changed.result == broker_pb2.ACK_OK

    with pytest.raises(grpc.aio.AioRpcError) as refused:  # a slave hands nothing out
        await pop(new.stub)
    assert failure_of(refused.value).reason == ErrorReason.SLAVE_READ_ONLY
    await eventually(  # the log (POP records included) and the topic's config are copied
        lambda: (
            new.broker.store.dispatcher.dispatched_offset == old.broker.store.commitlog.max_offset
            and new.broker.tables.topics.get(TOPIC) is not None
        ),
        20,
        lambda: "slave behind",
    )
    await cluster.stop_broker("a-master")
    await new.stub.ChangeRole(broker_pb2.ChangeRoleRequest(role="ASYNC_MASTER", epoch=1, broker_id=0))

    back = await pop(new.stub, poll_ms=5_000)
    assert [(b, a) for b, a, _ in back] == [(b"expiring", 2)]  # not "acked", not "hidden" yet
    assert await ack(new.stub, handed[b"hidden"]) == broker_pb2.ACK_OK  # the old master's handle
    assert await ack(new.stub, handed[b"acked"]) == broker_pb2.ACK_ALREADY_DONE
    assert await ack(new.stub, back[0][2]) == broker_pb2.ACK_OK
    assert await pop(new.stub, poll_ms=300) == []
