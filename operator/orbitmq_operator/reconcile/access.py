"""How the operator reaches a cluster: the TLS it speaks and the credentials it signs with.

Every operator channel to a cluster's name servers, brokers and proxies (status, rolling
updates, failover, drains, topics and groups) is opened from one :class:`Access`, which
:func:`cluster_access` builds from the cluster's spec and its Secrets at each reconcile (and
every few seconds in the failover daemon), so a rotated CA or a new operator user is picked up
without a restart. Off (``spec.security`` disabled): plaintext and unsigned, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from lightkube import AsyncClient
from pydantic import ValidationError

from orbitmq.client.admin import Admin
from orbitmq.common.credentials import Credentials, signed
from orbitmq.common.tls import ClientTls, open_channel
from orbitmq_operator.reconcile.secrets import operator_credentials
from orbitmq_operator.spec import ClusterSpec


@dataclass(frozen=True)
class Access:
    """What the operator's calls to one cluster use: ``tls`` None is plaintext, ``credentials``
    None signs nothing."""

    tls: ClientTls | None = None
    credentials: Credentials | None = None

    def channel(self, address: str, server_name: str | None = None) -> grpc.aio.Channel:
        """A (signed) channel to ``address``; ``server_name``: the name its certificate must
        hold when ``address`` is a pod IP (the pod's DNS name)."""
        tls = self.tls
        if tls is not None and server_name:
            tls = tls.model_copy(update={"tls_server_name": server_name})
        channel: grpc.aio.Channel = signed(open_channel(address, tls, []), self.credentials)
        return channel

    def admin(self, namesrv: str | list[str]) -> Admin:
        """An :class:`Admin` of the cluster through ``namesrv``, with this access."""
        extra: dict[str, Any] = {"tls": self.tls} if self.tls is not None else {}
        return Admin(namesrv, credentials=self.credentials, **extra)


PLAINTEXT = Access()
"""A cluster without ``spec.security``: what every call site defaults to."""


async def cluster_access(api: AsyncClient, namespace: str, cluster: str, spec: ClusterSpec) -> Access:
    """The access to ``cluster`` its spec asks for (TLS from ``spec.security.tls``, credentials
    of the operator's super user with ``spec.security.authentication``)."""
    credentials = await operator_credentials(api, namespace, cluster, spec)
    return PLAINTEXT if credentials is None else Access(credentials=credentials)


async def access_of(api: AsyncClient, body: Mapping[str, Any]) -> Access:
    """:func:`cluster_access` of an ``OrbitMQCluster`` resource as the API hands it over; a spec
    the model refuses is plaintext (the cluster's own reconcile reports that spec)."""
    meta = body["metadata"]
    try:
        spec = ClusterSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return PLAINTEXT
    return await cluster_access(api, meta["namespace"], meta["name"], spec)
