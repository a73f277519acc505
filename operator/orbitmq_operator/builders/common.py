"""Pieces every object or pod of a cluster shares: the cluster's identity, metadata with owner
references, probes, resources, security contexts, Services and PodDisruptionBudgets.

Everything returns plain dicts in the shape the API server takes, ready for server-side apply:
the same input gives equal dicts, nothing carries a timestamp or a status, and a field is left
out rather than sent empty (an applied ``resources: {}`` would claim a field the API server or
another manager fills in, and the two would fight over it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from orbitmq_operator.builders import names
from orbitmq_operator.builders.errors import SpecError
from orbitmq_operator.spec import API_VERSION, ClusterSpec, Resources

Manifest = dict[str, Any]

RUN_AS_USER = 10001
"""A fixed non-root uid (and gid, and fsGroup): the image needs no user of its own, only files
readable by others and ``orbitmq`` on the PATH; fsGroup makes the data volume writable by it."""


@dataclass(frozen=True)
class Cluster:
    """An ``OrbitMQCluster`` as the builders see it: its identity and its parsed spec.

    ``generation`` is for status (``observedGeneration``) only: it is deliberately not stamped
    on the objects, or every spec change would rewrite all of them.
    """

    name: str
    namespace: str
    uid: str
    spec: ClusterSpec
    generation: int = 0

    def __post_init__(self) -> None:
        names.check_cluster_name(self.name)

    @classmethod
    def from_resource(cls, body: Mapping[str, Any]) -> Cluster:
        """From a resource as the API server (or kopf) hands it over; a spec the schema let
        through but the model refuses (an old CRD, say) is a :class:`SpecError`."""
        meta = body["metadata"]
        try:
            spec = ClusterSpec.model_validate(body.get("spec") or {})
        except ValidationError as error:
            issue = error.errors()[0]
            path = ".".join(["spec", *(str(part) for part in issue["loc"])])
            raise SpecError(path, issue["msg"]) from None
        return cls(meta["name"], meta["namespace"], meta["uid"], spec, int(meta.get("generation", 0)))


def owner_reference(cluster: Cluster) -> dict[str, Any]:
    """Deleting the cluster resource deletes what it owns (garbage collection); ``controller``
    marks the operator's cluster as the one that manages the object, and ``blockOwnerDeletion``
    keeps a foreground deletion of the cluster waiting until its objects are gone."""
    return {
        "apiVersion": API_VERSION,
        "kind": names.CLUSTER_KIND,
        "name": cluster.name,
        "uid": cluster.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(cluster: Cluster, name: str, component: str, group: int | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": cluster.namespace,
        "labels": names.labels(cluster.name, component, group),
        "ownerReferences": [owner_reference(cluster)],
    }


def tcp_port(name: str, port: int) -> dict[str, Any]:
    """A container port; ``protocol`` is spelled out because it is a key of the ports list
    under server-side apply, and an applied item without its key is refused."""
    return {"name": name, "containerPort": port, "protocol": "TCP"}


def service_port(name: str, port: int) -> dict[str, Any]:
    return {"name": name, "port": port, "targetPort": name, "protocol": "TCP"}


def headless_service(
    cluster: Cluster, name: str, component: str, grpc_port: int, group: int | None = None
) -> Manifest:
    """The StatefulSet's governing Service: a DNS name per pod (``<pod>.<service>``).

    ``publishNotReadyAddresses``: a pod's name resolves as soon as it has an IP, so peers can
    reach a starting pod (a broker registering with a name server that is about to be ready)
    and DNS answers never lag behind a restart. The metrics port lets a ServiceMonitor select
    this Service and scrape every pod.
    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(cluster, name, component, group),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": names.selector_labels(cluster.name, component, group),
            "ports": [service_port("grpc", grpc_port), service_port("metrics", cluster.spec.metrics.port)],
        },
    }


def pod_disruption_budget(cluster: Cluster, name: str, component: str, group: int | None = None) -> Manifest:
    """At most one pod of a StatefulSet evicted at a time (a node drain): a broker group keeps
    its master or a slave to promote, the name servers keep the others. ``maxUnavailable``
    rather than ``minAvailable: 1`` so a one-pod group never blocks a drain for ever."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(cluster, name, component, group),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": names.selector_labels(cluster.name, component, group)},
        },
    }


def grpc_probes(port: int, startup_budget_s: int) -> dict[str, Any]:
    """Readiness, liveness and startup probes on the standard gRPC health service.

    The servers answer SERVING once they serve and NOT_SERVING from the start of a graceful
    stop, so readiness follows them closely (every 5 s). Liveness only restarts a wedged
    process: a minute without an answer (6 probes 10 s apart), since a loaded broker may stall on fsync
    and failover is the operator's job, not the kubelet's. The startup probe holds liveness off
    for ``startup_budget_s`` (a broker's recovery re-scans its commit log after a crash).
    """
    action = {"grpc": {"port": port}}
    return {
        "readinessProbe": {**action, "periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 2},
        "livenessProbe": {**action, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6},
        "startupProbe": {
            **action,
            "periodSeconds": 5,
            "timeoutSeconds": 2,
            "failureThreshold": max(1, startup_budget_s // 5),
        },
    }


def container_resources(resources: Resources) -> dict[str, Any]:
    """``requests``/``limits`` as given, empty parts left out (see the module docstring)."""
    out: dict[str, Any] = {}
    if resources.requests:
        out["requests"] = dict(sorted(resources.requests.items()))
    if resources.limits:
        out["limits"] = dict(sorted(resources.limits.items()))
    return out


def pod_security_context() -> dict[str, Any]:
    """Non-root with the ``restricted`` Pod Security Standard's settings. ``OnRootMismatch``:
    a broker's volume holds many files, and a recursive chown on every start would delay it."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_USER,
        "fsGroup": RUN_AS_USER,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    """A read-only root filesystem: the processes write only their data volume and /tmp."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def metrics_annotations(port: int) -> dict[str, str]:
    """For a Prometheus that discovers pods by annotation; the named ``metrics`` port serves
    a PodMonitor or ServiceMonitor instead."""
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}


def spread_over_nodes(cluster: Cluster, component: str, group: int | None = None) -> dict[str, Any]:
    """Prefer one pod of a StatefulSet per node, so a node's loss takes a master *or* its slave
    (and one name server). Preferred, not required: a small cluster still schedules them all."""
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {
                            "matchLabels": names.selector_labels(cluster.name, component, group)
                        },
                    },
                }
            ]
        }
    }


def tmp_volume() -> dict[str, Any]:
    """/tmp for Python and gRPC under a read-only root; small, in the pod's ephemeral storage."""
    return {"name": names.TMP_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}}


def content_hash(text: str) -> str:
    """A short digest of configuration a pod reads from outside its template (a ConfigMap):
    put in the template as an annotation, a changed file becomes a changed template, so the
    StatefulSet's revision changes and the pods are rolled."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def with_user_pod_settings(cluster: Cluster, pod_spec: dict[str, Any]) -> dict[str, Any]:
    """``pod_spec`` with what the user added in ``spec.pod``: node selector and tolerations,
    their volumes after the operator's, their mounts and environment on the one container.

    Left out when empty (see the module docstring); the schema's CEL rules already refused
    names and paths that clash with the operator's own, so nothing here overrides them."""
    pod = cluster.spec.pod
    out = dict(pod_spec)
    if pod.node_selector:
        out["nodeSelector"] = dict(pod.node_selector)
    if pod.tolerations:
        out["tolerations"] = [dict(t) for t in pod.tolerations]
    if pod.volumes:
        out["volumes"] = [*out.get("volumes", []), *(v.model_dump(by_alias=True) for v in pod.volumes)]
    (container,) = out["containers"]
    container = dict(container)
    if pod.volume_mounts:
        mounts = (m.model_dump(by_alias=True) for m in pod.volume_mounts)
        container["volumeMounts"] = [*container.get("volumeMounts", []), *mounts]
    if pod.env:
        container["env"] = [*container.get("env", []), *(e.model_dump(by_alias=True) for e in pod.env)]
    out["containers"] = [container]
    return out


def pod_template(
    cluster: Cluster,
    component: str,
    pod_spec: dict[str, Any],
    group: int | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A workload's pod template: the component's labels, the Prometheus annotations (plus
    ``annotations``, e.g. a config hash that rolls the pods when their config changes)."""
    return {
        "metadata": {
            "labels": names.labels(cluster.name, component, group),
            "annotations": {**(annotations or {}), **metrics_annotations(cluster.spec.metrics.port)},
        },
        "spec": pod_spec,
    }


def stateless_pod_spec(
    cluster: Cluster,
    component: str,
    *,
    container: str,
    command: list[str],
    grpc_port: int,
    startup_budget_s: int,
    resources: Resources,
    termination_grace_s: int,
    env: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The pod of a process that keeps nothing on disk (a name server, a proxy): its gRPC and
    metrics ports, health probes, /tmp as the only writable path, and the user's ``spec.pod``.
    ``env``: the operator's own variables (authentication's, read from a Secret), if any.

    Such processes never call the Kubernetes API, and service links would put variables of our
    own Services among their settings (a cluster named orbitmq: ``ORBITMQ_NAMESRV_PORT``)."""
    spec = cluster.spec
    main: dict[str, Any] = {
        "name": container,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy.value,
        "command": command,
        "ports": [tcp_port("grpc", grpc_port), tcp_port("metrics", spec.metrics.port)],
        **grpc_probes(grpc_port, startup_budget_s),
        "securityContext": container_security_context(),
        "volumeMounts": [{"name": names.TMP_VOLUME, "mountPath": names.TMP_MOUNT}],
    }
    if env:
        main["env"] = list(env)
    limits = container_resources(resources)
    if limits:
        main["resources"] = limits
    return with_user_pod_settings(
        cluster,
        {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": termination_grace_s,
            "securityContext": pod_security_context(),
            "affinity": spread_over_nodes(cluster, component),
            "containers": [main],
            "volumes": [tmp_volume()],
        },
    )
