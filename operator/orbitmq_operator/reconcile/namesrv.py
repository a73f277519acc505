"""Where the operator reaches a cluster's name servers (``--namesrv-mode``, ``--namesrv-override``).

:func:`namesrv_addresses` decides from the operator's settings and the cluster resource alone,
so every mode is unit-tested; :func:`namesrv_for` adds the one read it may need (the running
name-server pods' IPs in ``pod-ip`` mode). Topic and group calls go anywhere a route query is
answered (``service`` mode: the load-balanced Service); a drain's write-permission wipe must
reach every name server, since they do not share state (``every_pod``: in ``service`` mode each
pod's DNS name, as the Service would reach only one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from orbitmq.common.namesrv_list import parse_namesrv_list
from orbitmq_operator.builders import Cluster, SpecError, names, namesrv_address
from orbitmq_operator.config import NamesrvMode, OperatorConfig
from orbitmq_operator.reconcile.conditions import Reason
from orbitmq_operator.reconcile.resources import ResourceRefused


def namesrv_addresses(
    config: OperatorConfig,
    cluster: Mapping[str, Any],
    pod_ips: Sequence[str] = (),
    *,
    every_pod: bool = False,
) -> str | list[str]:
    """The cluster's name-server address(es) as the operator reaches them.

    Args:
        cluster: the ``OrbitMQCluster`` resource (its spec is read only in ``service`` mode).
        pod_ips: the running name-server pods' ``ip:port`` (used in ``pod-ip`` mode only).
        every_pod: every name server rather than any one (a drain); changes ``service`` mode only.

    Raises:
        ResourceRefused: ``pod-ip`` mode with no name-server pod running.
        SpecError: ``service`` mode and a spec the builders refuse.
    """
    override = _override(config, cluster)
    if override:
        return parse_namesrv_list(override)
    if config.namesrv_mode is NamesrvMode.POD_IP:
        if not pod_ips:
            name = cluster["metadata"]["name"]
            raise ResourceRefused(Reason.BROKERS_UNREACHABLE, f"no name-server pod of {name} is running")
        return list(pod_ips)
    parsed = Cluster.from_resource(cluster)
    if every_pod:
        return names.namesrv_pod_addresses(parsed.name, parsed.namespace, parsed.spec.name_servers.replicas)
    return namesrv_address(parsed)


def _override(config: OperatorConfig, cluster: Mapping[str, Any]) -> str:
    meta = cluster["metadata"]
    return config.namesrv_overrides.get(f"{meta['namespace']}/{meta['name']}", "")


async def running_namesrv_ips(client: AsyncClient, cluster: str, namespace: str) -> list[str]:
    """``ip:port`` of each Running name-server pod of ``cluster``."""
    selector = names.selector_labels(cluster, names.NAMESRV)
    return [
        f"{pod.status.podIP}:{names.NAMESRV_PORT}"
        async for pod in client.list(Pod, namespace=namespace, labels=selector)
        if pod.status is not None and pod.status.phase == "Running" and pod.status.podIP
    ]


async def namesrv_for(
    client: AsyncClient, config: OperatorConfig, cluster: Mapping[str, Any], *, every_pod: bool = False
) -> str | list[str]:
    """:func:`namesrv_addresses`, listing the name-server pods only when the mode needs them."""
    meta = cluster["metadata"]
    pod_ips: list[str] = []
    if config.namesrv_mode is NamesrvMode.POD_IP and not _override(config, cluster):
        pod_ips = await running_namesrv_ips(client, meta["name"], meta["namespace"])
    return namesrv_addresses(config, cluster, pod_ips, every_pod=every_pod)


async def drain_namesrvs(
    client: AsyncClient, config: OperatorConfig, cluster: Mapping[str, Any]
) -> str | list[str] | None:
    """Every name server of the cluster, through which a drain wipes write permissions; None
    (no drain this time) when no name-server pod runs or the spec is invalid (the cluster's
    reconcile reports that)."""
    try:
        return await namesrv_for(client, config, cluster, every_pod=True)
    except (ResourceRefused, SpecError):
        return None
