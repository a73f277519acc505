"""The generated CRDs (charts/orbitmq/crds/) on a real API server: defaults, refusals, columns.

What a user relies on before any operator runs: a minimal resource is stored with the same
defaults the operator's models assume, and a bad one is refused by the API server itself with
the field and the rule (schema or CEL), never silently stored for the operator to trip over.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_testbed_support import E2E_TIMEOUT, REPO_ROOT, CommandError, K8sCluster

from orbitmq_operator.crds import KINDS
from orbitmq_operator.spec import API_VERSION, ClusterSpec, ConsumerGroupSpec, TopicSpec

pytestmark = [pytest.mark.e2e, E2E_TIMEOUT]

CRD_DIR = REPO_ROOT / "charts" / "orbitmq" / "crds"
CLUSTERS = "orbitmqclusters.orbitmq.io"
TOPICS = "orbitmqtopics.orbitmq.io"
IMAGE = "orbitmq:test"


@pytest.fixture(scope="module")
def crds(k8s_cluster: K8sCluster) -> Iterator[None]:
    """The committed CRD files applied (what the chart installs) and served."""
    k8s_cluster.kubectl("apply", "-f", str(CRD_DIR))
    for kind in KINDS:
        k8s_cluster.kubectl("wait", "--for=condition=Established", f"crd/{kind.name}", "--timeout=60s")
        # Established precedes the watch cache's start; one list waits the 429s out (kubectl retries).
        k8s_cluster.kubectl("get", kind.name, "--all-namespaces")
    yield


def cluster(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "OrbitMQCluster", "metadata": {"name": name}, "spec": spec}


def topic(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "OrbitMQTopic", "metadata": {"name": name}, "spec": spec}


def group(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "OrbitMQConsumerGroup",
        "metadata": {"name": name},
        "spec": spec,
    }


def brokers(**fields: Any) -> dict[str, Any]:
    return {"image": IMAGE, "brokers": fields}


def _filled(value: Any) -> Any:
    """``value`` without empty maps and nulls: an absent map and an empty one mean the same."""
    if isinstance(value, dict):
        kept = {key: _filled(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item not in ({}, None)}
    return value


def refusal(k8s: K8sCluster, manifest: dict[str, Any], namespace: str) -> str:
    """Apply ``manifest``, expecting the API server to refuse it; its message, on one line.

    ``--validate=false`` turns kubectl's own checks off, so the refusal is the API server's (a
    client other than kubectl gets the same).
    """
    doc = json.dumps(manifest)
    with pytest.raises(CommandError) as refused:
        k8s.kubectl("apply", "--validate=false", "-n", namespace, "-f", "-", input=doc)
    return " ".join(refused.value.stderr.split())


@pytest.mark.usefixtures("crds")
def test_minimal_resources_are_stored_with_the_models_defaults(
    k8s_cluster: K8sCluster, namespace: str
) -> None:
    """The API server fills in exactly the defaults the operator's models have."""
    k8s_cluster.apply(
        cluster("mini", image=IMAGE),
        topic("orders", cluster="mini", topicName="Orders_v1"),
        group("billing", cluster="mini", groupName="billing"),
        namespace=namespace,
    )

    stored = k8s_cluster.get_json(CLUSTERS, "mini", "-n", namespace)["spec"]
    assert stored["brokers"]["groups"] == 1
    assert stored["brokers"]["slavesPerGroup"] == 1
    assert stored["brokers"]["replicationMode"] == "SYNC_MASTER"
    assert stored["brokers"]["storage"] == {"size": "10Gi", "retention": "Retain"}
    assert stored["nameServers"]["replicas"] == 2
    assert stored["failover"] == {"enabled": True, "detectionWindowMs": 3000}
    assert stored["metrics"] == {"port": 9100}
    # Every default, not just those above: the stored spec is the model's defaults on the wire.
    assert _filled(stored) == _filled(ClusterSpec(image=IMAGE).model_dump(by_alias=True, mode="json"))

    stored_topic = k8s_cluster.get_json(TOPICS, "orders", "-n", namespace)["spec"]
    assert stored_topic == TopicSpec(cluster="mini", topic_name="Orders_v1").model_dump(
        by_alias=True, mode="json"
    )
    stored_group = k8s_cluster.get_json("omqgroup", "billing", "-n", namespace)["spec"]
    assert stored_group["retryMaxTimes"] == 16
    assert stored_group == ConsumerGroupSpec(cluster="mini", group_name="billing").model_dump(
        by_alias=True, mode="json"
    )


@pytest.mark.usefixtures("crds")
@pytest.mark.parametrize(
    ("manifest", "field", "rule"),
    [
        (cluster("zero", **brokers(groups=0)), "spec.brokers.groups", "greater than or equal to 1"),
        (
            cluster("sync", **brokers(replicationMode="SYNC_MASTER", slavesPerGroup=0)),
            "spec.brokers.slavesPerGroup",
            "replicationMode SYNC_MASTER needs slavesPerGroup >= 1",
        ),
        (cluster("mode", **brokers(flushMode="SOMETIMES")), "spec.brokers.flushMode", "supported values"),
        (cluster("size", **brokers(storage={"size": "lots"})), "spec.brokers.storage.size", "should match"),
        (cluster("noimage"), "spec.image", "Required value"),
        (cluster("x" * 43, image="i"), "metadata.name", "at most 42 characters"),
        (cluster("9lives", image="i"), "metadata.name", "metadata.name '9lives' must start with a letter"),
        (topic("bad", cluster="c", topicName="bad name!"), "spec.topicName", "should match"),
        (
            topic("many", cluster="c", topicName="t", readQueues=2000),
            "spec.readQueues",
            "less than or equal to 1024",
        ),
        (
            topic("fewer", cluster="c", topicName="t", readQueues=2, writeQueues=4),
            "spec.readQueues",
            "readQueues must be at least writeQueues",
        ),
        (group("badgroup", cluster="c", groupName="a@b"), "spec.groupName", "should match"),
        (topic("nocluster", cluster="Not_A_Name", topicName="t"), "spec.cluster", "should match"),
        (
            cluster("ownvolume", image="i", pod={"volumes": [{"name": "data", "emptyDir": {}}]}),
            "spec.pod.volumes",
            "volume names data, config, tmp are the operator's own",
        ),
        (
            cluster("nomount", image="i", pod={"volumeMounts": [{"name": "gone", "mountPath": "/x"}]}),
            "spec.pod.volumeMounts",
            "every volumeMounts[].name must name a volume of spec.pod.volumes",
        ),
        (
            cluster(
                "ownmount",
                image="i",
                pod={
                    "volumes": [{"name": "v", "emptyDir": {}}],
                    "volumeMounts": [{"name": "v", "mountPath": "/tmp"}],
                },
            ),
            "spec.pod.volumeMounts",
            "mount paths /var/lib/orbitmq, /etc/orbitmq, /tmp are the operator's own",
        ),
        (
            cluster("ownenv", image="i", pod={"env": [{"name": "POD_IP", "value": "1.2.3.4"}]}),
            "spec.pod.env",
            "environment variables POD_IP are the operator's own",
        ),
    ],
    ids=lambda value: value["metadata"]["name"] if isinstance(value, dict) else None,
)
def test_invalid_resources_are_refused_naming_field_and_rule(
    k8s_cluster: K8sCluster, namespace: str, manifest: dict[str, Any], field: str, rule: str
) -> None:
    message = refusal(k8s_cluster, manifest, namespace)
    # the error naming the rule starts with the field's path ("<nil>: Invalid value" for a
    # rule on the resource's root without a fieldPath)
    errors = message.split(" is invalid: ", 1)[-1].removeprefix("* ").split(" * ")
    [error] = [e for e in errors if rule in e] or [message]
    assert error.startswith(f"{field}: "), message
    assert not k8s_cluster.get_json("orbitmq", "-n", namespace)["items"]


@pytest.mark.usefixtures("crds")
def test_unknown_fields_are_refused(k8s_cluster: K8sCluster, namespace: str) -> None:
    """A misspelt field is an error (strict field validation), not silently pruned."""
    doc = json.dumps(cluster("typo", **brokers(slavePerGroup=2)))
    with pytest.raises(CommandError) as refused:
        # Server-side apply: the API server's strict field validation, not kubectl's own.
        k8s_cluster.kubectl(
            "apply", "--server-side", "--validate=strict", "-n", namespace, "-f", "-", input=doc
        )
    assert "Error from server" in refused.value.stderr, refused.value.stderr
    assert ".spec.brokers.slavePerGroup: field not declared in schema" in refused.value.stderr


@pytest.mark.usefixtures("crds")
def test_storage_may_grow_but_not_shrink_nor_change_class(k8s_cluster: K8sCluster, namespace: str) -> None:
    k8s_cluster.apply(
        cluster("store", **brokers(storage={"size": "10Gi", "storageClassName": "fast"})), namespace=namespace
    )

    shrink = refusal(
        k8s_cluster,
        cluster("store", **brokers(storage={"size": "5Gi", "storageClassName": "fast"})),
        namespace,
    )
    assert "spec.brokers.storage.size" in shrink and "storage size cannot shrink" in shrink, shrink
    # A quantity is compared by value, not as text: 10240Mi is 10Gi, not less.
    k8s_cluster.apply(
        cluster("store", **brokers(storage={"size": "10240Mi", "storageClassName": "fast"})),
        namespace=namespace,
    )

    changed = refusal(
        k8s_cluster,
        cluster("store", **brokers(storage={"size": "20Gi", "storageClassName": "slow"})),
        namespace,
    )
    assert "spec.brokers.storage.storageClassName" in changed, changed
    assert "storageClassName cannot be changed once set" in changed, changed
    removed = refusal(k8s_cluster, cluster("store", **brokers(storage={"size": "20Gi"})), namespace)
    assert "spec.brokers.storage.storageClassName" in removed, removed
    assert "cannot be added or removed" in removed, removed

    k8s_cluster.apply(
        cluster("store", **brokers(storage={"size": "20Gi", "storageClassName": "fast"})), namespace=namespace
    )
    stored = k8s_cluster.get_json(CLUSTERS, "store", "-n", namespace)["spec"]["brokers"]["storage"]
    assert stored == {"size": "20Gi", "storageClassName": "fast", "retention": "Retain"}


@pytest.mark.usefixtures("crds")
def test_immutable_fields_of_topics_groups_and_segments(k8s_cluster: K8sCluster, namespace: str) -> None:
    k8s_cluster.apply(
        topic("orders", cluster="east", topicName="orders"),
        group("billing", cluster="east", groupName="billing"),
        cluster("seg", **brokers(segmentMib=64)),
        namespace=namespace,
    )
    moved = refusal(k8s_cluster, topic("orders", cluster="west", topicName="orders"), namespace)
    assert "spec.cluster" in moved and "cluster cannot be changed once set" in moved, moved
    renamed = refusal(k8s_cluster, group("billing", cluster="east", groupName="billing2"), namespace)
    assert "spec.groupName" in renamed and "groupName cannot be changed once set" in renamed, renamed
    resized = refusal(k8s_cluster, cluster("seg", **brokers(segmentMib=128)), namespace)
    assert "spec.brokers.segmentMib" in resized and "cannot be changed once set" in resized, resized
    # Mutable fields still change.
    k8s_cluster.apply(
        topic("orders", cluster="east", topicName="orders", readQueues=8, writeQueues=8), namespace=namespace
    )
    assert k8s_cluster.get_json(TOPICS, "orders", "-n", namespace)["spec"]["cluster"] == "east"


@pytest.mark.usefixtures("crds")
def test_kubectl_get_shows_columns_and_scale_sets_broker_groups(
    k8s_cluster: K8sCluster, namespace: str
) -> None:
    k8s_cluster.apply(cluster("shown", image=IMAGE), namespace=namespace)
    status = {
        "status": {
            "observedGeneration": 1,
            "brokerGroupsReady": 1,
            "brokerGroups": [
                {"name": "shown-broker-0", "master": "shown-broker-0-0", "epoch": 3, "writable": True}
            ],
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "AllGroupsWritable", "message": "1 of 1 groups"}
            ],
        }
    }
    k8s_cluster.kubectl(
        "patch",
        CLUSTERS,
        "shown",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )

    table = k8s_cluster.kubectl("get", "omq", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "GROUPS", "GROUPS-READY", "READY", "AGE"], table
    assert table[1].split()[:4] == ["shown", "1", "1", "True"], table

    k8s_cluster.kubectl("scale", "omq/shown", "--replicas=3", "-n", namespace)
    assert k8s_cluster.get_json("omq", "shown", "-n", namespace)["spec"]["brokers"]["groups"] == 3
    scale = k8s_cluster.get_json(CLUSTERS, "shown", "-n", namespace, "--subresource=scale")
    assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (3, 1)
    # The schema's range holds through the scale subresource too.
    with pytest.raises(CommandError) as zero:
        k8s_cluster.kubectl("scale", "omq/shown", "--replicas=0", "-n", namespace)
    assert "spec.brokers.groups" in zero.value.stderr, zero.value.stderr

    k8s_cluster.apply(topic("orders", cluster="shown", topicName="Orders"), namespace=namespace)
    topics = k8s_cluster.kubectl("get", "omqtopic", "-n", namespace).stdout.splitlines()
    assert topics[0].split() == ["NAME", "CLUSTER", "TOPIC", "READ", "WRITE", "READY", "AGE"], topics
    assert topics[1].split()[:5] == ["orders", "shown", "Orders", "4", "4"], topics
    # The category lists every orbitmq kind at once.
    everything = k8s_cluster.kubectl("get", "orbitmq", "-n", namespace, "-o", "name").stdout.split()
    assert sorted(everything) == ["orbitmqcluster.orbitmq.io/shown", "orbitmqtopic.orbitmq.io/orders"]
