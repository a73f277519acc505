"""A slave whose recorded master address went stale (the master came back elsewhere, as a pod
restarted under a new IP does) finds the master the name servers report and replicates again."""

from __future__ import annotations

import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import Cluster, eventually, start_cluster

from orbitmq.broker.ha import RoleState
from orbitmq.client import Message, Producer
from orbitmq.store.config import BrokerRole

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=())
    yield running
    await running.close()


def dead_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


async def test_a_stale_recorded_master_address_falls_back_to_the_name_servers(cluster: Cluster) -> None:
    fast = {"replica_config_interval_ms": 200, "register_interval_ms": 200}
    master = await cluster.start_broker(
        "a-master", broker_name="broker-a", broker_role="ASYNC_MASTER", **fast
    )
    # an earlier role change recorded a master address where nothing answers any more
    RoleState(cluster.root / "a-slave", BrokerRole.SLAVE, 1).change(BrokerRole.SLAVE, 1, 0, dead_address())
    slave = await cluster.start_broker(
        "a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **fast
    )
    assert slave.broker.role.record.master_addr != master.broker.address
    async with Producer("StaleP", cluster.address) as producer:
        for i in range(10):
            await producer.send(Message("Stale", f"{i}".encode()))
    await eventually(
        lambda: slave.broker.store.commitlog.max_offset == master.broker.store.commitlog.max_offset,
        15,
        lambda: "the slave replicates from the master the name servers report",
    )
