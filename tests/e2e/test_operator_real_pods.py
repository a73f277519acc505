"""The operator process against real pods on the test bed's real node: ``OrbitMQCluster``
resources applied, scaled and patched with kubectl become running name-server and broker
containers, while producers keep sending and every acknowledged message is consumed after.

* Failover: SYNC_MASTER (a SEND_OK means the slave holds the message); the master's process is
  SIGKILLed and kept down as a crash loop would, the operator promotes the slave, writes pause
  briefly, and the old master, restarted by the kubelet, comes back as a slave of the new epoch.
* Scaling and rolling updates: a second broker group is added (the topic and consumer-group
  resources reach it, producers use it), a second name server is added (the brokers' settings
  name every name server, so every broker pod restarts: slaves first, masters after a
  switchover; both name servers then route to both groups), and the group is removed again
  through a drain that waits for the consumer group to consume its backlog.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from k8s_testbed_support import K8sCluster
from operatorkit import get, wait_condition
from realpods import (
    Senders,
    broker_pods,
    cluster_cr,
    group_status,
    host_volumes,
    keep_down,
    kill_pod_process,
    namesrv_address,
    operated_namespace,
    rejoined_as_slave,
    rolled,
    update_revisions,
    wait,
    wait_ready,
)

sys.path.insert(0, str(Path(__file__).parent.parent / "integration" / "client"))
from clusterkit import Collector, consume_all, consuming, eventually

from orbitmq.client import Admin, Producer, SendStatus

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900, func_only=True)]

TOPIC = "RealPodOrders"
CONSUMER_GROUP = "RealPodBilling"
SENDERS = 4
WARM_UP = 300


def topic_cr(cluster: str) -> dict[str, Any]:
    return {
        "apiVersion": "orbitmq.io/v1alpha1",
        "kind": "OrbitMQTopic",
        "metadata": {"name": TOPIC.lower()},
        "spec": {"cluster": cluster, "topicName": TOPIC, "readQueues": 4, "writeQueues": 4},
    }


def consumer_group_cr(cluster: str) -> dict[str, Any]:
    return {
        "apiVersion": "orbitmq.io/v1alpha1",
        "kind": "OrbitMQConsumerGroup",
        "metadata": {"name": CONSUMER_GROUP.lower()},
        "spec": {"cluster": cluster, "groupName": CONSUMER_GROUP},
    }


async def start_cluster(k8s: K8sCluster, ns: str, name: str, brokers: dict[str, Any], **spec: Any) -> float:
    """Apply the cluster and its topic; returns seconds from apply to the cluster's Ready."""
    applied = time.monotonic()
    k8s.apply(cluster_cr(k8s, name, brokers, **spec), namespace=ns)
    await asyncio.to_thread(wait_ready, k8s, ns, name)
    ready_s = time.monotonic() - applied
    k8s.apply(topic_cr(name), namespace=ns)
    await asyncio.to_thread(
        wait_condition, k8s, ns, "orbitmqtopics", TOPIC.lower(), "Ready", "True", "Applied", 120
    )
    return ready_s


async def test_a_killed_master_is_failed_over_on_real_pods(k8s_real_node: K8sCluster, tmp_path: Path) -> None:
    k8s, cluster, group = k8s_real_node, "fo", "fo-broker-0"
    with operated_namespace(k8s, "e2e-failover", tmp_path) as ns:
        host_volumes(k8s, ns, cluster, groups=1, replicas=2, root=tmp_path / "volumes")
        brokers = {"groups": 1, "slavesPerGroup": 1, "replicationMode": "SYNC_MASTER"}
        failover = {"enabled": True, "detectionWindowMs": 2000}
        ready_s = await start_cluster(k8s, ns, cluster, brokers, failover=failover)
        before = group_status(k8s, ns, cluster, group)
        old_master = before["master"]
        assert old_master and before["writable"], before
        namesrv = namesrv_address(k8s, ns, cluster)

        async with Producer("RealPodFailover", namesrv) as producer:
            senders = Senders(producer, TOPIC, SENDERS)
            await eventually(lambda: len(senders.acked) >= WARM_UP, 60, lambda: f"{len(senders.acked)} acked")
            killed = time.monotonic()
            assert kill_pod_process(k8s, ns, old_master) >= 1

            def promoted() -> bool:
                now = group_status(k8s, ns, cluster, group)
                return bool(now.get("master")) and now["master"] != old_master

            kills = 1 + await asyncio.to_thread(keep_down, k8s, ns, old_master, promoted, 60)
            promoted_s = time.monotonic() - killed
            after = group_status(k8s, ns, cluster, group)
            assert after["epoch"] > before["epoch"], (before, after)

            await rejoined_as_slave(k8s, ns, old_master, after["epoch"], within=120)
            rejoined_s = time.monotonic() - killed
            mark = time.monotonic()
            await eventually(
                lambda: any(a.status is SendStatus.SEND_OK for a in senders.since(mark)),
                30,
                lambda: "no SEND_OK since the old master rejoined",
            )
            await senders.stop()

        # writes are accepted again at the end of the longest pause the kill started
        # (sends in flight at the kill may still be acknowledged just after it)
        pause = senders.longest_pause(killed)
        await consume_all(namesrv, TOPIC, [a.body for a in senders.acked], "RealPodFailoverCheck", within=90)
        print(
            f"\nreal pods, failover: apply -> Ready {ready_s:.1f} s; master {old_master} SIGKILLed "
            f"({kills} kills while kept down), slave promoted after {promoted_s:.1f} s, writes paused "
            f"at most {pause:.2f} s; old master back as a slave after {rejoined_s:.1f} s; "
            f"{len(senders.acked)} acknowledged {senders.statuses()}, {len(senders.failures)} failed "
            "sends, all consumed"
        )
        assert senders.failures == [], senders.failures[:3]
        assert pause < 30, pause


async def test_scale_up_roll_and_drain_on_real_pods(k8s_real_node: K8sCluster, tmp_path: Path) -> None:
    k8s, cluster = k8s_real_node, "sc"
    with operated_namespace(k8s, "e2e-scale", tmp_path) as ns:
        host_volumes(k8s, ns, cluster, groups=2, replicas=2, root=tmp_path / "volumes")
        await start_cluster(k8s, ns, cluster, {"groups": 1, "slavesPerGroup": 1})
        k8s.apply(consumer_group_cr(cluster), namespace=ns)
        namesrv = namesrv_address(k8s, ns, cluster)
        collector = Collector()
        async with (
            Producer("RealPodScale", namesrv) as producer,
            consuming(namesrv, TOPIC, CONSUMER_GROUP, collector),
        ):
            senders = Senders(producer, TOPIC, SENDERS)
            await eventually(lambda: len(senders.acked) >= WARM_UP, 60, lambda: f"{len(senders.acked)} acked")

            # up: the new group gets the topic and the group, and producers use it
            began = time.monotonic()
            k8s.kubectl("scale", "orbitmqclusters.orbitmq.io", cluster, "--replicas=2", "-n", ns)
            await asyncio.to_thread(wait_ready, k8s, ns, cluster)
            new_group = f"{cluster}-broker-1"
            await eventually(
                lambda: any(a.broker == new_group for a in senders.since(began)),
                60,
                lambda: f"no send reached {new_group}",
            )
            scaled_up_s = time.monotonic() - began
            for plural, name in (("orbitmqtopics", TOPIC), ("orbitmqconsumergroups", CONSUMER_GROUP)):
                applied_to = get(k8s, ns, plural, name.lower())["status"]["appliedTo"]
                assert new_group in applied_to, (plural, applied_to)

            # a second name server: the brokers' settings name every name server, so each broker
            # pod restarts (slaves first, masters after a switchover) and no send fails
            before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in broker_pods(k8s, ns, cluster)}
            old_revisions = update_revisions(k8s, ns, cluster, 2)
            began = time.monotonic()
            patch = '{"spec": {"nameServers": {"replicas": 2}}}'
            k8s.kubectl("patch", "orbitmqclusters.orbitmq.io", cluster, "-n", ns, "--type=merge", "-p", patch)
            # first the operator's new pod templates (until then the old pods look rolled), then the roll
            await wait(
                "new broker pod templates",
                lambda: all(
                    new != old
                    for new, old in zip(update_revisions(k8s, ns, cluster, 2), old_revisions, strict=True)
                ),
                120,
            )
            await wait("the rolling update", lambda: rolled(k8s, ns, cluster, 2), 300)
            roll_s, roll_pause = time.monotonic() - began, senders.longest_pause(began)
            after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in broker_pods(k8s, ns, cluster)}
            assert all(after[name] != uid for name, uid in before.items()), "a pod was not restarted"
            await asyncio.to_thread(wait_ready, k8s, ns, cluster)
            namesrvs = namesrv_address(k8s, ns, cluster).split(";")
            assert len(namesrvs) == 2, namesrvs
            for address in namesrvs:  # the new name server has every group's route too
                async with Admin(address) as admin:
                    route = await admin.route(TOPIC)
                assert {b.broker_name for b in route.broker_datas} == {f"{cluster}-broker-0", new_group}

            # down: the group is drained (consumers catch up on it) before it is removed
            began = time.monotonic()
            k8s.kubectl("scale", "orbitmqclusters.orbitmq.io", cluster, "--replicas=1", "-n", ns)

            def removed() -> bool:
                gone = k8s.kubectl("get", "statefulset", new_group, "-n", ns, check=False).returncode != 0
                return gone and not (get(k8s, ns, "orbitmqclusters", cluster).get("status") or {}).get(
                    "drains"
                )

            await wait(f"{new_group} drained and removed", removed, 300)
            drain_s = time.monotonic() - began
            await asyncio.to_thread(wait_ready, k8s, ns, cluster)
            mark = time.monotonic()
            await eventually(lambda: len(senders.since(mark)) >= 50, 30, lambda: "no send after the drain")
            await senders.stop()
            acked = {a.body for a in senders.acked}
            await eventually(
                lambda: acked <= set(collector.bodies()),
                60,
                lambda: f"{len(acked - set(collector.bodies()))} acknowledged messages not consumed",
            )
        listed = k8s.get_json("events", "-n", ns)["items"]
        reasons = [e["reason"] for e in listed]
        unplanned = [e["message"] for e in listed if e["reason"] == "Failover"]  # a roll switches over
        print(
            f"\nreal pods, scaling: up to 2 groups (first send on the new group) {scaled_up_s:.1f} s; "
            f"second name server and rolling update of 4 broker pods {roll_s:.1f} s, longest pause "
            f"{roll_pause:.2f} s; drain and removal {drain_s:.1f} s; {len(senders.acked)} acknowledged, "
            f"{len(senders.failures)} failed sends, all consumed; events {sorted(set(reasons))}"
        )
        assert senders.failures == [], senders.failures[:3]
        assert {"Switchover", "Draining"} <= set(reasons), reasons
        assert unplanned == [], unplanned
