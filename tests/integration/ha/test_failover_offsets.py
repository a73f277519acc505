"""Consumer offsets across a failover: a clustering consumer keeps its place when its master
dies and its slave takes over, even though the slave's copy of the group's offsets is stale.

Real brokers in this process (a master and a slave on real gRPC and files); the master is
stopped without a word, as a SIGKILL leaves it, and the slave is promoted by ``ChangeRole`` as
the local supervisor does.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import FAST, Cluster, Collector, eventually, start_cluster

from orbitmq.client import Admin, ConsumeFromWhere, Message, Producer, PushConsumer
from orbitmq.v1 import broker_pb2

pytestmark = pytest.mark.timeout(120)

TOPIC = "Failover"
GROUP = "FailoverGroup"
STALE_COPY = {"replica_config_interval_ms": 600_000, "slave_ack_timeout_ms": 2_000}
"""The slave copies the master's config once, at start (before the group commits anything), so
at promotion its consumer offsets are as stale as they can be."""


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=())
    yield running
    await running.close()


async def send(cluster: Cluster, bodies: range) -> None:
    async with Producer("FailoverProducer", cluster.address) as producer:
        for i in bodies:
            await producer.send(Message(TOPIC, f"{i}".encode()))


async def test_a_consumer_keeps_its_offsets_through_a_master_loss_and_promotion(cluster: Cluster) -> None:
    await cluster.start_broker("a-master", broker_name="broker-a", broker_role="ASYNC_MASTER", **STALE_COPY)
    async with Admin(cluster.address) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
    await cluster.start_broker(
        "a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **STALE_COPY
    )
    master = cluster.brokers["a-master"].broker
    slave = cluster.brokers["a-slave"].broker
    await eventually(lambda: slave.tables.topics.contains(TOPIC), 10, lambda: "the slave's config copy")

    collector = Collector()
    consumer = PushConsumer(
        GROUP,
        cluster.address,
        listener=collector.listener("c"),
        settings=FAST,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe(TOPIC)
    await consumer.start()
    try:
        await send(cluster, range(20))
        await collector.wait_for(20)
        await eventually(
            lambda: sum(master.offsets.offsets_of(GROUP, TOPIC).values()) == 20,
            10,
            lambda: f"master's committed offsets {master.offsets.offsets_of(GROUP, TOPIC)}",
        )
        await eventually(lambda: slave.store.commitlog.max_offset == master.store.commitlog.max_offset, 10)
        assert slave.offsets.offsets_of(GROUP, TOPIC) == {}, "the slave copied offsets too early"

        await master.grpc.stop(0)  # gone without a word: the name servers still list it
        await consumer.rebalance()  # while the master is unreachable: no client list from it

        promoted = await cluster.brokers["a-slave"].stub.ChangeRole(
            broker_pb2.ChangeRoleRequest(role="ASYNC_MASTER", epoch=1, broker_id=0)
        )
        assert promoted.role == "ASYNC_MASTER"
        await eventually(
            lambda: consumer._routes[TOPIC].masters["broker-a"] == slave.address,
            10,
            lambda: "the consumer's route names the new master",
        )
        await send(cluster, range(20, 30))
        await collector.wait_for(30)
        await consumer.rebalance()  # the new master knows the group now: same queues, same place
        await collector.settle(1.5)
        await eventually(
            lambda: sum(slave.offsets.offsets_of(GROUP, TOPIC).values()) == 30,
            10,
            lambda: f"new master's committed offsets {slave.offsets.offsets_of(GROUP, TOPIC)}",
        )
    finally:
        await consumer.close()

    bodies = collector.bodies()
    assert sorted(set(bodies), key=int) == [f"{i}" for i in range(30)]
    redelivered = sorted((b for b in set(bodies) if bodies.count(b) > 1), key=int)
    assert redelivered == [], (
        f"{len(bodies) - len(set(bodies))} duplicate deliveries of {redelivered}: the consumer "
        "dropped its queues while the master was away and restarted them from the new "
        "master's stale offsets"
    )
