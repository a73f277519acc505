"""Master/slave replication over real gRPC between real brokers with real files."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import Cluster, eventually, scrape, start_cluster

from orbitmq.broker.server import Broker
from orbitmq.client import Admin, Message, Producer, SendStatus
from orbitmq.common.rpc import failure_of
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(120)

HA = {"replica_config_interval_ms": 100, "slave_ack_timeout_ms": 2_000}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=())
    yield running
    await running.close()


async def start_pair(cluster: Cluster, master_role: str = "SYNC_MASTER") -> None:
    await cluster.start_broker("a-master", broker_name="broker-a", broker_role=master_role, **HA)
    await cluster.start_broker("a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **HA)


async def caught_up(cluster: Cluster) -> None:
    master = cluster.brokers["a-master"].broker
    slave = cluster.brokers["a-slave"].broker
    await eventually(
        lambda: (
            slave.store.commitlog.max_offset == master.store.commitlog.max_offset
            and slave.store.dispatcher.dispatched_offset == master.store.commitlog.max_offset
        ),
        20,
        lambda: f"slave {slave.store.commitlog.max_offset} master {master.store.commitlog.max_offset}",
    )


async def send(cluster: Cluster, count: int, start: int = 0, topic: str = "Replicated") -> list[SendStatus]:
    async with Producer("PG", cluster.address) as producer:
        return [
            (await producer.send(Message(topic, f"{i}".encode(), keys=[f"k{i}"]))).status
            for i in range(start, start + count)
        ]


async def pull_all(stub, topic: str, queue_id: int) -> list:  # type: ignore[no-untyped-def]
    """Every message of one queue, pulled 32 at a time."""
    messages, offset = [], 0
    for _ in range(1000):
        reply = await stub.PullMessage(
            broker_pb2.PullMessageRequest(
                consumer_group="Check",
                topic=topic,
                queue_id=queue_id,
                queue_offset=offset,
                max_msg_nums=32,
                commit_offset=-1,
            )
        )
        if not reply.records:
            return messages
        messages += [decode(r) for r in reply.records]
        offset = reply.next_begin_offset
    raise AssertionError(f"queue {queue_id} of {topic} never ended (offset {offset})")


async def test_sync_master_acknowledges_only_what_a_slave_holds(cluster: Cluster) -> None:
    await cluster.start_broker("a-master", broker_name="broker-a", broker_role="SYNC_MASTER", **HA)
    assert await send(cluster, 1) == [SendStatus.SLAVE_NOT_AVAILABLE]
    await cluster.start_broker("a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **HA)
    slave = cluster.brokers["a-slave"].broker
    await eventually(lambda: cluster.brokers["a-master"].broker.replicas.connected, 10)
    statuses = await send(cluster, 50, start=1)
    assert set(statuses) == {SendStatus.SEND_OK}
    assert slave.store.commitlog.max_offset == cluster.brokers["a-master"].broker.store.commitlog.max_offset

    await cluster.stop_broker("a-slave")
    await eventually(lambda: not cluster.brokers["a-master"].broker.replicas.connected, 10)
    assert await send(cluster, 1, start=51) == [SendStatus.SLAVE_NOT_AVAILABLE]


async def test_slave_serves_reads_refuses_writes_and_copies_config(cluster: Cluster) -> None:
    await start_pair(cluster, "ASYNC_MASTER")
    async with Admin(cluster.address) as admin:
        await admin.create_topic("Replicated", read_queue_nums=2, write_queue_nums=2)
        await admin.create_group("ReplicaGroup", retry_max_times=3)
    await send(cluster, 40)
    await caught_up(cluster)
    master = cluster.brokers["a-master"]
    slave = cluster.brokers["a-slave"]
    await master.stub.UpdateConsumerOffset(
        broker_pb2.UpdateConsumerOffsetRequest(
            consumer_group="ReplicaGroup", topic="Replicated", queue_id=0, offset=7
        )
    )
    await eventually(
        lambda: (
            slave.broker.topics.get("Replicated") is not None
            and slave.broker.offsets.query("ReplicaGroup", "Replicated", 0) == 7
            and slave.broker.tables.subscription_groups.get("ReplicaGroup") is not None
        ),
        10,
        lambda: "topic, group and offset copied",
    )
    pulled = []
    for queue_id in (0, 1):
        reply = await slave.stub.PullMessage(
            broker_pb2.PullMessageRequest(
                consumer_group="ReplicaGroup",
                topic="Replicated",
                queue_id=queue_id,
                queue_offset=0,
                max_msg_nums=64,
                commit_offset=-1,
            )
        )
        pulled += [decode(r).body for r in reply.records]
    assert sorted(pulled, key=int) == [f"{i}".encode() for i in range(40)]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await slave.stub.SendMessage(
            broker_pb2.SendMessageRequest(
                topic="Replicated", queue_id=0, messages=[{"topic": "Replicated", "body": b"x"}]
            )
        )
    assert failure_of(refused.value).reason == ErrorReason.SLAVE_READ_ONLY
    with pytest.raises(grpc.aio.AioRpcError) as no_lock:
        await slave.stub.LockBatch(broker_pb2.LockBatchRequest(consumer_group="ReplicaGroup", client_id="c"))
    assert failure_of(no_lock.value).reason == ErrorReason.SLAVE_READ_ONLY
    state = await slave.stub.GetHaState(broker_pb2.GetHaStateRequest())
    assert (state.role, state.broker_id, state.master_addr) == ("SLAVE", 1, master.broker.address)
    master_state = await master.stub.GetHaState(broker_pb2.GetHaStateRequest())
    assert [s.address for s in master_state.slaves] == [slave.broker.address]
    assert [(e.epoch, e.start_offset) for e in state.epochs] == [(0, 0)]


async def test_slave_catches_up_from_empty_and_after_an_outage(cluster: Cluster) -> None:
    await cluster.start_broker("a-master", broker_name="broker-a", broker_role="ASYNC_MASTER", **HA)
    await send(cluster, 300)
    await cluster.start_broker("a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **HA)
    await caught_up(cluster)
    await cluster.stop_broker("a-slave")
    await send(cluster, 300, start=300)
    await cluster.start_broker("a-slave")
    await caught_up(cluster)
    slave = cluster.brokers["a-slave"].broker
    bodies = [
        m.body for q in range(4) for m in await pull_all(cluster.brokers["a-slave"].stub, "Replicated", q)
    ]
    assert sorted(bodies, key=int) == [f"{i}".encode() for i in range(600)]
    assert [m.body for m in slave.store.query_by_key("Replicated", "k599", 10)] == [b"599"]


async def test_promotion_and_a_returning_master_that_diverged(cluster: Cluster) -> None:
    await start_pair(cluster, "ASYNC_MASTER")
    await send(cluster, 100)
    await caught_up(cluster)
    old = cluster.brokers["a-master"]
    new = cluster.brokers["a-slave"]
    shared = new.broker.store.commitlog.max_offset
    await new.broker.replication.close()  # the link breaks: what the old master writes now is its alone
    new.broker.replication = None
    async with Producer("PG", cluster.address) as producer:
        queue = (await producer.write_queues("Replicated"))[0]
        for i in range(20):
            await producer.send(Message("Replicated", f"lost {i}".encode()), queue=queue)
    assert old.broker.store.commitlog.max_offset > shared

    stale = broker_pb2.ChangeRoleRequest(role="SYNC_MASTER", epoch=0, broker_id=0)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await new.stub.ChangeRole(stale)
    assert failure_of(refused.value).reason == ErrorReason.STALE_EPOCH
    promoted = await new.stub.ChangeRole(
        broker_pb2.ChangeRoleRequest(role="ASYNC_MASTER", epoch=1, broker_id=0)
    )
    assert (promoted.role, promoted.epoch, promoted.broker_id) == ("ASYNC_MASTER", 1, 0)
    assert [(e.epoch, e.start_offset) for e in promoted.epochs] == [(0, 0), (1, shared)]
    await new.stub.SendMessage(
        broker_pb2.SendMessageRequest(
            topic="Replicated", queue_id=0, messages=[{"topic": "Replicated", "body": b"new"}]
        )
    )

    demoted = await old.stub.ChangeRole(
        broker_pb2.ChangeRoleRequest(role="SLAVE", epoch=1, broker_id=1, master_addr=new.broker.address)
    )
    assert demoted.role == "SLAVE"
    await eventually(
        lambda: (
            old.broker.store.commitlog.max_offset == new.broker.store.commitlog.max_offset
            and old.broker.replication is not None
            and old.broker.replication.connected.is_set()
        ),
        20,
        lambda: f"old {old.broker.store.commitlog.max_offset} new {new.broker.store.commitlog.max_offset}",
    )
    reply = await old.stub.PullMessage(
        broker_pb2.PullMessageRequest(
            consumer_group="Check",
            topic="Replicated",
            queue_id=0,
            queue_offset=0,
            max_msg_nums=200,
            commit_offset=-1,
        )
    )
    bodies = [decode(r).body for r in reply.records]
    assert b"new" in bodies and not any(b.startswith(b"lost") for b in bodies), (
        "the old master's own tail is gone"
    )
    state = await old.stub.GetHaState(broker_pb2.GetHaStateRequest())
    assert [(e.epoch, e.start_offset) for e in state.epochs] == [(0, 0), (1, shared)]

    async with Admin(cluster.address) as admin:
        route = await admin.route("Replicated")
    addrs = {d.broker_name: dict(d.broker_addrs) for d in route.broker_datas}
    assert addrs["broker-a"] == {0: new.broker.address, 1: old.broker.address}, "routes follow the roles"

    await cluster.restart_broker("a-slave")  # the promoted broker keeps its role across a restart
    assert cluster.brokers["a-slave"].broker.broker_role.value == "ASYNC_MASTER"


async def test_consumer_reads_from_the_slave_while_the_master_is_away_and_when_advised(
    cluster: Cluster,
) -> None:
    from clusterkit import FAST, Collector

    from orbitmq.client import ConsumeFromWhere, PushConsumer

    await start_pair(cluster, "ASYNC_MASTER")
    async with Admin(cluster.address) as admin:
        await admin.create_topic("Replicated", read_queue_nums=2, write_queue_nums=2)
    collector = Collector()
    consumer = PushConsumer(
        "SlaveReader",
        cluster.address,
        listener=collector.listener("c"),
        settings=FAST,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe("Replicated")
    await consumer.start()
    await send(cluster, 10)
    await collector.wait_for(10)
    consumer.suspend()
    await send(cluster, 50, start=10)
    await caught_up(cluster)
    master = cluster.brokers["a-master"].broker
    slave = cluster.brokers["a-slave"].broker
    await master.grpc.stop(0)  # gone without a word: the name servers still list it
    pulls_before = slave.metrics.messages_got.get("SlaveReader", "Replicated")
    consumer.resume()
    await collector.wait_for(60)
    await collector.settle(0.5)
    assert sorted(set(collector.bodies()), key=int) == [f"{i}" for i in range(60)]
    served = slave.metrics.messages_got.get("SlaveReader", "Replicated")
    assert served - pulls_before >= 40, "the slave served what the master could not"
    await consumer.close()


async def topic_made_before_the_config_copy(cluster: Cluster) -> Broker:
    """A master and a slave whose config copy is far off; the topic JustMade (2 queues) made on
    the master with 6 messages the slave holds but whose config it has not copied; the slave."""
    slow_copy = {**HA, "replica_config_interval_ms": 600_000}
    await cluster.start_broker("a-master", broker_name="broker-a", broker_role="ASYNC_MASTER", **slow_copy)
    await cluster.start_broker(
        "a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **slow_copy
    )
    slave = cluster.brokers["a-slave"].broker
    await eventually(lambda: slave.replication.connected.is_set(), 10)
    async with Admin(cluster.address) as admin:
        await admin.create_topic("JustMade", read_queue_nums=2, write_queue_nums=2)
    await send(cluster, 6, topic="JustMade")
    await caught_up(cluster)
    assert not slave.tables.topics.contains("JustMade"), "the config copy came too early for this test"
    return slave


async def test_a_slave_serves_a_topic_it_holds_before_the_config_copy_arrives(cluster: Cluster) -> None:
    """The master dies within one config-copy interval of creating a topic: the slave has the
    messages (log stream) but not yet the topic (config copy); readers must still get them."""
    await topic_made_before_the_config_copy(cluster)

    stub = cluster.brokers["a-slave"].stub
    bodies = [m.body for q in (0, 1) for m in await pull_all(stub, "JustMade", q)]
    assert sorted(bodies) == [f"{i}".encode() for i in range(6)]
    with pytest.raises(grpc.aio.AioRpcError) as missing:  # a topic it holds nothing of: unknown
        await pull_all(stub, "NeverMade", 0)
    assert failure_of(missing.value).reason is ErrorReason.TOPIC_NOT_EXIST


async def test_a_promoted_slave_adopts_the_topics_it_holds_before_the_config_copy_arrives(
    cluster: Cluster,
) -> None:
    """The same early death, then the slave is promoted: the new master serves the topic it
    holds (its two queues, read-write, in its route) rather than refusing it as unknown or
    re-creating it on the next send with the default four queues."""
    slave = await topic_made_before_the_config_copy(cluster)

    await cluster.stop_broker("a-master")
    stub = cluster.brokers["a-slave"].stub
    await stub.ChangeRole(broker_pb2.ChangeRoleRequest(role="ASYNC_MASTER", epoch=1, broker_id=0))
    adopted = slave.tables.topics.get("JustMade")
    assert adopted is not None and (adopted.read_queue_nums, adopted.write_queue_nums) == (2, 2)
    bodies = [m.body for q in (0, 1) for m in await pull_all(stub, "JustMade", q)]
    assert sorted(bodies) == [f"{i}".encode() for i in range(6)]
    assert await send(cluster, 4, start=6, topic="JustMade") == [SendStatus.SEND_OK] * 4
    async with Admin(cluster.address) as admin:
        route = await admin.route("JustMade")
    assert [(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [(2, 2)]
    assert sorted(slave.store.queue_ids("JustMade")) == [0, 1]


async def test_a_master_far_ahead_of_a_reader_sends_it_to_the_slave(cluster: Cluster) -> None:
    from clusterkit import FAST, Collector

    from orbitmq.client import ConsumeFromWhere, PushConsumer

    await cluster.start_broker(
        "a-master", broker_name="broker-a", broker_role="ASYNC_MASTER", pull_from_slave_lag_bytes=1, **HA
    )
    await cluster.start_broker("a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **HA)
    async with Admin(cluster.address) as admin:
        await admin.create_topic("Replicated", read_queue_nums=1, write_queue_nums=1)
    await send(cluster, 200)
    await caught_up(cluster)
    collector = Collector()
    settings = FAST
    consumer = PushConsumer(
        "Advised",
        cluster.address,
        listener=collector.listener("c"),
        settings=settings,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe("Replicated")
    await consumer.start()
    await collector.wait_for(200)
    got = {
        name: cluster.brokers[name].broker.metrics.messages_got.get("Advised", "Replicated")
        for name in ("a-master", "a-slave")
    }
    assert got["a-master"] > 0 and got["a-slave"] > 0, got
    await consumer.close()


async def test_ha_metrics(cluster: Cluster) -> None:
    await start_pair(cluster, "SYNC_MASTER")
    await eventually(lambda: cluster.brokers["a-master"].broker.replicas.connected, 10)
    await send(cluster, 5)

    master = await asyncio.to_thread(scrape, cluster.brokers["a-master"].broker.grpc.metrics_url)
    slave = await asyncio.to_thread(scrape, cluster.brokers["a-slave"].broker.grpc.metrics_url)
    slave_addr = cluster.brokers["a-slave"].broker.address
    assert (
        master[("orbitmq_broker_role", (("broker", "broker-a"), ("broker_id", "0"), ("role", "SYNC_MASTER")))]
        == 1
    )
    assert (
        slave[("orbitmq_broker_role", (("broker", "broker-a"), ("broker_id", "1"), ("role", "SLAVE")))] == 1
    )
    assert master[("orbitmq_broker_epoch", (("broker", "broker-a"),))] == 0
    assert master[("orbitmq_replication_lag_bytes", (("broker", "broker-a"), ("slave", slave_addr)))] == 0
    assert ("orbitmq_replication_lag_bytes", (("broker", "broker-a"), ("slave", slave_addr))) in slave


async def test_sync_master_times_out_when_its_slave_stops_acknowledging(
    cluster: Cluster, tmp_path: Path
) -> None:
    import os
    import signal
    import subprocess

    await cluster.start_broker(
        "a-master",
        broker_name="broker-a",
        broker_role="SYNC_MASTER",
        replica_config_interval_ms=100,
        slave_ack_timeout_ms=500,
    )
    master = cluster.brokers["a-master"].broker
    config = tmp_path / "slave.yaml"
    config.write_text(f"master_addr: '{master.address}'\n")
    slave = subprocess.Popen(  # noqa: ASYNC220 - a real process, so it can be frozen with SIGSTOP
        [
            sys.executable,
            "-m",
            "orbitmq.cli.main",
            "broker",
            "--config",
            str(config),
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
            "--namesrv",
            "",
            "--data-dir",
            str(tmp_path / "slave"),
            "--broker-role",
            "SLAVE",
            "--broker-id",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await eventually(lambda: master.replicas.connected, 30)
        assert await send(cluster, 3) == [SendStatus.SEND_OK] * 3
        os.kill(slave.pid, signal.SIGSTOP)
        assert await send(cluster, 1, start=3) == [SendStatus.FLUSH_SLAVE_TIMEOUT]
        os.kill(slave.pid, signal.SIGCONT)
        await eventually(lambda: master.replicas.best_acked == master.store.commitlog.max_offset, 10)
        assert await send(cluster, 1, start=4) == [SendStatus.SEND_OK]
    finally:
        os.kill(slave.pid, signal.SIGCONT)
        slave.terminate()
        await asyncio.to_thread(slave.wait, 15)
