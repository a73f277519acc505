"""Pure builders of the Kubernetes objects an ``OrbitMQCluster`` is made of (Strimzi's
``model/``): from a cluster's identity and spec to plain manifest dicts, with no API calls, so
the reconciler only applies them (server-side apply) and every decision here is unit-tested.

:func:`desired_objects` is the whole cluster in apply order. A spec the builders cannot use
raises :class:`SpecError` naming the field, before any object is built.
"""

from __future__ import annotations

from orbitmq_operator.builders import names
from orbitmq_operator.builders.brokers import broker_objects
from orbitmq_operator.builders.common import Cluster, Manifest
from orbitmq_operator.builders.errors import SpecError
from orbitmq_operator.builders.nameservers import namesrv_objects
from orbitmq_operator.builders.proxies import proxy_objects

__all__ = ["Cluster", "Manifest", "SpecError", "desired_objects", "namesrv_address", "proxy_address"]


def desired_objects(cluster: Cluster) -> list[Manifest]:
    """Every object of ``cluster``: name servers first (brokers register with them), then the
    brokers' ConfigMap and groups in group order, then the proxy (a client of both). The order
    is fixed, so two calls with the same cluster give equal lists, and a reconciler applying
    them in order never starts a pod whose Service or ConfigMap is missing."""
    return [*namesrv_objects(cluster), *broker_objects(cluster), *proxy_objects(cluster)]


def namesrv_address(cluster: Cluster) -> str:
    """What clients give as ``--namesrv`` (and ``status.namesrvAddress`` shows)."""
    return names.namesrv_service_address(cluster.name, cluster.namespace)


def proxy_address(cluster: Cluster) -> str:
    """What RocketMQ 5 clients give as their endpoint (``status.proxyAddress``); empty without
    a proxy."""
    if cluster.spec.proxy.replicas == 0:
        return ""
    return names.proxy_service_address(cluster.name, cluster.namespace)
