"""Topic and consumer-group CRs reconciled through the brokers' admin RPCs, against a real
cluster in this process (name server + brokers): created on every master of the cluster,
idempotent, updated in place, re-applied to a broker group added later, a change that would
hide messages refused until forced, deleted (and a second deletion is not an error)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import Cluster, start_cluster

from orbitmq.client import Admin, Message, Producer
from orbitmq_operator.reconcile.conditions import Reason
from orbitmq_operator.reconcile.resources import (
    ResourceRefused,
    apply_group,
    apply_topic,
    delete_group,
    delete_topic,
)
from orbitmq_operator.spec import ConsumerGroupSpec, TopicSpec

pytestmark = pytest.mark.timeout(120)
CLUSTER = "demo"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=("demo-broker-0",), cluster=CLUSTER)
    yield running
    await running.close()


def topic(**fields: object) -> TopicSpec:
    return TopicSpec.model_validate({"cluster": CLUSTER, "topicName": "Orders", **fields})


async def queues(cluster: Cluster) -> dict[str, tuple[int, int]]:
    async with Admin(cluster.address) as admin:
        route = await admin.route("Orders")
    return {q.broker_name: (q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas}


async def test_topic_created_updated_reapplied_and_deleted(cluster: Cluster) -> None:
    applied = await apply_topic(cluster.address, topic(), CLUSTER)
    assert applied.broker_names == ["demo-broker-0"]
    assert applied.changed == ["demo-broker-0: created"]
    again = await apply_topic(cluster.address, topic(), CLUSTER)
    assert again.changed == [], "applying the same CR again changes nothing"

    updated = await apply_topic(cluster.address, topic(readQueues=8, writeQueues=8), CLUSTER)
    assert updated.changed == ["demo-broker-0: updated"]
    assert (await queues(cluster))["demo-broker-0"] == (8, 8)

    await cluster.start_broker("demo-broker-1", cluster=CLUSTER)  # a group added later
    later = await apply_topic(cluster.address, topic(readQueues=8, writeQueues=8), CLUSTER)
    assert later.broker_names == ["demo-broker-0", "demo-broker-1"]
    assert later.changed == ["demo-broker-1: created"]

    async with Producer("OrdersP", cluster.address) as producer:
        for i in range(32):
            await producer.send(Message("Orders", f"{i}".encode()))
    with pytest.raises(ResourceRefused) as refused:
        await apply_topic(cluster.address, topic(readQueues=2, writeQueues=2), CLUSTER)
    assert refused.value.reason is Reason.WOULD_HIDE_MESSAGES and not refused.value.retriable
    assert "spec.force: true" in refused.value.message
    assert (await queues(cluster))["demo-broker-0"] == (8, 8), "nothing changed"
    forced = await apply_topic(cluster.address, topic(readQueues=2, writeQueues=2, force=True), CLUSTER)
    assert sorted(forced.changed) == ["demo-broker-0: updated", "demo-broker-1: updated"]

    assert sorted(await delete_topic(cluster.address, "Orders", CLUSTER)) == sorted(
        b.broker.address for b in cluster.brokers.values()
    )
    assert await delete_topic(cluster.address, "Orders", CLUSTER) == [], "already gone is done"


async def test_consumer_group_created_with_its_settings_and_deleted(cluster: Cluster) -> None:
    spec = ConsumerGroupSpec.model_validate(
        {
            "cluster": CLUSTER,
            "groupName": "billing",
            "retryMaxTimes": 3,
            "broadcastAllowed": False,
            "orderly": True,
        }
    )
    applied = await apply_group(cluster.address, spec, CLUSTER)
    assert applied.broker_names == ["demo-broker-0"]
    async with Admin(cluster.address) as admin:
        config = (await admin.groups(CLUSTER))["billing"]
    assert (config.retry_max_times, config.consume_broadcast_enable, config.consume_message_orderly) == (
        3,
        False,
        True,
    )
    assert await delete_group(cluster.address, "billing", CLUSTER) == [
        cluster.brokers["demo-broker-0"].broker.address
    ]
    assert await delete_group(cluster.address, "billing", CLUSTER) == []


async def test_a_cluster_with_no_master_is_brokers_unreachable(cluster: Cluster) -> None:
    with pytest.raises(ResourceRefused) as refused:
        await apply_topic(cluster.address, topic(cluster="other"), "other")
    assert refused.value.reason is Reason.BROKERS_UNREACHABLE and refused.value.retriable
    assert "other" in refused.value.message
