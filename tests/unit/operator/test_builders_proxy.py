"""``spec.proxy``: the RocketMQ 5 endpoint as a Deployment and a Service, absent at 0 replicas,
pruned when scaled to 0, and counted in the cluster's status."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from lightkube import codecs
from pydantic import ValidationError

from orbitmq.proxy.settings import ProxySettings
from orbitmq_operator.builders import Cluster, desired_objects, names, proxy_address
from orbitmq_operator.builders.proxies import PRUNABLE
from orbitmq_operator.reconcile.apply import key_of, prunable_leftovers
from orbitmq_operator.reconcile.cluster_status import MemberState, Observed, ObservedGroup, cluster_status
from orbitmq_operator.spec import ClusterSpec


def make(**spec: Any) -> Cluster:
    return Cluster(
        "orbit", "mq", "11111111-2222", ClusterSpec.model_validate({"image": "orbitmq:1.0", **spec}), 3
    )


def proxy_keys(cluster: Cluster) -> list[tuple[str, str]]:
    return [
        key_of(o)
        for o in desired_objects(cluster)
        if o["metadata"]["labels"][names.LABEL_COMPONENT] == "proxy"
    ]


def test_no_proxy_by_default_and_none_at_zero_replicas() -> None:
    assert proxy_keys(make()) == []
    assert proxy_keys(make(proxy={"replicas": 0})) == []
    assert proxy_address(make()) == ""


def test_a_proxy_is_a_deployment_behind_one_service_after_the_brokers() -> None:
    cluster = make(
        proxy={"replicas": 2, "resources": {"limits": {"memory": "256Mi"}}}, metrics={"port": 9200}
    )
    objects = desired_objects(cluster)
    assert [key_of(o) for o in objects][-3:] == [
        ("Service", "orbit-proxy"),
        ("Deployment", "orbit-proxy"),
        ("PodDisruptionBudget", "orbit-proxy"),
    ]
    by_key = {key_of(o): o for o in objects}
    deployment = by_key["Deployment", "orbit-proxy"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"][:4] == ["orbitmq", "--log-level", "INFO", "proxy"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"grpc": 8081, "metrics": 9200}
    assert container["readinessProbe"]["grpc"] == {"port": 8081}
    assert container["resources"] == {"limits": {"memory": "256Mi"}}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    service = by_key["Service", "orbit-proxy"]["spec"]
    assert service["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert [p["port"] for p in service["ports"]] == [8081, 9200]
    assert proxy_address(cluster) == "orbit-proxy.mq.svc:8081"
    for obj in objects:  # valid for the Kubernetes API models (unknown fields would be dropped)
        assert codecs.from_dict(copy.deepcopy(obj)).to_dict() == obj, key_of(obj)


def test_the_proxy_command_is_what_orbitmq_proxy_accepts() -> None:
    """Its flags name a name-server Service address and listen addresses the proxy's own
    settings accept, so the pod does not crash-loop on a typo."""
    (deployment,) = [o for o in desired_objects(make(proxy={"replicas": 1})) if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["command"][4:]
    flags = dict(zip(args[::2], args[1::2], strict=True))
    settings = ProxySettings(
        namesrv=flags["--namesrv"], listen=flags["--listen"], metrics_listen=flags["--metrics-listen"]
    )
    assert settings.namesrv == "orbit-namesrv.mq.svc:9876"


def test_the_user_pod_settings_reach_the_proxy_pods() -> None:
    cluster = make(
        proxy={"replicas": 1},
        pod={"nodeSelector": {"disktype": "ssd"}, "env": [{"name": "TZ", "value": "UTC"}]},
    )
    (deployment,) = [o for o in desired_objects(cluster) if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"disktype": "ssd"}
    assert {"name": "TZ", "value": "UTC"} in pod["containers"][0]["env"]


@pytest.mark.parametrize("replicas", [-1, 33])
def test_bad_replicas_are_refused(replicas: int) -> None:
    with pytest.raises(ValidationError, match="replicas"):
        make(proxy={"replicas": replicas})


def test_scaling_to_zero_prunes_the_proxy_objects_only() -> None:
    """What the cluster has now (a proxy, two broker groups) against a spec without a proxy and
    with one group: the proxy's objects go; the surplus broker group is a drain's business."""
    before = make(proxy={"replicas": 1}, brokers={"groups": 2})
    current = {key_of(o): o for o in desired_objects(before)}
    after = desired_objects(make(brokers={"groups": 1}))
    assert prunable_leftovers(after, current, PRUNABLE) == [
        ("Deployment", "orbit-proxy"),
        ("PodDisruptionBudget", "orbit-proxy"),
        ("Service", "orbit-proxy"),
    ]
    assert prunable_leftovers(desired_objects(before), current, PRUNABLE) == []


def observed(proxy_ready: int, proxy_replicas: int = 2) -> Observed:
    master = MemberState("orbit-broker-0-0", "SYNC_MASTER", 1, True)
    group = ObservedGroup("orbit-broker-0", 1, 1, (master,))
    return Observed(1, 1, (group,), proxy_replicas=proxy_replicas, proxy_ready=proxy_ready)


def test_status_counts_ready_proxies_and_a_short_proxy_degrades_the_cluster() -> None:
    cluster = make(proxy={"replicas": 2}, nameServers={"replicas": 1}, brokers={"slavesPerGroup": 0})
    full = cluster_status(cluster, observed(2), None, "2026-11-24T00:00:00Z")
    assert full["proxiesReady"] == 2 and full["proxyAddress"] == "orbit-proxy.mq.svc:8081"
    ready = {c["type"]: c for c in full["conditions"]}["Ready"]
    assert ready["status"] == "True" and "2 proxy(ies) ready" in ready["message"]
    short = cluster_status(cluster, observed(1), None, "2026-11-24T00:00:00Z")
    conditions = {c["type"]: c for c in short["conditions"]}
    assert conditions["Degraded"]["status"] == "True"
    assert "proxies 1/2" in conditions["Degraded"]["message"]
