"""A rolling update of a broker group, the operator's reconcile steps against the test bed's real
API server while producers keep sending: the group's StatefulSet (``OnDelete``) gets a new pod
template, and the roll deletes the slave's pod first, then switches the master over to the
in-sync slave, then deletes the old master's pod; the StatefulSet controller re-creates each
pod at the new revision. Nothing runs in kwok's pods, so each pod's broker runs here, and a pod
deletion restarts it (same data, same port: it comes back in its persisted role). No send
fails after the client's retries, and every acknowledged message is consumed afterwards."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from k8s_testbed_support import E2E_TIMEOUT, K8sCluster
from lightkube import AsyncClient, KubeConfig

sys.path.insert(0, str(Path(__file__).parent.parent / "integration" / "client"))
from clusterkit import Cluster, consume_all, eventually, start_cluster

from orbitmq.client import Admin, Message, Producer
from orbitmq_operator.builders import Cluster as ClusterModel
from orbitmq_operator.builders import desired_objects, names
from orbitmq_operator.builders.rolling import RollStep
from orbitmq_operator.reconcile.rolling import REVISION_LABEL, reconcile_rolls
from orbitmq_operator.spec import ClusterSpec

pytestmark = [pytest.mark.e2e, E2E_TIMEOUT]
CLUSTER = "demo"
GROUP_NAME = "demo-broker-0"
MASTER, SLAVE = f"{GROUP_NAME}-0", f"{GROUP_NAME}-1"
TOPIC = "Orders"
SENDERS = 3


def model(namespace: str, image: str) -> ClusterModel:
    spec = ClusterSpec.model_validate(
        {"image": image, "brokers": {"groups": 1, "slavesPerGroup": 1, "replicationMode": "ASYNC_MASTER"}}
    )
    return ClusterModel(CLUSTER, namespace, "uid", spec)


def apply_group(k8s: K8sCluster, namespace: str, image: str) -> None:
    """The group's StatefulSet and Service as the operator applies them (no owner reference:
    no OrbitMQCluster exists here for the garbage collector)."""
    for manifest in desired_objects(model(namespace, image)):
        if manifest["kind"] in ("StatefulSet", "Service") and manifest["metadata"]["name"] == GROUP_NAME:
            manifest["metadata"].pop("ownerReferences", None)
            if manifest["kind"] == "StatefulSet":
                on_kwok(manifest["spec"])
            k8s.apply(manifest)


def on_kwok(spec: dict[str, Any]) -> None:
    """Pods on the tainted kwok node, their data on an emptyDir (no volume provisioner here)."""
    spec.pop("volumeClaimTemplates")
    spec.pop("persistentVolumeClaimRetentionPolicy")
    pod = spec["template"]["spec"]
    pod["volumes"].append({"name": names.DATA_VOLUME, "emptyDir": {}})
    pod["nodeSelector"] = {"type": "kwok"}
    pod["tolerations"] = [
        {"key": "kwok.x-k8s.io/node", "operator": "Equal", "value": "fake", "effect": "NoSchedule"}
    ]


def pods(k8s: K8sCluster, namespace: str) -> dict[str, dict[str, Any]]:
    items = k8s.get_json("pods", "-n", namespace, "-l", "app.kubernetes.io/component=broker")["items"]
    return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.fixture
async def client(k8s_cluster: K8sCluster) -> AsyncIterator[AsyncClient]:
    api = AsyncClient(config=KubeConfig.from_file(k8s_cluster.kubeconfig))
    yield api
    await api.close()


@pytest.fixture
async def brokers(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=())
    fast = {"broker_name": GROUP_NAME, "cluster": CLUSTER, "replica_config_interval_ms": 200}
    await running.start_broker(MASTER, broker_role="ASYNC_MASTER", **fast)
    async with Admin(running.address) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
    await running.start_broker(SLAVE, broker_role="SLAVE", broker_id=1, **fast)
    yield running
    await running.close()


async def test_roll_restarts_the_slave_then_switches_over_then_restarts_the_old_master(
    brokers: Cluster, client: AsyncClient, k8s_cluster: K8sCluster, namespace: str
) -> None:
    apply_group(k8s_cluster, namespace, "orbitmq:1.0")
    k8s_cluster.wait_for(
        "both broker pods Ready",
        lambda: sorted(n for n, p in pods(k8s_cluster, namespace).items() if ready(p)) == [MASTER, SLAVE],
        timeout=120,
    )
    await eventually(lambda: brokers.brokers[MASTER].broker.replicas.connected, 10)
    initial = model(namespace, "orbitmq:1.0")
    assert (await reconcile_rolls(client, initial)).decisions == [], "nothing to roll before a change"

    acked: list[str] = []
    failures: list[str] = []
    longest = 0.0
    stop = asyncio.Event()

    async def sender(producer: Producer, n: int) -> None:
        nonlocal longest
        i = 0
        while not stop.is_set():
            began = time.monotonic()
            try:
                await producer.send(Message(TOPIC, f"r{n}-{i}".encode()))
            except Exception as error:  # a failure reaching the caller is what this test forbids
                failures.append(f"{type(error).__name__}: {error}")
            else:
                acked.append(f"r{n}-{i}")
            longest = max(longest, time.monotonic() - began)
            i += 1
            await asyncio.sleep(0.005)

    def address_of(pod: str, ip: str) -> str:
        return brokers.brokers[pod].broker.address

    updated = model(namespace, "orbitmq:1.1")
    steps: list[tuple[RollStep, str]] = []
    events: list[str] = []
    async with Producer("RollingP", brokers.address) as producer:
        tasks = [asyncio.create_task(sender(producer, n)) for n in range(SENDERS)]
        try:
            await eventually(lambda: len(acked) >= 100, 30, lambda: f"{len(acked)} acknowledged")
            apply_group(k8s_cluster, namespace, "orbitmq:1.1")
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                outcome = await reconcile_rolls(client, updated, address_of=address_of)
                events += [reason for reason, _, _ in outcome.events]
                if not outcome.decisions:
                    break
                for decision in outcome.decisions:
                    if decision.step is not RollStep.WAIT:
                        steps.append((decision.step, decision.pod))
                    if decision.step is RollStep.DELETE:  # the pod's process restarts with it
                        await brokers.restart_broker(decision.pod)
                await asyncio.sleep(0.3)
            settled = len(acked)
            await eventually(lambda: len(acked) >= settled + 100, 30, lambda: f"{len(acked)} acknowledged")
        finally:
            stop.set()
            await asyncio.gather(*tasks)

    assert steps == [(RollStep.DELETE, SLAVE), (RollStep.SWITCHOVER, MASTER), (RollStep.DELETE, MASTER)]
    assert events == ["RollingUpdate", "Switchover", "RollingUpdate"]
    sts = k8s_cluster.get_json("statefulset", GROUP_NAME, "-n", namespace)
    revisions = {n: p["metadata"]["labels"][REVISION_LABEL] for n, p in pods(k8s_cluster, namespace).items()}
    assert revisions == {MASTER: sts["status"]["updateRevision"], SLAVE: sts["status"]["updateRevision"]}
    roles = {name: running.broker.ha_state().role for name, running in brokers.brokers.items()}
    assert roles == {MASTER: "SLAVE", SLAVE: "ASYNC_MASTER"}, "the old master came back as a slave"
    assert failures == [], failures[:3]

    await consume_all(brokers.address, TOPIC, acked, "RollingCheck")
    print(
        f"rolling update: {len(acked)} sends acknowledged by {SENDERS} senders through "
        f"{len(steps)} steps, {len(failures)} failed after retries, longest send {longest * 1000:.0f} ms"
    )
