"""TLS of a cluster's pods (``spec.security.tls``): the names its certificate holds, what each
pod mounts and runs with, its probes, and the cert-manager ``Certificate`` for an issuer.

**One certificate for every pod** (``<cluster>-tls``, or the user's ``secretName``), mounted at
``/var/run/orbitmq/tls``; servers run with ``--tls-cert``/``--tls-key``/``--tls-ca`` (and
``--tls-require-client-cert`` for mutual TLS) and re-read the files before the next handshake
when the kubelet swaps them, so a renewed or rotated certificate needs no restart.

**Names a client checks.** Clients verify the server's certificate against the host they
dialled, and brokers are dialled at the address they advertise. A pod IP is known only after
the pod is scheduled, so no certificate can name it beforehand; with TLS on, a broker therefore
advertises its stable DNS name through its group's headless Service
(``<pod>.<cluster>-broker-<i>.<ns>.svc:10911``, resolvable as soon as the pod has an IP, as the
Service publishes not-ready addresses) instead of ``$(POD_IP)``. The certificate holds:

* the name servers' and the proxy's Services, in their short, namespaced and ``.svc`` forms
  (``--namesrv <cluster>-namesrv.<ns>.svc:9876`` as ``status.namesrvAddress`` says);
* ``*.<cluster>-namesrv-headless.<ns>.svc``: each name-server pod (brokers register with all);
* ``*.<cluster>-broker-<i>.<ns>.svc`` for every group index a cluster may ever have (0..63),
  so scaling broker groups out or in never needs a new certificate, and a group being drained
  keeps its name;
* ``localhost`` and ``127.0.0.1``, for ``kubectl exec`` and ``kubectl port-forward``.

So a client inside the cluster needs only the CA (``<cluster>-ca-cert``'s ``ca.crt``); no
``--tls-server-name``. A client outside the cluster network that reaches pods by IP checks for
one of these names with ``--tls-server-name`` (the operator does so, pod by pod).

**Probes.** The kubelet's gRPC probe speaks plaintext only, so with TLS on every probe asks
the metrics port's plaintext ``/health`` instead, which follows the gRPC health service
(``SERVING``, and ``NOT_SERVING`` from the start of a graceful stop).
"""

from __future__ import annotations

from typing import Any

from orbitmq.common.server import HEALTH_PATH
from orbitmq_operator.builders import common, names
from orbitmq_operator.builders.common import Cluster, Manifest

CERT_MANAGER_API = "cert-manager.io/v1"
CERT_MANAGER_GROUP = "cert-manager.io"
SERVER_DURATION = "2160h"
SERVER_RENEW_BEFORE = "720h"
"""What the operator asks cert-manager for: the validity and renewal of its own server
certificates (:mod:`~orbitmq_operator.builders.certificates`), 90 days renewed 30 before."""
SECRET_MODE = 0o440
"""The TLS files are readable by the pods' group (fsGroup) only."""


def enabled(cluster: Cluster) -> bool:
    return cluster.spec.security.tls.enabled


def served_secret(cluster: Cluster) -> str:
    """The Secret every pod mounts: the user's ``secretName``, else ``<cluster>-tls``."""
    return cluster.spec.security.tls.secret_name or names.tls_secret(cluster.name)


def _service_names(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.{names.CLUSTER_DOMAIN_SUFFIX}"]


def server_names(cluster: Cluster) -> list[str]:
    """Every name the server certificate holds (see the module docstring), in a fixed order."""
    ns, suffix = cluster.namespace, names.CLUSTER_DOMAIN_SUFFIX
    out = [
        *_service_names(names.namesrv(cluster.name), ns),
        *_service_names(names.proxy(cluster.name), ns),
        f"*.{names.namesrv_headless(cluster.name)}.{ns}.{suffix}",
        *(f"*.{names.broker_group(cluster.name, i)}.{ns}.{suffix}" for i in range(names.MAX_BROKER_GROUPS)),
        "localhost",
        "127.0.0.1",
    ]
    return out


def server_args(cluster: Cluster) -> list[str]:
    """The servers' TLS flags (name server, broker, proxy alike)."""
    if not enabled(cluster):
        return []
    mount = names.TLS_MOUNT
    args = [
        "--tls-cert",
        f"{mount}/{names.TLS_CERT}",
        "--tls-key",
        f"{mount}/{names.TLS_KEY}",
        "--tls-ca",
        f"{mount}/{names.CA_CERT}",
    ]
    if cluster.spec.security.tls.require_client_cert:
        args.append("--tls-require-client-cert")
    return args


def broker_advertise(cluster: Cluster, group: int) -> str:
    """``--advertise-addr`` of a broker: its pod IP, or with TLS its stable DNS name (expanded
    by the kubelet from ``$(POD_NAME)``)."""
    if not enabled(cluster):
        return f"$(POD_IP):{names.BROKER_PORT}"  # IPv4 pods; an IPv6 address would need brackets
    host = names.broker_pod_host(cluster.name, cluster.namespace, group, "$(POD_NAME)")
    return f"{host}:{names.BROKER_PORT}"


POD_NAME_ENV = {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
STORE_HOST_ENV = {"name": "ORBITMQ_BROKER_STORE_HOST", "value": f"$(POD_IP):{names.BROKER_PORT}"}
"""A broker advertising its DNS name still writes its pod IP into records and message ids
(RocketMQ's storeHost is an IP address); ``$(POD_IP)`` is the variable defined before it."""


def broker_env(cluster: Cluster) -> list[dict[str, Any]]:
    """The variables a broker needs under TLS (after ``POD_IP``): its pod name for the
    advertised address, its store host."""
    return [POD_NAME_ENV, STORE_HOST_ENV] if enabled(cluster) else []


def health_probes(metrics_port_name: str, startup_budget_s: int) -> dict[str, Any]:
    """:func:`~orbitmq_operator.builders.common.grpc_probes`' timings, asking ``/health`` on
    the plaintext metrics port."""
    probes = common.grpc_probes(0, startup_budget_s)
    action = {"httpGet": {"path": HEALTH_PATH, "port": metrics_port_name, "scheme": "HTTP"}}
    out = {}
    for probe, settings in probes.items():
        out[probe] = {**action, **{k: v for k, v in settings.items() if k != "grpc"}}
    return out


def client_env(cluster: Cluster) -> list[dict[str, str]]:
    """``ORBITMQ_TLS_*`` of a process that reaches the cluster as a client (the proxy): the same
    files, its certificate presented for mutual TLS."""
    mount = names.TLS_MOUNT
    env = [{"name": "ORBITMQ_TLS_CA", "value": f"{mount}/{names.CA_CERT}"}]
    if cluster.spec.security.tls.require_client_cert:
        env += [
            {"name": "ORBITMQ_TLS_CERT", "value": f"{mount}/{names.TLS_CERT}"},
            {"name": "ORBITMQ_TLS_KEY", "value": f"{mount}/{names.TLS_KEY}"},
        ]
    return env


def with_tls(cluster: Cluster, pod_spec: dict[str, Any], *, as_client: bool = False) -> dict[str, Any]:
    """``pod_spec`` (one orbitmq container) serving TLS: the Secret mounted, the flags added,
    the probes on ``/health``, and with ``as_client`` (the proxy, which reaches name servers
    and brokers as a client library does) :func:`client_env`; unchanged with TLS off."""
    if not enabled(cluster):
        return pod_spec
    out = dict(pod_spec)
    (container,) = out["containers"]
    container = dict(container)
    container["command"] = [*container["command"], *server_args(cluster)]
    if as_client:
        container["env"] = [*container.get("env", []), *client_env(cluster)]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        container.pop(probe, None)
    budget = _startup_budget(pod_spec["containers"][0])
    container.update(health_probes("metrics", budget))
    mount = {"name": names.TLS_VOLUME, "mountPath": names.TLS_MOUNT, "readOnly": True}
    container["volumeMounts"] = [*container.get("volumeMounts", []), mount]
    out["containers"] = [container]
    volume = {
        "name": names.TLS_VOLUME,
        "secret": {"secretName": served_secret(cluster), "defaultMode": SECRET_MODE},
    }
    out["volumes"] = [*out.get("volumes", []), volume]
    return out


def _startup_budget(container: dict[str, Any]) -> int:
    """The startup budget the container's gRPC startup probe was given (kept as it is)."""
    startup = container.get("startupProbe") or {}
    return int(startup.get("failureThreshold", 1)) * int(startup.get("periodSeconds", 5))


def certificate(cluster: Cluster) -> Manifest | None:
    """The cert-manager ``Certificate`` of ``<cluster>-tls`` when ``spec.security.tls.issuer``
    names an issuer (None otherwise): cert-manager writes and renews the Secret, with the CA
    in its ``ca.crt`` (CA and Vault issuers fill it; others need ``secretName`` instead)."""
    tls = cluster.spec.security.tls
    if not tls.enabled or tls.issuer is None:
        return None
    every = server_names(cluster)
    return {
        "apiVersion": CERT_MANAGER_API,
        "kind": "Certificate",
        "metadata": common.object_meta(cluster, names.tls_secret(cluster.name), "tls"),
        "spec": {
            "secretName": names.tls_secret(cluster.name),
            "secretTemplate": {"labels": names.labels(cluster.name, "tls")},
            "commonName": every[2],
            "dnsNames": [n for n in every if n != "127.0.0.1"],
            "ipAddresses": ["127.0.0.1"],
            "duration": SERVER_DURATION,
            "renewBefore": SERVER_RENEW_BEFORE,
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "usages": ["digital signature", "server auth", "client auth"],
            "issuerRef": {
                "name": tls.issuer.name,
                "kind": tls.issuer.kind.value,
                "group": CERT_MANAGER_GROUP,
            },
        },
    }
