"""A cluster's TLS Secrets, kept each reconcile before its workloads are applied.

Where the server certificate comes from (``spec.security.tls``):

* **the operator's CA** (the default): ``<cluster>-ca`` made once (and again when deleted,
  unusable or near its end), ``<cluster>-tls`` issued from it (again when near its end or
  signed by another CA), ``<cluster>-ca-cert`` the clients' bundle
  (:mod:`~orbitmq_operator.builders.certificates` decides all of it);
* **an issuer**: a cert-manager ``Certificate`` applied for ``<cluster>-tls``; the operator
  waits for cert-manager to write that Secret (``Progressing``/``CertificatePending``), then
  checks it and copies its ``ca.crt`` to ``<cluster>-ca-cert``;
* **a Secret of the user's** (``secretName``): checked (keys present, key matching, signed by
  its ``ca.crt``) and its ``ca.crt`` copied to ``<cluster>-ca-cert``; the pods mount it.

A missing or unusable Secret is a :class:`TlsProblem` naming it and the rule: the cluster's
status says so and nothing is applied (running pods keep the certificate they have). Secrets
are written with server-side apply only when their content changes, so a steady cluster costs
three reads per reconcile. Rotation reaches the pods by the kubelet's Secret update and the
servers' file reload (no restart), and the operator's own channels by :mod:`.access`.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from lightkube import ApiError, AsyncClient, codecs
from lightkube.generic_resource import create_namespaced_resource

from orbitmq_operator.builders import certificates, common, names, tls
from orbitmq_operator.builders.certificates import CertificateProblem, Pem
from orbitmq_operator.builders.common import Cluster, Manifest
from orbitmq_operator.reconcile import secrets
from orbitmq_operator.reconcile.apply import FIELD_MANAGER
from orbitmq_operator.reconcile.conditions import Reason

Certificate = create_namespaced_resource(
    tls.CERT_MANAGER_GROUP, "v1", "Certificate", "certificates", verbs=["get", "patch", "post"]
)

COMPONENT = "tls"


@dataclass(frozen=True)
class TlsProblem(Exception):
    """TLS material the cluster cannot start with; ``waiting``: something else is on its way
    (cert-manager issuing), else the user must act."""

    reason: Reason
    message: str
    waiting: bool = False

    def __str__(self) -> str:
        return self.message


@dataclass
class TlsOutcome:
    events: list[tuple[str, str, bool]] = field(default_factory=list)
    """(reason, message, warning) of what was made or renewed."""


def _decode(data: Mapping[str, str] | None) -> dict[str, str] | None:
    if data is None:
        return None
    out = {}
    for key, value in data.items():
        try:
            out[key] = base64.b64decode(value).decode()
        except (ValueError, UnicodeDecodeError):
            out[key] = ""
    return out


async def read_secret(api: AsyncClient, namespace: str, name: str) -> dict[str, str] | None:
    """A Secret's decoded ``data``, None when there is none."""
    data = await secrets.read_secret(api, namespace, name)
    return None if data is None else _decode(data)


def secret_manifest(cluster: Cluster, name: str, data: Mapping[str, str], kind: str = "Opaque") -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": common.object_meta(cluster, name, COMPONENT),
        "type": kind,
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in sorted(data.items())},
    }


async def _write(api: AsyncClient, manifest: Manifest) -> None:
    await api.apply(codecs.from_dict(manifest), field_manager=FIELD_MANAGER, force=True)


async def ensure_tls(api: AsyncClient, cluster: Cluster, now: dt.datetime | None = None) -> TlsOutcome:
    """Make, renew or check the cluster's TLS Secrets; :class:`TlsProblem` when it cannot."""
    outcome = TlsOutcome()
    spec = cluster.spec.security.tls
    if not spec.enabled:
        return outcome
    now = now or dt.datetime.now(dt.UTC)
    if spec.secret_name:
        bundle = await _checked(api, cluster, spec.secret_name, "spec.security.tls.secretName", now)
    elif spec.issuer is not None:
        bundle = await _from_issuer(api, cluster, now)
    else:
        bundle = await _own_ca(api, cluster, outcome, now)
    await _publish_ca(api, cluster, bundle)
    return outcome


async def _checked(api: AsyncClient, cluster: Cluster, name: str, source: str, now: dt.datetime) -> str:
    """The ``ca.crt`` of a server-certificate Secret made by someone else, once checked."""
    data = await read_secret(api, cluster.namespace, name)
    where = f"Secret {cluster.namespace}/{name} ({source})"
    if data is None:
        raise TlsProblem(
            Reason.SECRET_NOT_FOUND,
            f"{where} does not exist; create it with {names.TLS_CERT}, {names.TLS_KEY} and {names.CA_CERT}",
        )
    missing = [key for key in (names.TLS_CERT, names.TLS_KEY, names.CA_CERT) if not data.get(key)]
    if missing:
        raise TlsProblem(Reason.INVALID_SECRET, f"{where} has no {', '.join(missing)}")
    try:
        certificates.check_server_secret(data[names.TLS_CERT], data[names.TLS_KEY], data[names.CA_CERT], now)
    except CertificateProblem as problem:
        raise TlsProblem(Reason.INVALID_SECRET, f"{where}: {problem}") from None
    return data[names.CA_CERT]


async def _from_issuer(api: AsyncClient, cluster: Cluster, now: dt.datetime) -> str:
    manifest = tls.certificate(cluster)
    assert manifest is not None
    try:
        await _write(api, manifest)
    except ApiError as error:
        if error.status.code != 404:
            raise
        raise TlsProblem(
            Reason.CERTIFICATE_PENDING,
            "spec.security.tls.issuer needs cert-manager, whose Certificate kind (cert-manager.io/v1) "
            "is not installed; install cert-manager, or drop issuer for the operator's own CA",
        ) from None
    secret = names.tls_secret(cluster.name)
    data = await read_secret(api, cluster.namespace, secret)
    issuer = cluster.spec.security.tls.issuer
    assert issuer is not None
    if data is None or not data.get(names.TLS_CERT):
        raise TlsProblem(
            Reason.CERTIFICATE_PENDING,
            f"waiting for cert-manager to issue Secret {cluster.namespace}/{secret} from {issuer.kind.value} "
            f"{issuer.name!r} (Certificate {secret}); is cert-manager installed and the issuer Ready?",
            waiting=True,
        )
    if not data.get(names.CA_CERT):
        raise TlsProblem(
            Reason.INVALID_SECRET,
            f"Secret {cluster.namespace}/{secret} issued by {issuer.kind.value} {issuer.name!r} has no "
            f"{names.CA_CERT} (an ACME issuer gives none): use a CA issuer, or spec.security.tls.secretName",
        )
    return await _checked(api, cluster, secret, f"issued by {issuer.kind.value} {issuer.name!r}", now)


async def _own_ca(api: AsyncClient, cluster: Cluster, outcome: TlsOutcome, now: dt.datetime) -> str:
    ns = cluster.namespace
    ca_name, tls_name = names.ca_secret(cluster.name), names.tls_secret(cluster.name)
    stored = await read_secret(api, ns, ca_name)
    ca = Pem(stored.get(names.CA_CERT, ""), stored.get(names.CA_KEY, "")) if stored else None
    why = _ca_problem(ca, now)
    if why is not None:
        ca = certificates.new_ca(f"orbitmq {ns}/{cluster.name} CA", now)
        await _write(api, secret_manifest(cluster, ca_name, {names.CA_CERT: ca.cert, names.CA_KEY: ca.key}))
        outcome.events.append(("CertificateAuthorityCreated", f"Secret {ca_name}: a new CA ({why})", False))
    assert ca is not None
    previous = await read_secret(api, ns, names.ca_cert_secret(cluster.name))
    bundle = certificates.trust_bundle(ca.cert, (previous or {}).get(names.CA_CERT), now)
    current = await read_secret(api, ns, tls_name)
    server = Pem(current.get(names.TLS_CERT, ""), current.get(names.TLS_KEY, "")) if current else None
    wanted = tls.server_names(cluster)
    reason = certificates.reissue_reason(server, ca, wanted, now)
    if reason is not None:
        server = certificates.issue_server(ca, wanted, now)
        outcome.events.append(
            ("CertificateIssued", f"Secret {tls_name}: a new server certificate ({reason})", False)
        )
    assert server is not None
    content = {names.TLS_CERT: server.cert, names.TLS_KEY: server.key, names.CA_CERT: bundle}
    if current != content:
        await _write(api, secret_manifest(cluster, tls_name, content, "kubernetes.io/tls"))
    return bundle


def _ca_problem(ca: Pem | None, now: dt.datetime) -> str | None:
    """Why the CA must be made (again); None when it serves as it is."""
    if ca is None:
        return "none yet"
    try:
        cert, _ = certificates.load_ca(ca)
    except CertificateProblem as problem:
        return f"the stored one is unusable: {problem}"
    if certificates.due(cert, now):
        return f"the stored one expires at {cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
    return None


async def _publish_ca(api: AsyncClient, cluster: Cluster, bundle: str) -> None:
    """``<cluster>-ca-cert``: the CA bundle clients mount, written when it changed."""
    name = names.ca_cert_secret(cluster.name)
    if await read_secret(api, cluster.namespace, name) != {names.CA_CERT: bundle}:
        await _write(api, secret_manifest(cluster, name, {names.CA_CERT: bundle}))
