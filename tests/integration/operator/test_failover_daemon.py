"""The operator's failover and status observation against real brokers in this process, posing
as pods: each broker listens on its own loopback address at the broker port, as a pod does on
its IP, so the operator's pod-to-member mapping (``<podIP>:10911``) is the one under test.

A master that stops answering is replaced by its slave once the detection window has passed,
and the status observation then reports the promoted pod as the writable master."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import Cluster, start_cluster

from orbitmq.ha import Policy
from orbitmq_operator.builders import names
from orbitmq_operator.reconcile.cluster import ha_state
from orbitmq_operator.reconcile.cluster_status import MemberState
from orbitmq_operator.reconcile.failover import ClusterFailover

pytestmark = pytest.mark.timeout(120)
CLUSTER = "demo"
GROUP = "demo-broker-0"
MASTER_POD, SLAVE_POD = "demo-broker-0-0", "demo-broker-0-1"
MASTER_IP, SLAVE_IP = "127.0.0.2", "127.0.0.3"
WINDOW_MS = 1_500


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=(), cluster=CLUSTER)
    common = {"cluster": CLUSTER, "broker_name": GROUP, "replica_config_interval_ms": 200}
    await running.start_broker(
        MASTER_POD, broker_role="ASYNC_MASTER", listen=f"{MASTER_IP}:{names.BROKER_PORT}", **common
    )
    await running.start_broker(
        SLAVE_POD, broker_role="SLAVE", broker_id=1, listen=f"{SLAVE_IP}:{names.BROKER_PORT}", **common
    )
    yield running
    await running.close()


def now_ms() -> int:
    return int(time.time() * 1000)


async def test_a_lost_master_pod_is_replaced_by_its_slave(cluster: Cluster) -> None:
    assert await ha_state(MASTER_POD, MASTER_IP) == MemberState(MASTER_POD, "ASYNC_MASTER", 0, True)
    assert await ha_state(SLAVE_POD, SLAVE_IP) == MemberState(SLAVE_POD, "SLAVE", 0, False)

    failover = ClusterFailover()
    pods = {GROUP: {MASTER_POD: MASTER_IP, SLAVE_POD: SLAVE_IP}}
    failover.configure(pods, "ASYNC_MASTER", Policy(detection_window_ms=WINDOW_MS))
    assert await failover.step(now_ms()) == {}, "a healthy group: nothing to do"

    await cluster.stop_broker(MASTER_POD)  # the pod is still Running: its IP stays
    lost_at = now_ms()
    assert await failover.step(now_ms()) == {}, "shorter than the window: a blip"
    acted = {}
    while not acted:
        assert now_ms() - lost_at < WINDOW_MS + 10_000, "no promotion after the detection window"
        await asyncio.sleep(0.2)
        acted = await failover.step(now_ms())
    decision = acted[GROUP]
    assert (decision.promote, decision.epoch) == (SLAVE_POD, 1)

    promoted = await ha_state(SLAVE_POD, SLAVE_IP)
    assert promoted == MemberState(SLAVE_POD, "ASYNC_MASTER", 1, True)
    assert await ha_state(MASTER_POD, MASTER_IP) is None, "a pod that does not answer is not a member"

    failover.configure({GROUP: {MASTER_POD: None, SLAVE_POD: SLAVE_IP}}, "ASYNC_MASTER", Policy())
    assert await failover.step(now_ms()) == {}, "the new master stays; the old one is pending"
