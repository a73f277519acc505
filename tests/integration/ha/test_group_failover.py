"""orbitmq.ha.group, the failover loop body shared by the local supervisor and the operator,
against real brokers in this process: a master that stops answering is replaced by its slave
under a new epoch, and when it comes back claiming the old epoch it is turned into a slave of
the new master and catches up (the operator's case: nothing rewrites its role file first)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import Cluster, eventually, start_cluster

from orbitmq.client import Admin, Message, Producer
from orbitmq.ha import Policy
from orbitmq.ha.group import STARTUP_GRACE_MS, BrokerGroupFailover, GroupMember

pytestmark = pytest.mark.timeout(120)
TOPIC = "GroupFailover"
WINDOW_MS = 2_500


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=())
    yield running
    await running.close()


def now_ms() -> int:
    return int(time.time() * 1000)


async def send(cluster: Cluster, bodies: range) -> None:
    async with Producer("GroupFailoverP", cluster.address) as producer:
        for i in bodies:
            await producer.send(Message(TOPIC, f"{i}".encode()))


async def test_promote_on_loss_then_demote_the_returning_master(cluster: Cluster) -> None:
    fast = {"replica_config_interval_ms": 200}
    master = await cluster.start_broker(
        "a-master", broker_name="broker-a", broker_role="ASYNC_MASTER", **fast
    )
    async with Admin(cluster.address) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
    slave = await cluster.start_broker(
        "a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **fast
    )
    members = [GroupMember("a-master", master.broker.address), GroupMember("a-slave", slave.broker.address)]
    group = BrokerGroupFailover(members, "ASYNC_MASTER", Policy(detection_window_ms=WINDOW_MS))

    await send(cluster, range(10))
    await eventually(
        lambda: slave.broker.store.commitlog.max_offset == master.broker.store.commitlog.max_offset, 10
    )
    decision = await group.step(now_ms())
    assert decision is not None and decision.nothing, decision
    last_seen = now_ms()

    master_port = master.broker.address.rsplit(":", 1)[1]
    await cluster.stop_broker("a-master")  # its address stays: a pod that no longer answers
    decision = await group.step(now_ms())
    assert decision is not None and decision.promote is None, "a loss shorter than the window is a blip"
    await asyncio.sleep(max(0.0, (last_seen + WINDOW_MS - now_ms()) / 1000) + 0.1)
    decision = await group.step(now_ms())
    assert decision is not None and decision.promote == "a-slave" and decision.epoch == 1, decision
    assert members[1].state is not None and members[1].state.role == "ASYNC_MASTER"
    assert group.live_master() is members[1] and group.failovers == 1

    async def routed_master() -> str:
        async with Admin(cluster.address) as admin:
            (data,) = (await admin.route(TOPIC)).broker_datas
        return data.broker_addrs.get(0, "")

    await eventually(lambda: routed_master(), 10)
    assert await routed_master() == slave.broker.address
    await send(cluster, range(10, 20))

    # the old master returns on its data and port, still believing it is master at epoch 0
    cluster.options["a-master"] = {**cluster.options["a-master"], "listen": f"127.0.0.1:{master_port}"}
    back = await cluster.start_broker("a-master")
    assert back.broker.address == members[0].address
    decision = await group.step(now_ms())
    assert decision is not None and decision.demote == ("a-master",), decision
    assert members[0].state is not None and members[0].state.role == "SLAVE"
    await eventually(
        lambda: back.broker.store.commitlog.max_offset == slave.broker.store.commitlog.max_offset,
        10,
        lambda: "the returning master replicates from the new one",
    )
    decision = await group.step(now_ms())
    assert decision is not None and decision.nothing, decision


async def test_a_new_group_waits_for_its_master_to_start_before_promoting(cluster: Cluster) -> None:
    """At a group's start its master's pod may come up after its slave's: no master seen yet and
    a member that never answered is not a failure until the start-up grace has passed."""
    slave = await cluster.start_broker("b-slave", broker_name="broker-b", broker_role="SLAVE", broker_id=1)
    members = [GroupMember("b-master", None), GroupMember("b-slave", slave.broker.address)]
    group = BrokerGroupFailover(members, "ASYNC_MASTER", Policy(detection_window_ms=1_000))
    started = now_ms()
    for later in (0, 5_000, STARTUP_GRACE_MS - 1):
        decision = await group.step(started + later)
        assert decision is not None and decision.nothing, decision
        assert "b-master never answered" in decision.reason, decision.reason
    decision = await group.step(started + STARTUP_GRACE_MS)
    assert decision is not None and decision.promote == "b-slave" and decision.epoch == 1, decision
    assert members[1].state is not None and members[1].state.role == "ASYNC_MASTER"
