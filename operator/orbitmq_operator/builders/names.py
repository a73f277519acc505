"""Names, labels and fixed addresses of everything the operator creates for a cluster.

Every name derives from the ``OrbitMQCluster``'s name, so an object's owner is readable from
``kubectl get``, and nothing needs to be looked up to be found again:

==============================  ==========================================================
``<c>-namesrv``                 name servers' StatefulSet, PDB, and the ClusterIP Service
                                clients and brokers use (``<c>-namesrv.<ns>.svc:9876``)
``<c>-namesrv-headless``        headless Service: one DNS name per name-server pod
``<c>-broker-<i>``              broker group ``i``: StatefulSet, headless Service, PDB, and
                                the *broker name* registered in orbitmq (one name for
                                ``kubectl``, metrics and ``orbitmq admin``)
``<c>-broker-config``           ConfigMap holding ``broker.yaml`` (shared by every group)
``data-<c>-broker-<i>-<n>``     PVC of pod ``n`` of group ``i`` (made by the StatefulSet)
``<c>-proxy``                   ``orbitmq proxy`` (``spec.proxy``): Deployment, PDB, and the
                                ClusterIP Service RocketMQ 5 clients use
                                (``<c>-proxy.<ns>.svc:8081``)
==============================  ==========================================================

The orbitmq *cluster name* brokers register under is the resource's name too.
"""

from __future__ import annotations

import re

from orbitmq_operator.builders.errors import SpecError
from orbitmq_operator.spec import GROUP, RESERVED_VOLUMES

CLUSTER_KIND = "OrbitMQCluster"
APP = "orbitmq"
MANAGED_BY = "orbitmq-operator"

NAMESRV = "namesrv"
BROKER = "broker"
PROXY = "proxy"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_BROKER_GROUP = f"{GROUP}/broker-group"
ANNOTATION_CONFIG_HASH = f"{GROUP}/config-hash"

NAMESRV_PORT = 9876
BROKER_PORT = 10911
"""The services' default gRPC ports (DESIGN §3); replication shares the broker's port."""
PROXY_PORT = 8081
"""``orbitmq proxy``'s gRPC port: RocketMQ 5's proxy port, which its clients' examples use."""
CLUSTER_DOMAIN_SUFFIX = "svc"
"""``<svc>.<ns>.svc`` resolves through the pods' DNS search path on any cluster domain, where
``svc.cluster.local`` would hard-code the default domain."""

DATA_VOLUME = "data"
CONFIG_VOLUME = "config"
TMP_VOLUME = "tmp"
DATA_MOUNT = RESERVED_VOLUMES[DATA_VOLUME]
BROKER_DATA_DIR = f"{DATA_MOUNT}/store"
"""The store lives one level below the volume's root, where some filesystems put
``lost+found``: the store owns every entry of its directory."""
CONFIG_MOUNT = RESERVED_VOLUMES[CONFIG_VOLUME]
TMP_MOUNT = RESERVED_VOLUMES[TMP_VOLUME]
BROKER_CONFIG_KEY = "broker.yaml"

MAX_BROKER_GROUPS = 64
"""``spec.brokers.groups``' upper bound (spec.py); names are sized for the largest group index."""
_STATEFULSET_NAME_MAX = 52
"""A StatefulSet's pods carry ``controller-revision-hash: <name>-<10-char hash>``, a label value
(at most 63 characters): longer StatefulSet names create pods that can never be updated."""
_SERVICE_NAME_MAX = 63
MAX_CLUSTER_NAME = min(
    _STATEFULSET_NAME_MAX - len(f"-{BROKER}-{MAX_BROKER_GROUPS - 1}"),
    _SERVICE_NAME_MAX - len(f"-{NAMESRV}-headless"),
)
"""42: the longest cluster name whose every derived name is valid, for any group count, so a
cluster that is valid today stays valid when it scales out."""
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
"""Service names are DNS-1035 labels: they must start with a letter."""


def check_cluster_name(name: str) -> None:
    """Refuse a cluster name from which some object's name would be invalid."""
    if not _DNS_1035.match(name):
        raise SpecError(
            "metadata.name",
            f"{name!r} must be lower-case letters, digits and '-', start with a letter and end "
            "with a letter or digit (it names Services, which are DNS-1035 labels)",
        )
    if len(name) > MAX_CLUSTER_NAME:
        raise SpecError(
            "metadata.name",
            f"{name!r} is {len(name)} characters; at most {MAX_CLUSTER_NAME} leave room for "
            f"'-{BROKER}-{MAX_BROKER_GROUPS - 1}' within a StatefulSet name's 52",
        )


def namesrv(cluster: str) -> str:
    return f"{cluster}-{NAMESRV}"


def namesrv_headless(cluster: str) -> str:
    return f"{cluster}-{NAMESRV}-headless"


def broker_group(cluster: str, index: int) -> str:
    """StatefulSet, headless Service, PDB and orbitmq broker name of group ``index``."""
    return f"{cluster}-{BROKER}-{index}"


def broker_config(cluster: str) -> str:
    return f"{cluster}-{BROKER}-config"


def proxy(cluster: str) -> str:
    """Deployment, PDB and ClusterIP Service of ``orbitmq proxy``."""
    return f"{cluster}-{PROXY}"


def proxy_service_address(cluster: str, namespace: str) -> str:
    """The endpoint RocketMQ 5 clients are given (their ``ClientConfiguration`` endpoints)."""
    return f"{proxy(cluster)}.{namespace}.{CLUSTER_DOMAIN_SUFFIX}:{PROXY_PORT}"


def namesrv_service_address(cluster: str, namespace: str) -> str:
    """What clients give as ``--namesrv``: the ClusterIP Service, whichever pods are behind it
    (every name server knows every broker, so any one answers a route query)."""
    return f"{namesrv(cluster)}.{namespace}.{CLUSTER_DOMAIN_SUFFIX}:{NAMESRV_PORT}"


# -- TLS (spec.security.tls) --

TLS_VOLUME = "tls"
TLS_MOUNT = "/var/run/orbitmq/tls"
"""Where every orbitmq pod finds its TLS files (a Secret volume: the kubelet swaps the files in
place when the Secret changes, and the servers re-read them before the next handshake)."""
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
CA_CERT = "ca.crt"
CA_KEY = "ca.key"
"""Keys of the TLS Secrets, as cert-manager and ``kubectl create secret tls`` name them."""


def ca_secret(cluster: str) -> str:
    """``<cluster>-ca``: the operator's CA of the cluster (``ca.crt``, ``ca.key``); its own."""
    return f"{cluster}-ca"


def ca_cert_secret(cluster: str) -> str:
    """``<cluster>-ca-cert``: what clients mount (``ca.crt`` only: the CAs to trust)."""
    return f"{cluster}-ca-cert"


def tls_secret(cluster: str) -> str:
    """``<cluster>-tls``: the server certificate of every pod (``tls.crt``, ``tls.key``,
    ``ca.crt``), made by the operator or by cert-manager."""
    return f"{cluster}-tls"


def broker_pod_host(cluster: str, namespace: str, group: int, pod: str) -> str:
    """A broker pod's stable DNS name, through its group's headless Service: what brokers
    advertise under TLS (a certificate cannot name a pod IP it does not know in advance)."""
    return f"{pod}.{broker_group(cluster, group)}.{namespace}.{CLUSTER_DOMAIN_SUFFIX}"


def namesrv_pod_addresses(cluster: str, namespace: str, replicas: int) -> list[str]:
    """Each name-server pod's stable DNS name: what brokers register with.

    Name servers never talk to each other (DESIGN §1), so a broker must register with every one;
    through the ClusterIP Service it would reach one pod per connection and the others would
    answer clients with no route. The headless Service's per-pod names are as stable as the
    Service's (they follow the pod, never its IP).
    """
    service = f"{namesrv_headless(cluster)}.{namespace}.{CLUSTER_DOMAIN_SUFFIX}"
    return [f"{namesrv(cluster)}-{n}.{service}:{NAMESRV_PORT}" for n in range(replicas)]


def selector_labels(cluster: str, component: str, group: int | None = None) -> dict[str, str]:
    """The labels a StatefulSet selects its pods by: immutable once created, so only what never
    changes for that StatefulSet (never the managed-by label or a version)."""
    labels = {LABEL_NAME: APP, LABEL_INSTANCE: cluster, LABEL_COMPONENT: component}
    if group is not None:
        labels[LABEL_BROKER_GROUP] = str(group)
    return labels


def labels(cluster: str, component: str, group: int | None = None) -> dict[str, str]:
    """Every object's labels: the selector labels plus who manages it."""
    return {**selector_labels(cluster, component, group), LABEL_MANAGED_BY: MANAGED_BY}


def cluster_selector(cluster: str) -> str:
    """A label selector (``kubectl -l``) for everything of one cluster, e.g. to list its PVCs."""
    return f"{LABEL_NAME}={APP},{LABEL_INSTANCE}={cluster}"


# -- authentication (spec.security.authentication, OrbitMQUser) --

OPERATOR_USER = "operator-user"
"""Component label of the operator's super user Secret."""
ACCESS_KEY = "accessKey"
SECRET_KEY = "secretKey"
"""The keys of every credentials Secret (the operator's, an OrbitMQUser's): RocketMQ's
``SessionCredentials(accessKey, secretKey)``."""


def operator_user_secret(cluster: str) -> str:
    """``<cluster>-operator-user``: the operator's super user of the cluster (accessKey,
    secretKey), which every server of the cluster takes as its bootstrap super user."""
    return f"{cluster}-{OPERATOR_USER}"


def user_secret(user: str) -> str:
    """The Secret of a generated ``OrbitMQUser``'s credentials: named after the user."""
    return user
