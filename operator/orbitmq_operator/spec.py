"""The custom resources' specs and statuses: the one source of the CRDs and of the operator's
typed view of what a user applied.

Each model is pydantic (the operator parses a resource's ``spec`` with it) and carries the
OpenAPI details the API server enforces (defaults, enums, ranges, patterns) through ordinary
``Field`` constraints, plus CEL rules (``x-kubernetes-validations``) for what a schema cannot
say: immutable fields, fields that must agree, storage that must not shrink.
:mod:`orbitmq_operator.crds` turns the models into CustomResourceDefinitions, so the API server
refuses a bad resource with the field and the rule before the operator ever sees it.

Field names are camelCase on the wire, as Kubernetes users expect, and snake_case in Python.
Units are in the names (``detectionWindowMs``), as everywhere in orbitmq.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from orbitmq.common.names import GROUP_NAME_MAX_LENGTH, NAME_RULE, TOPIC_NAME_MAX_LENGTH
from orbitmq.store.config import FlushMode

GROUP = "orbitmq.io"
VERSION = "v1alpha1"
FINALIZER = f"{GROUP}/operator"
"""The operator's finalizer on topics and consumer groups (their deletion removes them from the
brokers first)."""
API_VERSION = f"{GROUP}/{VERSION}"

QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$"
"""A Kubernetes resource quantity as users write it (``500m``, ``2Gi``)."""
K8S_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""An RFC 1123 label: what a cluster's name must be, since its objects' names derive from it."""
QUANTITY_MAX_LENGTH = 32
"""Bounds a quantity string, which keeps the CEL cost of comparing quantities within budget."""
MAX_RESOURCE_NAMES = 16
MAX_BROKER_SETTINGS = 128
"""Bounds on maps: the API server estimates a CEL rule's cost from them (``maxProperties``)."""

Quantity = Annotated[str, Field(pattern=QUANTITY_PATTERN, max_length=QUANTITY_MAX_LENGTH)]


def cel(rule: str, message: str, field_path: str | None = None) -> dict[str, str]:
    """One ``x-kubernetes-validations`` entry: a CEL rule and the message a user reads."""
    entry = {"rule": rule, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


def immutable(what: str) -> dict[str, str]:
    return cel("self == oldSelf", f"{what} cannot be changed once set")


def list_map(key: str) -> dict[str, Any]:
    """A list whose items are keyed by ``key`` (conditions by type): server-side apply merges
    such lists item by item, so the operator's status patches do not clobber each other."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]}


class _Spec(BaseModel):
    """camelCase aliases, unknown fields refused (the API server prunes them anyway)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class Resources(_Spec):
    """Container resources (``requests``/``limits`` of ``cpu``, ``memory``), as in a pod spec."""

    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=MAX_RESOURCE_NAMES)
    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=MAX_RESOURCE_NAMES)


class ReplicationMode(StrEnum):
    SYNC_MASTER = "SYNC_MASTER"
    """A send is acknowledged once a slave holds it: no acknowledged message lost on failover."""
    ASYNC_MASTER = "ASYNC_MASTER"


class RetentionPolicy(StrEnum):
    RETAIN = "Retain"
    """Brokers' volumes outlive the cluster resource: deleting it never deletes messages."""
    DELETE = "Delete"


class ImagePullPolicy(StrEnum):
    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


class NameServersSpec(_Spec):
    replicas: int = Field(
        default=2, ge=1, le=9, description="Name server pods (they never talk to each other)."
    )
    resources: Resources = Field(default_factory=Resources)


class StorageSpec(_Spec):
    size: str = Field(
        default="10Gi",
        pattern=QUANTITY_PATTERN,
        max_length=QUANTITY_MAX_LENGTH,
        description="Volume of each broker (commit log, consume queues, index); may grow, never shrink.",
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("quantity(self).compareTo(quantity(oldSelf)) >= 0", "storage size cannot shrink")
            ]
        },
    )
    storage_class_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description="StorageClass of the brokers' volumes (default: the cluster's default class).",
        json_schema_extra={"x-kubernetes-validations": [immutable("storageClassName")]},
    )
    retention: RetentionPolicy = Field(
        default=RetentionPolicy.RETAIN,
        description="What happens to the brokers' volumes when the cluster resource is deleted.",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                # `self == oldSelf` on the field only runs when both old and new set it.
                cel(
                    "has(self.storageClassName) == has(oldSelf.storageClassName)",
                    "storageClassName cannot be added or removed once the cluster exists "
                    "(the brokers' volumes keep the class they were created with)",
                    ".storageClassName",
                )
            ]
        }
    )


class BrokersSpec(_Spec):
    groups: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Broker groups (a master and its slaves each); scaling down drains a group first.",
    )
    slaves_per_group: int = Field(default=1, ge=0, le=3, description="Slaves of each master.")
    flush_mode: FlushMode = Field(default=FlushMode.ASYNC_FLUSH, description="When a send is acknowledged.")
    replication_mode: ReplicationMode = Field(
        default=ReplicationMode.SYNC_MASTER, description="SYNC_MASTER waits for a slave to hold a send."
    )
    storage: StorageSpec = Field(default_factory=StorageSpec)
    resources: Resources = Field(default_factory=Resources)
    drain_timeout_s: int = Field(
        default=3600,
        ge=0,
        description="How long a broker group removed by lowering groups may take to drain (its "
        "consumers catching up after its write permission is wiped) before the cluster reports "
        "Degraded/DrainStuck; it is kept, with its messages, until drained.",
    )
    drain_offline_group_grace_s: int = Field(
        default=300,
        ge=0,
        description="How long a drain waits on the backlog of a consumer group with no consumer "
        "online on the draining broker group (a finished job, a helm test group) before it stops "
        "waiting on it; those messages are then lost with the group. The groups are named in "
        "status.drains[].ignoredGroups and an Event (DrainIgnoredGroups).",
    )
    discard_backlog_after_timeout: bool = Field(
        default=False,
        description="Remove a draining broker group after drainTimeoutS even with messages not "
        "consumed (they are lost).",
    )
    auto_create_topic: bool = Field(
        default=False,
        description="Create a topic on its first send (RocketMQ's autoCreateTopicEnable). Off: a send "
        "to a missing topic fails with TOPIC_NOT_EXIST naming it, so a misspelt topic is an error, "
        "not a new topic; create topics with OrbitMQTopic resources.",
    )
    segment_mib: int = Field(
        default=1024,
        ge=5,
        le=16384,
        description="Commit-log segment size in MiB (fixed for an existing broker's data).",
        json_schema_extra={"x-kubernetes-validations": [immutable("segmentMib")]},
    )
    settings: dict[str, Any] = Field(
        default_factory=dict,
        max_length=MAX_BROKER_SETTINGS,
        description="Further broker settings by their snake_case name (see orbitmq broker --help); "
        "checked by the operator, which reports a bad one in the Ready condition.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "self.replicationMode != 'SYNC_MASTER' || self.slavesPerGroup >= 1",
                    "replicationMode SYNC_MASTER needs slavesPerGroup >= 1 (a send waits for a slave)",
                    ".slavesPerGroup",
                )
            ]
        }
    )


class FailoverSpec(_Spec):
    enabled: bool = Field(default=True, description="Promote an in-sync slave when a master dies.")
    detection_window_ms: int = Field(
        default=3_000,
        ge=1_000,
        le=600_000,
        description="How long a master must be unreachable before a slave is promoted.",
    )


class ProxySpec(_Spec):
    """``orbitmq proxy``: the Apache RocketMQ 5 gRPC protocol (``apache.rocketmq.v2``) in front
    of the cluster, so the official RocketMQ 5 clients of every language reach it through one
    Service (``<cluster>-proxy.<ns>.svc:8081``). Stateless: POP and transaction state live in
    the brokers, so replicas are interchangeable and scale freely."""

    replicas: int = Field(
        default=0,
        ge=0,
        le=32,
        description="Proxy pods (a Deployment behind one Service); 0: no proxy, only orbitmq's own protocol.",
    )
    resources: Resources = Field(default_factory=Resources)


class MetricsSpec(_Spec):
    port: int = Field(default=9100, ge=1024, le=65535, description="Prometheus /metrics port of every pod.")


RESERVED_VOLUMES = {"data": "/var/lib/orbitmq", "config": "/etc/orbitmq", "tmp": "/tmp"}
"""The volumes (and their mount paths) the builders use themselves: data, settings, /tmp."""
RESERVED_ENV = ("POD_IP",)
MAX_POD_ITEMS = 32


class _PodItem(_Spec):
    """A Kubernetes object inside ``spec.pod`` passed on as it is: only its ``name`` is read
    here, the API server checks the rest when the operator applies the StatefulSet."""

    name: str = Field(pattern=K8S_NAME_PATTERN, max_length=63)
    model_config = ConfigDict(extra="allow", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})


class PodVolume(_PodItem):
    """A ``Volume`` (hostPath, configMap, secret, ...)."""


class PodVolumeMount(_PodItem):
    """A ``VolumeMount`` of the orbitmq container, naming a volume of ``spec.pod.volumes``."""

    mount_path: str = Field(min_length=1, max_length=4096, pattern="^/")


class PodEnvVar(_PodItem):
    """An ``EnvVar`` of the orbitmq container (``value`` or ``valueFrom``)."""

    name: str = Field(pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", max_length=253)


class PodSpec(_Spec):
    """What a user adds to every orbitmq pod (name servers and brokers), as Strimzi's
    ``template.pod``: where pods run, extra volumes and environment. The operator's own volumes,
    probes and command stay its own."""

    node_selector: dict[str, str] = Field(
        default={}, max_length=MAX_POD_ITEMS, description="Pods run on nodes with these labels."
    )
    tolerations: list[dict[str, Any]] = Field(
        default=[],
        max_length=MAX_POD_ITEMS,
        description="Tolerations (Kubernetes Toleration objects).",
        json_schema_extra={"items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    )
    volumes: list[PodVolume] = Field(
        default=[],
        max_length=MAX_POD_ITEMS,
        description="Extra volumes; data, config and tmp are the operator's own.",
        json_schema_extra={
            **list_map("name"),
            "x-kubernetes-validations": [
                cel(
                    f"self.all(v, !(v.name in {list(RESERVED_VOLUMES)}))",
                    f"volume names {', '.join(RESERVED_VOLUMES)} are the operator's own",
                )
            ],
        },
    )
    volume_mounts: list[PodVolumeMount] = Field(
        default=[],
        max_length=MAX_POD_ITEMS,
        description="Extra mounts of the orbitmq container, of volumes listed in volumes.",
        json_schema_extra={
            **list_map("mountPath"),
            "x-kubernetes-validations": [
                cel(
                    f"self.all(m, !(m.mountPath in {list(RESERVED_VOLUMES.values())}))",
                    f"mount paths {', '.join(RESERVED_VOLUMES.values())} are the operator's own",
                )
            ],
        },
    )
    env: list[PodEnvVar] = Field(
        default=[],
        max_length=MAX_POD_ITEMS,
        description="Extra environment variables of the orbitmq container.",
        json_schema_extra={
            **list_map("name"),
            "x-kubernetes-validations": [
                cel(
                    f"self.all(e, !(e.name in {list(RESERVED_ENV)}))",
                    f"environment variables {', '.join(RESERVED_ENV)} are the operator's own",
                )
            ],
        },
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "self.volumeMounts.all(m, self.volumes.exists(v, v.name == m.name))",
                    "every volumeMounts[].name must name a volume of spec.pod.volumes",
                    ".volumeMounts",
                )
            ]
        }
    )


class IssuerKind(StrEnum):
    ISSUER = "Issuer"
    CLUSTER_ISSUER = "ClusterIssuer"


class IssuerRef(_Spec):
    """A cert-manager issuer that signs the cluster's server certificate."""

    name: str = Field(min_length=1, max_length=253, description="The Issuer's or ClusterIssuer's name.")
    kind: IssuerKind = Field(description="Issuer (in the cluster's namespace) or ClusterIssuer.")


class TlsSpec(_Spec):
    """TLS on every port of the cluster (name servers, brokers with their replication, proxies).

    Where the certificate comes from: ``issuer`` (cert-manager ``Certificate`` resources the
    operator creates), ``secretName`` (a Secret the user keeps, with ``tls.crt``, ``tls.key`` and
    ``ca.crt``), or neither: a CA the operator creates and keeps in ``<cluster>-ca``. Every pod
    mounts the certificate at ``/var/run/orbitmq/tls`` and re-reads it when the Secret changes."""

    enabled: bool = Field(
        default=False,
        description="Serve TLS on every port of the cluster. Fixed once the cluster exists: a rolling "
        "update cannot mix plaintext and TLS pods, which could not talk to each other.",
        json_schema_extra={"x-kubernetes-validations": [immutable("security.tls.enabled")]},
    )
    issuer: IssuerRef | None = Field(
        default=None, description="Have cert-manager issue the server certificate from this issuer."
    )
    secret_name: str | None = Field(
        default=None,
        pattern=K8S_NAME_PATTERN,
        max_length=253,
        description="A Secret of yours with tls.crt, tls.key and ca.crt to serve with.",
    )
    require_client_cert: bool = Field(
        default=False,
        description="Mutual TLS: refuse clients without a certificate signed by the cluster's CA.",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!(has(self.issuer) && has(self.secretName))",
                    "issuer and secretName are exclusive: the certificate comes from one of them",
                    ".secretName",
                )
            ]
        }
    )

    @model_validator(mode="after")
    def _one_source(self) -> TlsSpec:
        """The CEL rule's twin, for a resource the API server let through (an older CRD)."""
        if self.issuer is not None and self.secret_name is not None:
            raise ValueError("issuer and secretName are exclusive: the certificate comes from one of them")
        return self


class AuthenticationSpec(_Spec):
    """Users and permissions (RocketMQ ACL 2.0): every call signed by a user, and what is not
    allowed to that user is denied."""

    enabled: bool = Field(
        default=False, description="Require signed requests and enforce the users' policies."
    )


class SecuritySpec(_Spec):
    """TLS and authentication of the cluster; both off by default."""

    tls: TlsSpec = Field(default_factory=TlsSpec)
    authentication: AuthenticationSpec = Field(default_factory=AuthenticationSpec)


class ClusterSpec(_Spec):
    """``OrbitMQCluster``: name servers and broker groups, reconciled into StatefulSets."""

    image: str = Field(min_length=1, description="Image holding the orbitmq services.")
    image_pull_policy: ImagePullPolicy = ImagePullPolicy.IF_NOT_PRESENT
    name_servers: NameServersSpec = Field(default_factory=NameServersSpec)
    brokers: BrokersSpec = Field(default_factory=BrokersSpec)
    failover: FailoverSpec = Field(default_factory=FailoverSpec)
    proxy: ProxySpec = Field(default_factory=ProxySpec)
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
    pod: PodSpec = Field(default_factory=PodSpec)
    security: SecuritySpec = Field(default_factory=SecuritySpec)


class TopicSpec(_Spec):
    """``OrbitMQTopic``: a topic on every master of a cluster (and on groups added later)."""

    cluster: str = Field(
        pattern=K8S_NAME_PATTERN,
        max_length=63,
        description="The OrbitMQCluster (same namespace) that serves this topic.",
        json_schema_extra={"x-kubernetes-validations": [immutable("cluster")]},
    )
    topic_name: str = Field(
        pattern=NAME_RULE,
        max_length=TOPIC_NAME_MAX_LENGTH,
        description="The topic's name in orbitmq (may hold capitals, unlike a resource name).",
        json_schema_extra={"x-kubernetes-validations": [immutable("topicName")]},
    )
    read_queues: int = Field(default=4, ge=1, le=1024, description="Read queues per broker group.")
    write_queues: int = Field(default=4, ge=1, le=1024, description="Write queues per broker group.")
    perm: int = Field(default=6, ge=0, le=7, description="READ=4 WRITE=2 INHERIT=1.")
    order: bool = Field(default=False, description="An ordered topic.")
    force: bool = Field(
        default=False,
        description="Apply a change even if it hides unconsumed messages (read queues cut below "
        "queues that hold them).",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "self.readQueues >= self.writeQueues",
                    "readQueues must be at least writeQueues: messages sent to the other queues "
                    "would never be read",
                    ".readQueues",
                )
            ]
        }
    )


class ConsumerGroupSpec(_Spec):
    """``OrbitMQConsumerGroup``: a subscription group on every master of a cluster."""

    cluster: str = Field(
        pattern=K8S_NAME_PATTERN,
        max_length=63,
        description="The OrbitMQCluster (same namespace) that serves this group.",
        json_schema_extra={"x-kubernetes-validations": [immutable("cluster")]},
    )
    group_name: str = Field(
        pattern=NAME_RULE,
        max_length=GROUP_NAME_MAX_LENGTH,
        description="The consumer group's name in orbitmq.",
        json_schema_extra={"x-kubernetes-validations": [immutable("groupName")]},
    )
    retry_max_times: int = Field(default=16, ge=0, le=1000, description="Retries before a dead letter.")
    broadcast_allowed: bool = Field(default=True, description="Whether broadcasting consumers may join.")
    orderly: bool = Field(default=False, description="Members consume orderly (queue locks).")


class ConditionType(StrEnum):
    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"


class Condition(_Spec):
    type: ConditionType
    status: str = Field(pattern="^(True|False|Unknown)$")
    reason: str = Field(default="", description="CamelCase, for scripts.")
    message: str = Field(default="", description="What happened and what to do, for people.")
    last_transition_time: str = ""
    observed_generation: int = 0


class BrokerGroupStatus(_Spec):
    name: str
    master: str = Field(default="", description="Pod serving as master now.")
    epoch: int = 0
    replicas_ready: int = 0
    writable: bool = False


class OfflineGroup(_Spec):
    """A consumer group lagging on a draining broker group with no consumer online there."""

    group: str
    since: str = Field(description="When it was first seen so (RFC 3339).")


class DrainStatus(_Spec):
    """A broker group being drained before its removal."""

    name: str
    started_at: str = Field(description="When its write permission was wiped (RFC 3339).")
    lag: int = Field(default=0, description="Messages its consumer groups have not consumed yet.")
    step: str = Field(default="Wait", description="Wait, Stuck or Remove.")
    offline_groups: list[OfflineGroup] = Field(
        default_factory=list,
        description="Consumer groups with a backlog there and no consumer online, and since when.",
        json_schema_extra=list_map("group"),
    )
    ignored_groups: list[str] = Field(
        default_factory=list,
        description="Of those, the ones offline for spec.brokers.drainOfflineGroupGraceS: not waited on.",
    )


class RollingUpdateStatus(_Spec):
    """A broker group whose pods are being brought to its StatefulSet's new revision."""

    name: str
    step: str = Field(default="Wait", description="Delete, Switchover or Wait (the step just taken).")
    pod: str = Field(default="", description="The pod the step is about.")
    message: str = ""


class ClusterStatus(_Spec):
    observed_generation: int = 0
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=list_map("type"))
    name_servers_ready: int = 0
    broker_groups_ready: int = Field(default=0, description="Groups with a writable master.")
    broker_groups: list[BrokerGroupStatus] = Field(default_factory=list, json_schema_extra=list_map("name"))
    namesrv_address: str = Field(default="", description="What clients give as --namesrv.")
    proxies_ready: int = Field(default=0, description="Ready pods of spec.proxy.")
    proxy_address: str = Field(
        default="", description="What Apache RocketMQ 5 clients give as their endpoint (with spec.proxy)."
    )
    drains: list[DrainStatus] = Field(default_factory=list, json_schema_extra=list_map("name"))
    rolling_updates: list[RollingUpdateStatus] = Field(
        default_factory=list, json_schema_extra=list_map("name")
    )


class ResourceStatus(_Spec):
    """Status of a topic or a consumer group."""

    observed_generation: int = 0
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=list_map("type"))
    applied_to: list[str] = Field(default_factory=list, description="Broker groups that have it.")
