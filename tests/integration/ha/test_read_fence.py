"""A SYNC_MASTER's readers see only what its slave holds: a record no slave has was not
acknowledged and a failover drops it, so a consumer that read it would move past queue offsets
the new master fills with other, acknowledged messages (``orbitmq chaos`` partition-master-slave
saw a push group skip 458 of them). Real master and slave brokers over gRPC."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import Cluster, eventually, start_cluster

from orbitmq.client import Admin, Message, Producer, SendStatus
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, broker_pb2_grpc

pytestmark = pytest.mark.timeout(60)

HA = {"replica_config_interval_ms": 100, "slave_ack_timeout_ms": 1_000}
TOPIC = "Fenced"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=())
    yield running
    await running.close()


async def _send(cluster: Cluster, bodies: range) -> list[SendStatus]:
    async with Producer("FencePG", cluster.address) as producer:
        return [(await producer.send(Message(TOPIC, f"{i}".encode()))).status for i in bodies]


def _pull(stub: broker_pb2_grpc.BrokerStub, offset: int, suspend_ms: int = 0) -> object:
    return stub.PullMessage(
        broker_pb2.PullMessageRequest(
            consumer_group="FenceCG",
            topic=TOPIC,
            queue_id=0,
            queue_offset=offset,
            max_msg_nums=32,
            commit_offset=-1,
            suspend_timeout_ms=suspend_ms,
        ),
        timeout=30,
    )


async def test_a_sync_master_serves_what_its_slave_holds_and_wakes_held_pulls_when_it_does(
    cluster: Cluster,
) -> None:
    await cluster.start_broker("a-master", broker_name="broker-a", broker_role="SYNC_MASTER", **HA)
    await cluster.start_broker("a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **HA)
    master = cluster.brokers["a-master"]
    await eventually(lambda: master.broker.replicas.connected, 10)
    async with Admin(cluster.address) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
    assert await _send(cluster, range(5)) == [SendStatus.SEND_OK] * 5

    await cluster.stop_broker("a-slave")  # what is sent now, no slave holds
    await eventually(lambda: not master.broker.replicas.connected, 10)
    assert await _send(cluster, range(5, 8)) == [SendStatus.SLAVE_NOT_AVAILABLE] * 3
    assert master.broker.store.consume_queue(TOPIC, 0).max_offset == 8  # stored all the same

    reply = await _pull(master.stub, 0)
    assert [decode(r).body for r in reply.records] == [b"0", b"1", b"2", b"3", b"4"]
    assert reply.next_begin_offset == 5
    beyond = await _pull(master.stub, 5)
    assert (list(beyond.records), beyond.next_begin_offset) == ([], 5)  # not stepped over either

    held = asyncio.ensure_future(_pull(master.stub, 5, suspend_ms=20_000))
    await asyncio.sleep(0.5)
    assert not held.done()
    await cluster.start_broker("a-slave")  # it copies 5..7: they are confirmed now
    woken = await asyncio.wait_for(held, 10)
    assert [decode(r).body for r in woken.records] == [b"5", b"6", b"7"]
    assert await _send(cluster, range(8, 10)) == [SendStatus.SEND_OK] * 2
    tail = await _pull(master.stub, 8)
    assert [decode(r).body for r in tail.records] == [b"8", b"9"]


async def test_a_demoted_master_serves_only_the_confirmed_part_until_it_aligns(cluster: Cluster) -> None:
    """A master demoted while it holds records no slave confirmed (a partition that failed the
    group over) keeps them unread until aligning with its new master cuts them: a consumer an
    old route still sends there would otherwise move past offsets the new master fills."""
    await cluster.start_broker("a-master", broker_name="broker-a", broker_role="SYNC_MASTER", **HA)
    await cluster.start_broker("a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **HA)
    master = cluster.brokers["a-master"]
    await eventually(lambda: master.broker.replicas.connected, 10)
    async with Admin(cluster.address) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
    assert await _send(cluster, range(5)) == [SendStatus.SEND_OK] * 5
    slave_address = cluster.brokers["a-slave"].broker.address
    await cluster.stop_broker("a-slave")
    await eventually(lambda: not master.broker.replicas.connected, 10)
    assert await _send(cluster, range(5, 8)) == [SendStatus.SLAVE_NOT_AVAILABLE] * 3

    await master.stub.ChangeRole(  # to follow a master it cannot reach yet: nothing aligned
        broker_pb2.ChangeRoleRequest(role="SLAVE", epoch=1, broker_id=1, master_addr=slave_address)
    )
    reply = await _pull(master.stub, 0)
    assert [decode(r).body for r in reply.records] == [b"0", b"1", b"2", b"3", b"4"]
    assert (await _pull(master.stub, 5)).records == []
