"""How the operator reaches a cluster: the TLS it speaks and the credentials it signs with.

Every operator channel to a cluster's name servers, brokers and proxies (status, rolling
updates, failover, drains, topics and groups) is opened from one :class:`Access`, which
:func:`cluster_access` builds from the cluster's spec and its Secrets at each reconcile (and
every few seconds in the failover daemon), so a rotated CA or a new operator user is picked up
without a restart. Off (``spec.security`` disabled): plaintext and unsigned, as before.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from lightkube import AsyncClient
from pydantic import ValidationError

from orbitmq.client.admin import Admin
from orbitmq.common.credentials import Credentials, signed
from orbitmq.common.tls import ClientTls, open_channel
from orbitmq_operator.builders import names
from orbitmq_operator.reconcile.certificates import TlsProblem, read_secret
from orbitmq_operator.reconcile.conditions import Reason
from orbitmq_operator.reconcile.secrets import operator_credentials
from orbitmq_operator.spec import ClusterSpec


@dataclass(frozen=True)
class Access:
    """What the operator's calls to one cluster use: ``tls`` None is plaintext, ``credentials``
    None signs nothing."""

    tls: ClientTls | None = None
    credentials: Credentials | None = None
    namespace: str = ""
    cluster: str = ""
    """Whose access this is: with TLS, the names its pods' certificate holds derive from them."""

    def broker_host(self, group: str, pod: str) -> str | None:
        """With TLS, the DNS name a broker pod advertises and its certificate holds (the
        operator dials the pod IP and checks for this name); None without TLS."""
        if self.tls is None:
            return None
        return f"{pod}.{group}.{self.namespace}.{names.CLUSTER_DOMAIN_SUFFIX}"

    def channel(self, address: str, server_name: str | None = None) -> grpc.aio.Channel:
        """A (signed) channel to ``address``; ``server_name``: the name its certificate must
        hold when ``address`` is a pod IP (the pod's DNS name)."""
        tls = self.tls
        if tls is not None and server_name:
            tls = tls.model_copy(update={"tls_server_name": server_name})
        channel: grpc.aio.Channel = signed(open_channel(address, tls, []), self.credentials)
        return channel

    def admin(self, namesrv: str | list[str]) -> Admin:
        """An :class:`Admin` of the cluster through ``namesrv``, with this access; name servers
        given by pod IP (``--namesrv-mode pod-ip``) are checked for their Service's name."""
        tls = self.tls
        hosts = [namesrv] if isinstance(namesrv, str) else namesrv
        if tls is not None and any(_is_ip(address) for address in hosts):
            service = f"{names.namesrv(self.cluster)}.{self.namespace}.{names.CLUSTER_DOMAIN_SUFFIX}"
            tls = tls.model_copy(update={"tls_server_name": service})
        return Admin(namesrv, credentials=self.credentials, tls=tls)


def _is_ip(address: str) -> bool:
    host = address.split(";")[0].rpartition(":")[0].strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


PLAINTEXT = Access()
"""A cluster without ``spec.security``: what every call site defaults to."""


async def cluster_access(api: AsyncClient, namespace: str, cluster: str, spec: ClusterSpec) -> Access:
    """The access to ``cluster`` its spec asks for (TLS from ``spec.security.tls``, credentials
    of the operator's super user with ``spec.security.authentication``)."""
    credentials = await operator_credentials(api, namespace, cluster, spec)
    tls = await cluster_tls(api, namespace, cluster, spec)
    if credentials is None and tls is None:
        return PLAINTEXT
    return Access(tls=tls, credentials=credentials, namespace=namespace, cluster=cluster)


STALE_FILES_S = 600.0
"""How long files of a previous Secret content are kept (far longer than any holder keeps an
:class:`Access`: a reconcile, the failover daemon's refresh period)."""
TLS_FILES_DIR = Path(tempfile.gettempdir()) / "orbitmq-operator-tls"
"""Where the operator keeps the PEM files of its channels (gRPC reads credentials from files
through :class:`ClientTls`); under /tmp, the operator's one writable path."""


async def cluster_tls(api: AsyncClient, namespace: str, cluster: str, spec: ClusterSpec) -> ClientTls | None:
    """The operator's TLS toward a cluster with ``spec.security.tls``: it trusts the ``ca.crt``
    of the Secret its pods mount and, for mutual TLS, presents that Secret's certificate (made
    for client authentication too). :class:`~orbitmq_operator.reconcile.certificates.TlsProblem`
    when the Secret is missing or incomplete (the reconcile names it in the cluster's status)."""
    if not spec.security.tls.enabled:
        return None
    secret = spec.security.tls.secret_name or names.tls_secret(cluster)
    data = await read_secret(api, namespace, secret)
    wanted = [
        names.CA_CERT,
        *([names.TLS_CERT, names.TLS_KEY] if spec.security.tls.require_client_cert else []),
    ]
    missing = [key for key in wanted if not (data or {}).get(key)]
    if data is None or missing:
        what = "does not exist" if data is None else f"has no {', '.join(missing)}"
        raise TlsProblem(
            Reason.SECRET_NOT_FOUND,
            f"Secret {namespace}/{secret} {what}: the operator cannot reach the cluster over TLS",
        )
    files = _write_files(namespace, cluster, {key: data[key] for key in wanted})
    return ClientTls(
        tls_ca=files[names.CA_CERT], tls_cert=files.get(names.TLS_CERT), tls_key=files.get(names.TLS_KEY)
    )


def _write_files(namespace: str, cluster: str, contents: Mapping[str, str]) -> dict[str, Path]:
    """``contents`` as files named by their digest (a rotated Secret gives new files). Files of
    earlier contents are removed once :data:`STALE_FILES_S` old: an :class:`Access` still held
    (the failover daemon keeps one for ten seconds) reads them when it opens a
    channel, so they must outlive it."""
    folder = TLS_FILES_DIR / namespace / cluster
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    digest = hashlib.sha256("\0".join(contents[k] for k in sorted(contents)).encode()).hexdigest()[:16]
    out = {key: folder / f"{digest}-{key}" for key in contents}
    for key, path in out.items():
        if not path.exists():
            partial = path.with_suffix(".partial")
            partial.write_text(contents[key])
            partial.chmod(0o600)
            partial.replace(path)
    now = time.time()
    for path in out.values():
        os.utime(path)  # in use: its age counts from now
    for stale in folder.iterdir():
        try:
            old = now - stale.stat().st_mtime > STALE_FILES_S
        except FileNotFoundError:
            continue
        if stale not in out.values() and old:
            stale.unlink(missing_ok=True)
    return out


async def access_of(api: AsyncClient, body: Mapping[str, Any]) -> Access:
    """:func:`cluster_access` of an ``OrbitMQCluster`` resource as the API hands it over; a spec
    the model refuses is plaintext (the cluster's own reconcile reports that spec)."""
    meta = body["metadata"]
    try:
        spec = ClusterSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return PLAINTEXT
    return await cluster_access(api, meta["namespace"], meta["name"], spec)
