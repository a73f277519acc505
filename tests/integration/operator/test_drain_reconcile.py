"""Scaling broker groups down with a drain, the operator's reconcile steps against a real
cluster in this process (name server + two broker groups): the surplus group's write
permission is wiped, the cluster waits (Draining) while consumer groups lag on it, its objects
are deleted once drained; a drain past its bound is stuck with nothing deleted; a group wanted
again gets its write permission back. Kubernetes is not running here: deletions go to a
recorder with lightkube's ``delete`` signature."""

from __future__ import annotations

import asyncio
import datetime
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from lightkube import AsyncClient

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import FAST, Cluster, Collector, start_cluster

from orbitmq.client import Admin, Message, Producer, PushConsumer
from orbitmq.client.consumer_types import ConsumeFromWhere
from orbitmq_operator.builders import Cluster as ClusterModel
from orbitmq_operator.builders.drain import DrainStep
from orbitmq_operator.reconcile.drain import reconcile_drains
from orbitmq_operator.spec import ClusterSpec

pytestmark = pytest.mark.timeout(120)
CLUSTER = "demo"
TOPIC = "Orders"
GROUP = "Billing"
REGISTER_MS = 200


class DeletionRecorder:
    """What the drain deleted, as (kind, name, namespace)."""

    def __init__(self) -> None:
        self.deleted: list[tuple[str, str, str]] = []

    async def delete(self, kind: type, name: str, *, namespace: str) -> None:
        self.deleted.append((kind.__name__, name, namespace))


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


def model(**brokers: Any) -> ClusterModel:
    spec = ClusterSpec.model_validate({"image": "orbitmq:1.0", "brokers": {"groups": 1, **brokers}})
    return ClusterModel(CLUSTER, "mq", "uid", spec)


async def send(cluster: Cluster, count: int) -> set[str]:
    async with Producer("Shop", cluster.address) as producer:  # a fresh route each time
        return {(await producer.send(Message(TOPIC, b"x"))).broker_name for _ in range(count)}


async def consume(cluster: Cluster, collector: Collector, count: int) -> None:
    consumer = PushConsumer(
        GROUP,
        cluster.address,
        listener=collector.listener(GROUP),
        settings=FAST,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe(TOPIC)
    await consumer.start()
    try:
        await collector.wait_for(count)
    finally:
        await consumer.close()


def later(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)


async def test_drained_group_is_removed_only_after_its_backlog_is_consumed(cluster: Cluster) -> None:
    collector = Collector()
    assert await send(cluster, 8) == {"demo-broker-0", "demo-broker-1"}
    await consume(cluster, collector, 8)
    await send(cluster, 8)  # a backlog on both groups
    recorder = DeletionRecorder()
    client = cast(AsyncClient, recorder)

    first = await reconcile_drains(client, model(), [1], [], cluster.address, later(0), grace_s=0)
    [decision] = first.decisions
    assert decision.step is DrainStep.WAIT and decision.lag > 0
    assert f"{GROUP}/{TOPIC}" in decision.message
    assert [d["name"] for d in first.drains] == ["demo-broker-1"]
    assert first.events[0][0] == "Draining"
    await asyncio.sleep(3 * REGISTER_MS / 1000)  # demo-broker-1 re-registers meanwhile
    assert await send(cluster, 10) == {"demo-broker-0"}, "producers no longer send to the draining group"
    assert recorder.deleted == []

    await consume(cluster, collector, 8 + 8 + 10)
    await asyncio.sleep(1.5)  # the consumer's offsets reach the broker (FAST persists every 0.5 s)
    done = await reconcile_drains(client, model(), [1], first.drains, cluster.address, later(1), grace_s=0)
    assert done.drains == [] and done.decisions == []
    assert recorder.deleted == [
        ("StatefulSet", "demo-broker-1", "mq"),
        ("Service", "demo-broker-1", "mq"),
        ("PodDisruptionBudget", "demo-broker-1", "mq"),
    ]
    assert [reason for reason, _, _ in done.events] == ["Removed"]


async def test_stuck_drain_deletes_nothing_and_scaling_up_restores_writes(cluster: Cluster) -> None:
    collector = Collector()
    await send(cluster, 8)
    await consume(cluster, collector, 8)
    await send(cluster, 8)
    recorder = DeletionRecorder()
    client = cast(AsyncClient, recorder)
    bounded = model(drainTimeoutS=60)

    first = await reconcile_drains(client, bounded, [1], [], cluster.address, later(0), grace_s=0)
    stuck = await reconcile_drains(client, bounded, [1], first.drains, cluster.address, later(61), grace_s=0)
    [decision] = stuck.decisions
    assert decision.step is DrainStep.STUCK and f"{GROUP}/{TOPIC}" in decision.message
    assert stuck.drains[0]["step"] == "Stuck" and recorder.deleted == []
    assert [reason for reason, _, _ in stuck.events] == ["DrainStuck"]

    back = await reconcile_drains(client, model(groups=2), [], stuck.drains, cluster.address, later(62))
    assert back.drains == [] and [reason for reason, _, _ in back.events] == ["DrainCancelled"]
    assert await send(cluster, 8) == {"demo-broker-0", "demo-broker-1"}
    assert recorder.deleted == []
