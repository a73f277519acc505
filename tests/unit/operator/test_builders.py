"""The pure builders: every object of a cluster, named, labelled and owned as documented, valid
for the real Kubernetes API models, and the same for the same spec."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml
from lightkube import codecs

from orbitmq.broker.settings import BrokerSettings
from orbitmq_operator.builders import Cluster, SpecError, brokers, desired_objects, names, namesrv_address
from orbitmq_operator.spec import ClusterSpec

IP = re.compile(r"\b\d{1,3}(\.\d{1,3}){3}\b")


def make(name: str = "orbit", **spec: Any) -> Cluster:
    return Cluster(
        name, "mq", "11111111-2222", ClusterSpec.model_validate({"image": "orbitmq:1.0", **spec}), 3
    )


def by_key(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def pod_spec(sts: dict[str, Any]) -> dict[str, Any]:
    return sts["spec"]["template"]["spec"]


def container(sts: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod_spec(sts)["containers"]
    return only


CLUSTER = make(brokers={"groups": 2, "slavesPerGroup": 2})


def test_objects_in_apply_order_with_documented_names() -> None:
    assert [(o["kind"], o["metadata"]["name"]) for o in desired_objects(CLUSTER)] == [
        ("Service", "orbit-namesrv-headless"),
        ("Service", "orbit-namesrv"),
        ("StatefulSet", "orbit-namesrv"),
        ("PodDisruptionBudget", "orbit-namesrv"),
        ("ConfigMap", "orbit-broker-config"),
        ("Service", "orbit-broker-0"),
        ("StatefulSet", "orbit-broker-0"),
        ("PodDisruptionBudget", "orbit-broker-0"),
        ("Service", "orbit-broker-1"),
        ("StatefulSet", "orbit-broker-1"),
        ("PodDisruptionBudget", "orbit-broker-1"),
    ]


def test_every_object_is_owned_labelled_and_namespaced() -> None:
    for obj in desired_objects(CLUSTER):
        meta = obj["metadata"]
        assert meta["namespace"] == "mq"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "orbitmq.io/v1alpha1",
                "kind": "OrbitMQCluster",
                "name": "orbit",
                "uid": "11111111-2222",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        labels = meta["labels"]
        assert labels[names.LABEL_NAME] == "orbitmq"
        assert labels[names.LABEL_INSTANCE] == "orbit"
        assert labels[names.LABEL_MANAGED_BY] == "orbitmq-operator"
        component = "namesrv" if "namesrv" in meta["name"] else "broker"
        assert labels[names.LABEL_COMPONENT] == component
        group = re.search(r"-broker-(\d+)$", meta["name"])
        assert labels.get(names.LABEL_BROKER_GROUP) == (group[1] if group else None)


def test_every_object_is_valid_for_the_kubernetes_api_models() -> None:
    """lightkube's models refuse a wrong type; the round trip drops unknown fields, so an
    equal dict means every field name exists where it was put."""
    spec = {
        "brokers": {
            "groups": 2,
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
            "storage": {"storageClassName": "fast", "retention": "Delete"},
        },
        "nameServers": {"resources": {"limits": {"cpu": "1"}}},
    }
    for cluster in (CLUSTER, make(**spec)):
        for obj in desired_objects(cluster):
            assert codecs.from_dict(copy.deepcopy(obj)).to_dict() == obj, obj["metadata"]["name"]


def test_nothing_empty_or_null_is_applied() -> None:
    """An empty or null field would claim ownership of what the API server defaults."""

    def walk(value: Any, path: str) -> None:
        assert value is not None and value != {} and value != [], path
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}.{key}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]")

    for obj in desired_objects(make(brokers={"slavesPerGroup": 0, "replicationMode": "ASYNC_MASTER"})):
        walk(obj, obj["metadata"]["name"])
        assert "status" not in obj


def test_same_spec_same_objects() -> None:
    spec = {"brokers": {"groups": 3, "settings": {"max_message_bytes": 1048576, "grace_ms": 7000}}}
    assert desired_objects(make(**spec)) == desired_objects(make(**spec))
    text = by_key(desired_objects(make(**spec)))["ConfigMap", "orbit-broker-config"]["data"]["broker.yaml"]
    assert list(yaml.safe_load(text)) == sorted(yaml.safe_load(text))


def changed(before: Cluster, after: Cluster) -> set[tuple[str, str]]:
    old, new = by_key(desired_objects(before)), by_key(desired_objects(after))
    assert old.keys() == new.keys()
    return {key for key in old if old[key] != new[key]}


def test_name_server_replicas_change_the_name_servers_and_the_brokers_list_only() -> None:
    """Brokers register with every name server by its pod name, so a new name server changes
    broker.yaml (and the brokers' config hash); Services, PDBs and volumes stay as they were."""
    before, after = make(brokers={"groups": 2}), make(brokers={"groups": 2}, nameServers={"replicas": 3})
    assert changed(before, after) == {
        ("StatefulSet", "orbit-namesrv"),
        ("ConfigMap", "orbit-broker-config"),
        ("StatefulSet", "orbit-broker-0"),
        ("StatefulSet", "orbit-broker-1"),
    }
    old, new = by_key(desired_objects(before)), by_key(desired_objects(after))
    assert new["StatefulSet", "orbit-namesrv"]["spec"]["replicas"] == 3
    for group in ("orbit-broker-0", "orbit-broker-1"):
        old_sts, new_sts = copy.deepcopy(old["StatefulSet", group]), copy.deepcopy(new["StatefulSet", group])
        for sts in (old_sts, new_sts):
            del sts["spec"]["template"]["metadata"]["annotations"][names.ANNOTATION_CONFIG_HASH]
        assert old_sts == new_sts


def test_a_broker_setting_rolls_the_brokers_only() -> None:
    before = make(brokers={"groups": 2})
    after = make(brokers={"groups": 2, "settings": {"max_message_bytes": 1048576}})
    assert changed(before, after) == {
        ("ConfigMap", "orbit-broker-config"),
        ("StatefulSet", "orbit-broker-0"),
        ("StatefulSet", "orbit-broker-1"),
    }


def test_more_groups_add_objects_and_change_none() -> None:
    old, new = by_key(desired_objects(make())), by_key(desired_objects(make(brokers={"groups": 2})))
    assert set(new) - set(old) == {
        ("Service", "orbit-broker-1"),
        ("StatefulSet", "orbit-broker-1"),
        ("PodDisruptionBudget", "orbit-broker-1"),
    }
    assert all(old[key] == new[key] for key in old)


def test_name_servers() -> None:
    objects = by_key(desired_objects(make(nameServers={"replicas": 3}, metrics={"port": 9200})))
    sts = objects["StatefulSet", "orbit-namesrv"]
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["serviceName"] == "orbit-namesrv-headless"
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert "--metrics-listen" in container(sts)["command"]
    command = container(sts)["command"]
    assert command[command.index("--metrics-listen") + 1] == "0.0.0.0:9200"
    assert command[command.index("--cluster") + 1] == "orbit"  # Cluster:<name> grants at the name server
    assert {p["name"]: p["containerPort"] for p in container(sts)["ports"]} == {"grpc": 9876, "metrics": 9200}
    assert sts["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9200"
    client = objects["Service", "orbit-namesrv"]["spec"]
    assert client["type"] == "ClusterIP" and client["ports"][0]["port"] == 9876
    assert client["selector"] == sts["spec"]["selector"]["matchLabels"]
    headless = objects["Service", "orbit-namesrv-headless"]["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    assert objects["PodDisruptionBudget", "orbit-namesrv"]["spec"]["maxUnavailable"] == 1


def test_namesrv_addresses_are_dns_names_never_ips() -> None:
    cluster = make(nameServers={"replicas": 2})
    assert namesrv_address(cluster) == "orbit-namesrv.mq.svc:9876"
    config = yaml.safe_load(
        by_key(desired_objects(cluster))["ConfigMap", "orbit-broker-config"]["data"]["broker.yaml"]
    )
    assert config["namesrv"] == (
        "orbit-namesrv-0.orbit-namesrv-headless.mq.svc:9876;orbit-namesrv-1.orbit-namesrv-headless.mq.svc:9876"
    )
    for obj in desired_objects(cluster):
        assert not IP.search(yaml.safe_dump(obj).replace("0.0.0.0", "")), obj["metadata"]["name"]


def test_broker_groups() -> None:
    objects = by_key(desired_objects(CLUSTER))
    for group in (0, 1):
        name = f"orbit-broker-{group}"
        sts = objects["StatefulSet", name]
        assert sts["spec"]["replicas"] == 3  # a master and two slaves
        assert sts["spec"]["serviceName"] == name
        assert sts["spec"]["podManagementPolicy"] == "Parallel"
        assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
        assert sts["spec"]["selector"]["matchLabels"][names.LABEL_BROKER_GROUP] == str(group)
        command = container(sts)["command"]
        assert command[command.index("--broker-name") + 1] == name
        assert "--broker-id-from-hostname" in command
        assert command[command.index("--advertise-addr") + 1] == "$(POD_IP):10911"
        assert container(sts)["env"] == [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        ]
        assert objects["Service", name]["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
        assert objects["PodDisruptionBudget", name]["spec"]["maxUnavailable"] == 1


def test_broker_volumes() -> None:
    cluster = make(brokers={"storage": {"size": "50Gi", "storageClassName": "fast"}})
    sts = by_key(desired_objects(cluster))["StatefulSet", "orbit-broker-0"]
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert (claim["kind"], claim["metadata"]["name"]) == ("PersistentVolumeClaim", "data")
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "50Gi"}},
        "storageClassName": "fast",
    }
    mounts = {m["name"]: m["mountPath"] for m in container(sts)["volumeMounts"]}
    assert mounts["data"] == "/var/lib/orbitmq"
    config = yaml.safe_load(
        by_key(desired_objects(cluster))["ConfigMap", "orbit-broker-config"]["data"]["broker.yaml"]
    )
    assert config["data_dir"].startswith(mounts["data"] + "/")
    default = by_key(desired_objects(make()))["StatefulSet", "orbit-broker-0"]["spec"][
        "volumeClaimTemplates"
    ][0]
    assert "storageClassName" not in default["spec"]  # the cluster's default class


@pytest.mark.parametrize(
    ("retention", "policy"),
    [
        ("Retain", {"whenDeleted": "Retain", "whenScaled": "Retain"}),
        ("Delete", {"whenDeleted": "Delete", "whenScaled": "Retain"}),
    ],
)
def test_volume_retention(retention: str, policy: dict[str, str]) -> None:
    sts = by_key(desired_objects(make(brokers={"storage": {"retention": retention}})))[
        "StatefulSet", "orbit-broker-0"
    ]
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == policy


def test_probes_use_the_grpc_health_service() -> None:
    objects = by_key(desired_objects(CLUSTER))
    for name, port in (("orbit-namesrv", 9876), ("orbit-broker-0", 10911)):
        c = container(objects["StatefulSet", name])
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            assert c[probe]["grpc"] == {"port": port}
    broker = container(objects["StatefulSet", "orbit-broker-0"])
    startup = broker["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == brokers.STARTUP_BUDGET_S


def test_pods_run_as_non_root_with_spec_image_and_resources() -> None:
    cluster = make(
        imagePullPolicy="Always",
        brokers={"resources": {"requests": {"memory": "1Gi"}}, "settings": {"grace_ms": 20000}},
    )
    objects = by_key(desired_objects(cluster))
    for name in ("orbit-namesrv", "orbit-broker-0"):
        sts = objects["StatefulSet", name]
        pod = pod_spec(sts)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
        assert container(sts)["securityContext"]["readOnlyRootFilesystem"] is True
        assert container(sts)["image"] == "orbitmq:1.0"
        assert container(sts)["imagePullPolicy"] == "Always"
    assert container(objects["StatefulSet", "orbit-broker-0"])["resources"] == {"requests": {"memory": "1Gi"}}
    assert "resources" not in container(objects["StatefulSet", "orbit-namesrv"])
    # the broker's own grace, then time to unregister, persist and flush
    assert pod_spec(objects["StatefulSet", "orbit-broker-0"])["terminationGracePeriodSeconds"] == 20 + 55


POD_SETTINGS = {
    "nodeSelector": {"disktype": "ssd"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "mq", "effect": "NoSchedule"}],
    "volumes": [{"name": "runtime", "hostPath": {"path": "/opt/python", "type": "Directory"}}],
    "volumeMounts": [{"name": "runtime", "mountPath": "/opt/python", "readOnly": True}],
    "env": [{"name": "TZ", "value": "UTC"}],
}


def test_user_pod_settings_reach_every_pod_after_the_operators_own() -> None:
    """spec.pod adds to the name servers' and brokers' pods without displacing the operator's
    volumes, mounts or environment, and the result is still valid for the Kubernetes models."""
    plain = by_key(desired_objects(make()))
    objects = by_key(desired_objects(make(pod=POD_SETTINGS)))
    for name in ("orbit-namesrv", "orbit-broker-0"):
        sts, before = objects["StatefulSet", name], plain["StatefulSet", name]
        pod = pod_spec(sts)
        assert pod["nodeSelector"] == {"disktype": "ssd"}
        assert pod["tolerations"] == POD_SETTINGS["tolerations"]
        assert pod["volumes"] == [*pod_spec(before)["volumes"], *POD_SETTINGS["volumes"]]
        assert container(sts)["volumeMounts"] == [
            *container(before)["volumeMounts"],
            *POD_SETTINGS["volumeMounts"],
        ]
        assert container(sts)["env"] == [*container(before).get("env", []), *POD_SETTINGS["env"]]
        assert codecs.from_dict(copy.deepcopy(sts)).to_dict() == sts
    for before in plain.values():  # nothing given, nothing applied
        if before["kind"] == "StatefulSet":
            assert "nodeSelector" not in pod_spec(before) and "tolerations" not in pod_spec(before)


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        ({"volumes": [{"name": "Bad_Name"}]}, "should match"),
        ({"volumeMounts": [{"name": "x", "mountPath": "relative"}]}, "should match"),
        ({"env": [{"name": "1X", "value": "v"}]}, "should match"),
        ({"priorityClassName": "high"}, "Extra inputs are not permitted"),
    ],
)
def test_bad_pod_settings_are_refused_naming_the_field(pod: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message) as refused:
        Cluster.from_resource(
            {"metadata": {"name": "c", "namespace": "n", "uid": "u"}, "spec": {"image": "i", "pod": pod}}
        )
    assert str(refused.value).startswith("spec.pod."), refused.value


def test_broker_config_map_loads_as_broker_settings() -> None:
    cluster = make(
        brokers={"flushMode": "SYNC_FLUSH", "segmentMib": 64, "settings": {"lock_expiry_ms": 30000}}
    )
    config_map = by_key(desired_objects(cluster))["ConfigMap", "orbit-broker-config"]
    values = yaml.safe_load(config_map["data"]["broker.yaml"])
    settings = BrokerSettings(**values, broker_name="orbit-broker-0")
    assert settings.cluster == "orbit"
    assert settings.flush_mode.value == "SYNC_FLUSH"
    assert settings.segment_bytes == 64 * 1024 * 1024
    assert settings.lock_expiry_ms == 30000
    assert settings.broker_role.value == "SYNC_MASTER"
    assert settings.metrics_listen == "0.0.0.0:9100"
    container_ = container(by_key(desired_objects(cluster))["StatefulSet", "orbit-broker-0"])
    assert container_["command"][container_["command"].index("--config") + 1] == "/etc/orbitmq/broker.yaml"


def test_settings_change_the_pods_config_hash() -> None:
    def config_hash(cluster: Cluster) -> str:
        sts = by_key(desired_objects(cluster))["StatefulSet", "orbit-broker-0"]
        return sts["spec"]["template"]["metadata"]["annotations"][names.ANNOTATION_CONFIG_HASH]

    assert config_hash(make()) == config_hash(make())
    assert config_hash(make()) != config_hash(make(brokers={"settings": {"lock_expiry_ms": 30000}}))


@pytest.mark.parametrize("name", ["9orbit", "Orbit", "orbit-", "a" * (names.MAX_CLUSTER_NAME + 1)])
def test_cluster_names_that_would_make_invalid_objects_are_refused(name: str) -> None:
    with pytest.raises(SpecError) as refused:
        make(name)
    assert refused.value.path == "metadata.name"


def test_the_longest_cluster_name_makes_valid_names_at_the_largest_group() -> None:
    name = "a" * names.MAX_CLUSTER_NAME
    assert len(names.broker_group(name, names.MAX_BROKER_GROUPS - 1)) <= 52
    assert len(names.namesrv_headless(name)) <= 63
    make(name)


def test_cluster_from_a_resource() -> None:
    body = {
        "metadata": {"name": "orbit", "namespace": "mq", "uid": "u-1", "generation": 7},
        "spec": {"image": "orbitmq:1.0", "brokers": {"groups": 2}},
    }
    cluster = Cluster.from_resource(body)
    assert (cluster.name, cluster.namespace, cluster.uid, cluster.generation) == ("orbit", "mq", "u-1", 7)
    assert cluster.spec.brokers.groups == 2
    body["spec"]["brokers"]["groups"] = 0
    with pytest.raises(SpecError, match=r"spec\.brokers\.groups"):
        Cluster.from_resource(body)
