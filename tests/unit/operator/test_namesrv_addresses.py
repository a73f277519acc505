"""Where the operator calls a cluster's name servers, per ``--namesrv-mode`` and
``--namesrv-override``: topic and group calls need any one, a drain's write-permission wipe
needs every one (name servers share no state)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from lightkube.models.core_v1 import PodStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from orbitmq_operator.config import NamesrvMode, OperatorConfig
from orbitmq_operator.reconcile.conditions import Reason
from orbitmq_operator.reconcile.namesrv import drain_namesrvs, namesrv_addresses, namesrv_for
from orbitmq_operator.reconcile.resources import ResourceRefused

SERVICE = OperatorConfig(namesrv_mode=NamesrvMode.SERVICE)
POD_IP = OperatorConfig(namesrv_mode=NamesrvMode.POD_IP)


def body(replicas: int = 3, name: str = "demo") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": "u-1"},
        "spec": {"image": "orbitmq:test", "nameServers": {"replicas": replicas}},
    }


class Pods:
    """Just enough of lightkube's ``AsyncClient`` to list pods: what ``pod-ip`` mode reads."""

    def __init__(self, *pods: Pod) -> None:
        self.pods = pods
        self.listed: list[dict[str, str]] = []

    async def list(self, kind: type, *, namespace: str, labels: dict[str, str]) -> AsyncIterator[Pod]:
        assert kind is Pod and namespace == "ns"
        self.listed.append(labels)
        for pod in self.pods:
            yield pod


def pod(name: str, phase: str, ip: str | None) -> Pod:
    return Pod(metadata=ObjectMeta(name=name), status=PodStatus(phase=phase, podIP=ip))


def test_service_mode_calls_the_service_or_every_pod_for_a_drain() -> None:
    assert namesrv_addresses(SERVICE, body()) == "demo-namesrv.ns.svc:9876"
    assert namesrv_addresses(SERVICE, body(), every_pod=True) == [
        f"demo-namesrv-{n}.demo-namesrv-headless.ns.svc:9876" for n in range(3)
    ], "the Service reaches one name server; a wipe must reach each of spec.nameServers.replicas"


def test_pod_ip_mode_calls_the_running_pods_for_topics_and_drains_alike() -> None:
    ips = ["10.0.0.1:9876", "10.0.0.2:9876"]
    assert namesrv_addresses(POD_IP, body(), ips) == ips
    assert namesrv_addresses(POD_IP, body(), ips, every_pod=True) == ips
    with pytest.raises(ResourceRefused) as refused:
        namesrv_addresses(POD_IP, body(), [])
    assert refused.value.reason is Reason.BROKERS_UNREACHABLE and "demo" in refused.value.message


@pytest.mark.parametrize("mode", list(NamesrvMode))
@pytest.mark.parametrize("every_pod", [False, True])
def test_an_override_wins_over_the_mode(mode: NamesrvMode, every_pod: bool) -> None:
    config = OperatorConfig(mode, {"ns/demo": "127.0.0.1:9876;127.0.0.1:9877"})
    expected = ["127.0.0.1:9876", "127.0.0.1:9877"]
    assert namesrv_addresses(config, body(), every_pod=every_pod) == expected
    assert namesrv_addresses(config, body(name="other"), ["10.0.0.1:9876"]) != expected, (
        "another cluster's override"
    )


async def test_pod_ip_mode_lists_only_running_pods_with_an_ip() -> None:
    client = Pods(
        pod("demo-namesrv-0", "Running", "10.0.0.1"),
        pod("demo-namesrv-1", "Pending", None),
        pod("demo-namesrv-2", "Running", None),
        pod("demo-namesrv-3", "Succeeded", "10.0.0.9"),
    )
    assert await namesrv_for(client, POD_IP, body()) == ["10.0.0.1:9876"]  # type: ignore[arg-type]
    assert client.listed[0]["app.kubernetes.io/component"] == "namesrv"
    assert client.listed[0]["app.kubernetes.io/instance"] == "demo"


async def test_no_pod_is_listed_when_the_mode_does_not_need_them() -> None:
    client = Pods(pod("demo-namesrv-0", "Running", "10.0.0.1"))
    overridden = OperatorConfig(NamesrvMode.POD_IP, {"ns/demo": "h:1"})
    assert await namesrv_for(client, overridden, body()) == ["h:1"]  # type: ignore[arg-type]
    assert await namesrv_for(client, SERVICE, body()) == "demo-namesrv.ns.svc:9876"  # type: ignore[arg-type]
    assert client.listed == []


async def test_a_drain_goes_through_every_name_server_or_not_at_all() -> None:
    assert await drain_namesrvs(Pods(), SERVICE, body(2)) == [  # type: ignore[arg-type]
        "demo-namesrv-0.demo-namesrv-headless.ns.svc:9876",
        "demo-namesrv-1.demo-namesrv-headless.ns.svc:9876",
    ]
    assert await drain_namesrvs(Pods(), POD_IP, body()) is None, "no name-server pod running"  # type: ignore[arg-type]
    invalid = {**body(), "spec": {"image": "orbitmq:test", "nameServers": {"replicas": 0}}}
    assert await drain_namesrvs(Pods(), SERVICE, invalid) is None, "the reconcile reports the spec"  # type: ignore[arg-type]
    overridden = OperatorConfig(NamesrvMode.SERVICE, {"ns/demo": "h:1;h:2"})
    assert await drain_namesrvs(Pods(), overridden, invalid) == ["h:1", "h:2"]  # type: ignore[arg-type]
