"""The shipped lag-report SparkApplication (spark-jobs/manifests/lag-report.yaml) run for real on
the test bed's real node, in the repository's Spark image, against an orbitmq cluster of real
pods made by the operator.

The image is the Dockerfile's ``spark`` stage built by scripts/build-image (the session's
``spark_image``) and imported into the node's containerd (``spark_image_on_node``): the pods
run its Java, PySpark, ``orbitmq[spark]``, its entrypoint and the job's file at the manifest's
``mainApplicationFile`` (``local:///opt/orbitmq/spark-jobs/jobs/lag_report.py``), as uid
10001; nothing of the host is mounted but the data volume.  So a failure here is the image's
or the manifest's, as it would be on a user's cluster.

The cluster is named ``orbitmq`` as the chart's default, so the job reaches it exactly as the
manifest says, at ``orbitmq-namesrv.<namespace>.svc:9876`` (the node's CoreDNS, kube-proxy):
only the namespace in that argument changes.  The test produces to a topic of four queues from
the host (pod IPs are routable), commits a group's offsets per queue, and applies the manifest
with the image's reference (what the kustomization's ``images`` sets), the pods placed on the
real node, and the manifest's ``data`` volume on a hostPath instead of the PVC.  kubeflow's
controller (a host process, see sparkopkit) submits; the driver pod asks the API server for an
executor pod, the executor writes the Parquet, the driver commits it and exits 0, the
application is COMPLETED.  The test then reads the Parquet back and compares it row by row with
the brokers' offsets.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import sparkopkit
from k8s_testbed_support import K8sCluster
from realpods import cluster_cr, host_volumes, namesrv_address, operated_namespace, wait_ready

from orbitmq.client import Message, Producer
from orbitmq.client.admin import Admin
from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.client.queue import MessageQueue

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300, func_only=True)]

CLUSTER = "orbitmq"  # the chart's default cluster.name, which the shipped manifests name
TOPIC = "SparkLagOrders"
GROUP = "spark-lag-billing"
QUEUES = 4
MESSAGES = 60
APP = "orbitmq-lag-report"
# Where the image has the job (the Dockerfile's spark stage), as the shipped manifest names it.
IMAGE_JOB = "local:///opt/orbitmq/spark-jobs/jobs/lag_report.py"
# The real node runs the orbitmq pods too: each Spark pod asks for a fifth of a core.
CORE_REQUEST = "200m"


async def produce_and_commit(namesrv: str) -> list[Any]:
    """MESSAGES spread over the topic's queues; the group commits 0, 3, 6, 9 on them in order.
    Returns the brokers' consume progress of the group (what the job should report)."""
    async with Admin(namesrv) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        await admin.create_group(GROUP)
    async with Producer("spark-lag-producer", namesrv) as producer:
        for i in range(MESSAGES):
            await producer.send(Message(TOPIC, f"lag-{i}".encode()))
    async with Admin(namesrv) as admin:
        queues = sorted((broker, queue.queue_id) for broker, queue in await admin.topic_status(TOPIC))
    assert len(queues) == QUEUES, queues
    async with PullConsumer(GROUP, namesrv) as consumer:
        for index, (broker, queue_id) in enumerate(queues):
            await consumer.commit_offset(MessageQueue(TOPIC, broker, queue_id), index * 3)
    async with Admin(namesrv) as admin:
        return list(await admin.consume_progress(GROUP, TOPIC))


def with_argument(arguments: list[str], flag: str, value: str) -> list[str]:
    """``arguments`` with ``flag``'s value replaced (the flag must be there: the manifest's)."""
    index = arguments.index(flag)
    return [*arguments[: index + 1], value, *arguments[index + 2 :]]


def lag_report_app(
    k8s: K8sCluster, operator: sparkopkit.SparkOperator, image: str, output: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The shipped manifest (as loaded) and what is applied: in the operator's namespace, the
    Spark ``image`` imported into the real node, the pods on that node, the data volume on
    ``output``; the job's file is the manifest's own (in the image)."""
    node = k8s.info["real_node"]
    shipped = sparkopkit.load_app(sparkopkit.MANIFESTS / "lag-report.yaml", operator.namespace)
    app = sparkopkit.load_app(sparkopkit.MANIFESTS / "lag-report.yaml", operator.namespace)
    spec = app["spec"]
    # The manifest names the chart's cluster in the kustomization's namespace.
    assert (
        spec["arguments"][spec["arguments"].index("--namesrv") + 1] == f"{CLUSTER}-namesrv.orbitmq.svc:9876"
    )
    spec["arguments"] = [
        *with_argument(spec["arguments"], "--namesrv", f"{CLUSTER}-namesrv.{operator.namespace}.svc:9876"),
        "--group",
        GROUP,
    ]
    assert spec["mainApplicationFile"] == IMAGE_JOB
    spec["image"] = image  # as the kustomization's `images` would set it
    spec["imagePullPolicy"] = "Never"  # imported into the node's containerd; there is no registry
    spec["driver"].update(serviceAccount=operator.spark_account, coreRequest=CORE_REQUEST)
    spec["executor"]["coreRequest"] = CORE_REQUEST
    spec["restartPolicy"] = {"type": "Never"}  # a failure shows as FAILED, not as a rerun
    # The test bed's two cores are shared: JVMs that start faster, no UI.
    spec["sparkConf"] = {
        **spec.get("sparkConf", {}),
        "spark.ui.enabled": "false",
        "spark.driver.extraJavaOptions": sparkopkit.QUICK_JVM,
        "spark.executor.extraJavaOptions": sparkopkit.QUICK_JVM,
    }
    data = {"name": "data", "hostPath": {"path": str(output), "type": "Directory"}}
    on_node = {
        role: sparkopkit.pod_template(name, volumes=[data], nodeSelector=node["labels"])
        for role, name in sparkopkit.CONTAINERS.items()
    }
    sparkopkit.add_templates(app, on_node)
    return shipped, app


def timeline(app: dict[str, Any], driver: dict[str, Any]) -> str:
    """Where the time went, from the objects' own timestamps (whole seconds), from submission."""
    marks = {
        "submitted": app["status"]["lastSubmissionAttemptTime"],
        "driver pod": driver["metadata"]["creationTimestamp"],
        "driver started": driver["status"]["containerStatuses"][0]["state"]["terminated"]["startedAt"],
        "driver exited": driver["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"],
        "COMPLETED": app["status"]["terminationTime"],
    }
    at = {name: datetime.fromisoformat(value.replace("Z", "+00:00")) for name, value in marks.items()}
    start = at["submitted"]
    return ", ".join(f"{name} +{(moment - start).total_seconds():.0f}s" for name, moment in at.items())


def test_shipped_lag_report_completes_in_the_spark_image_on_real_pods(
    k8s_real_node: K8sCluster, spark_image_on_node: str, tmp_path: Path
) -> None:
    k8s, started = k8s_real_node, time.monotonic()
    output = tmp_path / "spark-data"
    output.mkdir()
    os.chmod(output, 0o777)  # the image's uid 10001 writes the Parquet
    with operated_namespace(k8s, "e2e-spark", tmp_path) as ns:
        host_volumes(k8s, ns, CLUSTER, groups=1, replicas=1, root=tmp_path / "volumes")
        k8s.apply(
            cluster_cr(k8s, CLUSTER, {"groups": 1, "slavesPerGroup": 0, "replicationMode": "ASYNC_MASTER"}),
            namespace=ns,
        )
        wait_ready(k8s, ns, CLUSTER)
        ready_s = time.monotonic() - started
        progress = asyncio.run(produce_and_commit(namesrv_address(k8s, ns, CLUSTER)))
        expected = {
            (GROUP, q.topic, q.broker_name, q.queue_id): (q.consumer_offset, q.broker_offset, q.lag)
            for q in progress
        }
        assert len(expected) == QUEUES and sum(lag for *_, lag in expected.values()) == MESSAGES - 18

        with sparkopkit.running_spark_operator(k8s, ns, tmp_path / "spark-operator") as operator:
            shipped, app = lag_report_app(k8s, operator, spark_image_on_node, output)
            applied = time.monotonic()
            k8s.apply(app)
            try:
                done = sparkopkit.wait_state(k8s, operator, APP, ("COMPLETED",), timeout=240)
            except BaseException:
                pods = k8s.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False).stdout
                logs = k8s.kubectl("logs", f"{APP}-driver", "-n", ns, "--tail=80", check=False)
                print(f"--- pods\n{pods}\n--- driver log\n{logs.stdout}{logs.stderr}")
                raise
            spark_s = time.monotonic() - applied
            driver = k8s.get_json("pod", done["status"]["driverInfo"]["podName"], "-n", ns)
            log = k8s.kubectl("logs", driver["metadata"]["name"], "-n", ns).stdout

    # The pod as the shipped manifest made it: the image with its own entrypoint and job file,
    # its arguments and mount, on the real node; nothing of the host but the data volume.
    container = driver["spec"]["containers"][0]
    assert driver["spec"]["nodeName"] == k8s.info["real_node"]["name"]
    assert container["image"] == spark_image_on_node and "command" not in container
    assert container["args"][0] == "driver" and IMAGE_JOB in container["args"]
    host_paths = [v["hostPath"]["path"] for v in driver["spec"]["volumes"] if "hostPath" in v]
    assert host_paths == [str(output)]
    status = driver["status"]["containerStatuses"][0]
    assert status["imageID"], status  # the node's containerd ran the imported image
    assert container["args"][-len(app["spec"]["arguments"]) :] == app["spec"]["arguments"]
    assert "--output" in shipped["spec"]["arguments"] and "/var/lib/orbitmq-spark/lag" in container["args"]
    assert {"name": "data", "mountPath": "/var/lib/orbitmq-spark"} in container["volumeMounts"]
    assert driver["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    summary = json.loads(next(line for line in reversed(log.splitlines()) if line.startswith('{"job"')))
    assert summary["status"] == "ok" and summary["queues"] == QUEUES, summary
    assert summary["total_lag"] == MESSAGES - 18 and summary["output"] == "/var/lib/orbitmq-spark/lag"

    # The Parquet the executor wrote and the driver committed, row by row.
    lag = output / "lag"
    table = pq.read_table(lag)
    rows = table.to_pylist()
    got = {
        (r["group"], r["topic"], r["broker"], r["queue"]): (r["committed_offset"], r["max_offset"], r["lag"])
        for r in rows
    }
    assert len(rows) == QUEUES and got == expected
    assert {str(r["date"]) for r in rows} == {summary["at"][:10]}
    assert [p.name for p in lag.iterdir() if p.is_dir()] == [f"date={summary['at'][:10]}"]
    print(
        f"\nspark on real pods: cluster Ready {ready_s:.1f}s, "
        f"SparkApplication COMPLETED {spark_s:.1f}s after apply ({timeline(done, driver)})"
    )
