"""Scaling broker groups down with a drain, the operator's reconcile steps against a real
cluster in this process (name server + two broker groups): the surplus group's write
permission is wiped, the cluster waits (Draining) while consumer groups lag on it, its objects
are deleted once drained; a drain past its bound is stuck with nothing deleted; a group wanted
again gets its write permission back. The group's Kubernetes objects live in the test bed's
real API server (nothing runs in kwok's pods, so the brokers run here) and the drain deletes
them through a real lightkube client."""

from __future__ import annotations

import asyncio
import datetime
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from k8s_testbed_support import E2E_TIMEOUT, K8sCluster
from lightkube import AsyncClient, KubeConfig

sys.path.insert(0, str(Path(__file__).parent.parent / "integration" / "client"))
from clusterkit import Cluster, Collector, consuming, start_cluster

from orbitmq.client import Admin, Message, Producer
from orbitmq_operator.builders import Cluster as ClusterModel
from orbitmq_operator.builders import desired_objects
from orbitmq_operator.builders.drain import DrainStep
from orbitmq_operator.reconcile.drain import reconcile_drains
from orbitmq_operator.spec import ClusterSpec

pytestmark = [pytest.mark.e2e, E2E_TIMEOUT]
GROUP_KINDS = ("StatefulSet", "Service", "PodDisruptionBudget")
CLUSTER = "demo"
TOPIC = "Orders"
GROUP = "Billing"
REGISTER_MS = 200


def create_group_objects(k8s: K8sCluster, namespace: str) -> None:
    """demo-broker-1's StatefulSet, Service and PDB as the operator would have applied them,
    without their owner reference (no OrbitMQCluster exists here for the garbage collector)."""
    for manifest in desired_objects(model(namespace, groups=2)):
        if manifest["kind"] in GROUP_KINDS and manifest["metadata"]["name"] == "demo-broker-1":
            manifest["metadata"].pop("ownerReferences", None)
            k8s.apply(manifest)


def group_objects(k8s: K8sCluster, namespace: str) -> list[tuple[str, str]]:
    items = k8s.get_json("statefulsets,services,poddisruptionbudgets", "-n", namespace)["items"]
    return sorted(
        (i["kind"], i["metadata"]["name"]) for i in items if i["metadata"]["name"] == "demo-broker-1"
    )


@pytest.fixture
async def client(k8s_cluster: K8sCluster) -> AsyncIterator[AsyncClient]:
    api = AsyncClient(config=KubeConfig.from_file(k8s_cluster.kubeconfig))
    yield api
    await api.close()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(
        tmp_path,
        brokers=("demo-broker-0", "demo-broker-1"),
        cluster=CLUSTER,
        register_interval_ms=REGISTER_MS,
    )
    async with Admin(running.address) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
        await admin.create_group(GROUP)
    yield running
    await running.close()


def model(namespace: str, **brokers: Any) -> ClusterModel:
    spec = ClusterSpec.model_validate({"image": "orbitmq:1.0", "brokers": {"groups": 1, **brokers}})
    return ClusterModel(CLUSTER, namespace, "uid", spec)


async def send(cluster: Cluster, count: int) -> set[str]:
    async with Producer("Shop", cluster.address) as producer:  # a fresh route each time
        return {(await producer.send(Message(TOPIC, b"x"))).broker_name for _ in range(count)}


async def consume(cluster: Cluster, collector: Collector, count: int) -> None:
    async with consuming(cluster.address, TOPIC, GROUP, collector):
        await collector.wait_for(count)


def later(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)


async def test_drained_group_is_removed_only_after_its_backlog_is_consumed(
    cluster: Cluster, client: AsyncClient, k8s_cluster: K8sCluster, namespace: str
) -> None:
    create_group_objects(k8s_cluster, namespace)
    everything = [(kind, "demo-broker-1") for kind in sorted(GROUP_KINDS)]
    assert group_objects(k8s_cluster, namespace) == everything
    collector = Collector()
    assert await send(cluster, 8) == {"demo-broker-0", "demo-broker-1"}
    await consume(cluster, collector, 8)
    await send(cluster, 8)  # a backlog on both groups

    first = await reconcile_drains(client, model(namespace), [1], [], cluster.address, later(0), grace_s=0)
    [decision] = first.decisions
    assert decision.step is DrainStep.WAIT and decision.lag > 0
    assert f"{GROUP}/{TOPIC}" in decision.message
    assert [d["name"] for d in first.drains] == ["demo-broker-1"]
    assert first.events[0][0] == "Draining"
    await asyncio.sleep(3 * REGISTER_MS / 1000)  # demo-broker-1 re-registers meanwhile
    assert await send(cluster, 10) == {"demo-broker-0"}, "producers no longer send to the draining group"
    assert group_objects(k8s_cluster, namespace) == everything

    await consume(cluster, collector, 8 + 8 + 10)
    await asyncio.sleep(1.5)  # the consumer's offsets reach the broker (FAST persists every 0.5 s)
    done = await reconcile_drains(
        client, model(namespace), [1], first.drains, cluster.address, later(1), grace_s=0
    )
    assert done.drains == [] and done.decisions == []
    assert group_objects(k8s_cluster, namespace) == [], "the drained group's objects are deleted"
    assert [reason for reason, _, _ in done.events] == ["Removed"]


async def test_stuck_drain_deletes_nothing_and_scaling_up_restores_writes(
    cluster: Cluster, client: AsyncClient, k8s_cluster: K8sCluster, namespace: str
) -> None:
    create_group_objects(k8s_cluster, namespace)
    everything = group_objects(k8s_cluster, namespace)
    collector = Collector()
    await send(cluster, 8)
    await consume(cluster, collector, 8)
    await send(cluster, 8)
    bounded = model(namespace, drainTimeoutS=60)

    first = await reconcile_drains(client, bounded, [1], [], cluster.address, later(0), grace_s=0)
    stuck = await reconcile_drains(client, bounded, [1], first.drains, cluster.address, later(61), grace_s=0)
    [decision] = stuck.decisions
    assert decision.step is DrainStep.STUCK and f"{GROUP}/{TOPIC}" in decision.message
    assert stuck.drains[0]["step"] == "Stuck"
    assert group_objects(k8s_cluster, namespace) == everything
    assert [reason for reason, _, _ in stuck.events] == ["DrainStuck"]

    back = await reconcile_drains(
        client, model(namespace, groups=2), [], stuck.drains, cluster.address, later(62)
    )
    assert back.drains == [] and [reason for reason, _, _ in back.events] == ["DrainCancelled"]
    assert await send(cluster, 8) == {"demo-broker-0", "demo-broker-1"}
    assert group_objects(k8s_cluster, namespace) == everything


async def test_a_group_without_consumers_is_not_waited_on_past_the_offline_grace(
    cluster: Cluster, client: AsyncClient, k8s_cluster: K8sCluster, namespace: str
) -> None:
    """A group left with a backlog and no consumer (a ``helm test`` group, a retired
    application) holds the drain only for ``drainOfflineGroupGraceS``, then is named and
    ignored; a group whose consumer is online is never ignored."""
    create_group_objects(k8s_cluster, namespace)
    collector = Collector()
    await send(cluster, 8)
    async with consuming(cluster.address, TOPIC, GROUP, collector):
        await collector.wait_for(8)
        async with Admin(cluster.address) as admin:
            assert await admin.online_groups("demo-broker-1", {GROUP, "Nobody"}) == {GROUP}
    await send(cluster, 8)  # a backlog, and its consumer gone
    async with Admin(cluster.address) as admin:
        assert await admin.online_groups("demo-broker-1", {GROUP}) == set()
    graced = model(namespace, drainOfflineGroupGraceS=60)

    first = await reconcile_drains(client, graced, [1], [], cluster.address, later(0), grace_s=0)
    [decision] = first.decisions
    assert (decision.step, decision.ignored) == (DrainStep.WAIT, ())
    [offline] = first.drains[0]["offlineGroups"]
    assert offline["group"] == GROUP and first.drains[0]["ignoredGroups"] == []

    done = await reconcile_drains(client, graced, [1], first.drains, cluster.address, later(61), grace_s=0)
    assert done.drains == [] and group_objects(k8s_cluster, namespace) == []
    reasons = {reason: (message, warning) for reason, message, warning in done.events}
    assert set(reasons) == {"DrainIgnoredGroups", "Removed"}
    assert f"no consumer online for {GROUP}" in reasons["DrainIgnoredGroups"][0]
    assert "drainOfflineGroupGraceS=60" in reasons["Removed"][0] and reasons["Removed"][1]
