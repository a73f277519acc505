"""The operator process against real pods on the test bed's real node: an ``OrbitMQCluster``
applied with kubectl becomes running name-server and broker containers, and a SIGKILLed
master's group is failed over while producers keep sending.

The failover test produces with acknowledgements (SYNC_MASTER: a SEND_OK means the slave holds
the message), SIGKILLs the master's process and keeps it down as a crash loop would, waits for
the operator to promote the slave, consumes everything afterwards and reports how long writes
paused; the old master, restarted by the kubelet, must come back as a slave of the new epoch.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from k8s_testbed_support import K8sCluster
from operatorkit import wait_condition
from realpods import (
    cluster_cr,
    cluster_deleted_at_exit,
    create_namespace,
    delete_host_volumes,
    group_status,
    host_volumes,
    keep_down,
    kill_pod_process,
    namesrv_address,
    operator_process,
    wait_ready,
)

sys.path.insert(0, str(Path(__file__).parent.parent / "integration" / "client"))
from clusterkit import consume_all, eventually

from orbitmq.client import Message, Producer, SendStatus
from orbitmq.v1 import broker_pb2, broker_pb2_grpc

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900, func_only=True)]

CLUSTER = "fo"
GROUP = f"{CLUSTER}-broker-0"
TOPIC = "RealPodOrders"
SENDERS = 4
KILL_AFTER = 300


def topic_cr(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "orbitmq.io/v1alpha1",
        "kind": "OrbitMQTopic",
        "metadata": {"name": name.lower()},
        "spec": {"cluster": CLUSTER, "topicName": name, "readQueues": 4, "writeQueues": 4},
    }


async def ha_state(address: str) -> broker_pb2.GetHaStateReply:
    async with grpc.aio.insecure_channel(address) as channel:
        return await broker_pb2_grpc.BrokerStub(channel).GetHaState(broker_pb2.GetHaStateRequest(), timeout=2)


async def test_a_killed_master_is_failed_over_on_real_pods(k8s_real_node: K8sCluster, tmp_path: Path) -> None:
    k8s = k8s_real_node
    ns = create_namespace(k8s, "e2e-failover")
    host_volumes(k8s, ns, CLUSTER, groups=1, replicas=2, root=tmp_path / "volumes")
    log = tmp_path / "operator.log"
    try:
        with operator_process(k8s, ns, log), cluster_deleted_at_exit(k8s, ns):
            applied = time.monotonic()
            brokers = {"groups": 1, "slavesPerGroup": 1, "replicationMode": "SYNC_MASTER"}
            failover = {"enabled": True, "detectionWindowMs": 2000}
            k8s.apply(cluster_cr(k8s, CLUSTER, brokers, failover=failover), namespace=ns)
            await asyncio.to_thread(wait_ready, k8s, ns, CLUSTER)
            ready_s = time.monotonic() - applied
            k8s.apply(topic_cr(TOPIC), namespace=ns)
            await asyncio.to_thread(
                wait_condition, k8s, ns, "orbitmqtopics", TOPIC.lower(), "Ready", "True", "Applied", 120
            )
            before = group_status(k8s, ns, CLUSTER, GROUP)
            old_master = before["master"]
            assert old_master and before["writable"], before
            namesrv = namesrv_address(k8s, ns, CLUSTER)

            acked: list[tuple[float, str, SendStatus]] = []
            failures: list[str] = []
            stop = asyncio.Event()

            async def sender(producer: Producer, n: int) -> None:
                for i in itertools.count():
                    if stop.is_set():
                        return
                    body = f"s{n}-{i}"
                    try:
                        result = await producer.send(Message(TOPIC, body.encode()))
                    except Exception as error:  # reported: a send that failed after retries
                        failures.append(f"{type(error).__name__}: {error}")
                    else:
                        acked.append((time.monotonic(), body, result.status))

            async with Producer("RealPodFailover", namesrv) as producer:
                senders = [asyncio.create_task(sender(producer, n)) for n in range(SENDERS)]
                await eventually(lambda: len(acked) >= KILL_AFTER, 60, lambda: f"{len(acked)} acknowledged")
                master_pod = old_master
                killed = time.monotonic()
                assert kill_pod_process(k8s, ns, master_pod) >= 1

                def promoted() -> bool:
                    now = group_status(k8s, ns, CLUSTER, GROUP)
                    return bool(now.get("master")) and now["master"] != old_master

                kills = 1 + await asyncio.to_thread(keep_down, k8s, ns, master_pod, promoted, 60)
                promoted_s = time.monotonic() - killed
                after = group_status(k8s, ns, CLUSTER, GROUP)
                assert after["epoch"] > before["epoch"], (before, after)

                # the old master, restarted by the kubelet once its back-off ends, rejoins as a
                # slave of the new epoch, and SYNC_MASTER sends are SEND_OK again
                async def rejoined() -> bool:
                    ip = k8s.get_json("pod", old_master, "-n", ns)["status"].get("podIP")
                    try:
                        state = await ha_state(f"{ip}:10911")
                    except grpc.aio.AioRpcError:
                        return False
                    return state.role == "SLAVE" and state.epoch == after["epoch"]

                deadline = time.monotonic() + 120
                while not await rejoined():
                    assert time.monotonic() < deadline, "the old master did not rejoin as a slave"
                    await asyncio.sleep(0.5)
                rejoined_s = time.monotonic() - killed
                mark = time.monotonic()
                await eventually(
                    lambda: any(at > mark and st is SendStatus.SEND_OK for at, _, st in acked),
                    30,
                    lambda: "no SEND_OK since the old master rejoined",
                )
                stop.set()
                await asyncio.gather(*senders)

            times = [at for at, _, _ in acked]
            # writes are accepted again at the end of the longest pause in acknowledgements
            # that the kill started (in-flight sends may still be acknowledged just after it)
            longest_pause = max(b - a for a, b in itertools.pairwise(times) if b > killed)
            await consume_all(
                namesrv, TOPIC, [body for _, body, _ in acked], "RealPodFailoverCheck", within=90
            )
            statuses = {s.value: sum(1 for _, _, st in acked if st is s) for s in {st for _, _, st in acked}}
            print(
                f"\nreal pods: apply -> Ready {ready_s:.1f} s; master {old_master} SIGKILLed ({kills} kills "
                f"while kept down), slave promoted after {promoted_s:.1f} s, writes paused at most "
                f"{longest_pause:.2f} s; old master back as a slave after {rejoined_s:.1f} s; "
                f"{len(acked)} acknowledged {statuses}, {len(failures)} failed sends, all consumed"
            )
            assert len(failures) == 0, failures[:3]
            assert longest_pause < 30, longest_pause
    except BaseException:
        print(log.read_text(errors="replace")[-20000:])
        raise
    finally:
        k8s.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        delete_host_volumes(k8s, ns)
