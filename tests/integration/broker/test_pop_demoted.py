"""A POP that a role change overtakes: the broker took it as a master, then became a slave while
the POP waited for a message, and its store refused the POP's records. The consumer gets the
protocol's SERVICE_NOT_AVAILABLE (and asks the new master), not an unhandled exception's
UNKNOWN with a traceback in the broker's log; the message is not lost (orbitmq chaos saw the
traceback on a master demoted during a failover, with POP consumers through the proxy)."""

from __future__ import annotations

import asyncio
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
TOPIC = "PopDemoted"
GROUP = "pop-demoted"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=())
    yield running
    await running.close()


async def _pop(stub: broker_pb2_grpc.BrokerStub, poll_ms: int) -> list[bytes]:
    reply = await stub.PopMessage(
        broker_pb2.PopMessageRequest(
            consumer_group=GROUP,
            topic=TOPIC,
            queue_id=-1,
            max_msg_nums=16,
            invisible_time_ms=60_000,
            poll_time_ms=poll_ms,
        )
    )
    return [decode(m.record).body for m in reply.messages]


async def test_a_pop_overtaken_by_a_demotion_is_refused_with_a_status(cluster: Cluster) -> None:
    old = await cluster.start_broker("a-master", broker_name="broker-a", broker_role="ASYNC_MASTER", **HA)
    new = await cluster.start_broker(
        "a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **HA
    )
    await old.stub.CreateTopic(
        broker_pb2.CreateTopicRequest(
            topic=common_pb2.TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1, perm=6)
        )
    )
    assert await _pop(old.stub, poll_ms=0) == []  # the group starts on the queue (a stored record)
    await eventually(
        lambda: (
            new.broker.tables.topics.get(TOPIC) is not None
            and new.broker.store.dispatcher.dispatched_offset == old.broker.store.commitlog.max_offset
        ),
        20,
        lambda: "slave behind",
    )
    waiting = asyncio.create_task(_pop(old.stub, poll_ms=20_000))  # held: the queue is empty
    await asyncio.sleep(0.3)
    assert not waiting.done()

    await new.stub.ChangeRole(broker_pb2.ChangeRoleRequest(role="ASYNC_MASTER", epoch=1, broker_id=0))
    await old.stub.ChangeRole(
        broker_pb2.ChangeRoleRequest(role="SLAVE", epoch=1, broker_id=1, master_addr=new.broker.address)
    )
    await new.stub.SendMessage(
        broker_pb2.SendMessageRequest(
            topic=TOPIC, queue_id=0, messages=[common_pb2.Message(topic=TOPIC, body=b"after")]
        )
    )  # copied to the demoted broker, which wakes the held POP there

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await asyncio.wait_for(waiting, 30)
    failure = failure_of(refused.value)
    assert failure is not None, f"{refused.value.code()}: {refused.value.details()}"
    assert failure.reason == ErrorReason.SERVICE_NOT_AVAILABLE
    assert "not stored" in str(failure)
    assert await _pop(new.stub, poll_ms=5_000) == [b"after"]  # the new master hands it out
