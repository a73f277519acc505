"""Broker groups: per group a StatefulSet (a master and its slaves, a volume each), a headless
Service and a PodDisruptionBudget; one ConfigMap of settings shared by every group.

How a pod knows what it is, without a shell in the image:

* **broker name** — the group's StatefulSet name, a flag in the group's pod template;
* **id and role** — ``--broker-id-from-hostname``: a StatefulSet pod's host name ends in its
  ordinal; ordinal 0 starts as master (``spec.brokers.replicationMode``), ordinal ``n`` as the
  slave with broker id ``n``. After a failover the store's ``ha-role.json`` records the new
  role and id, and it wins over both on every restart: a promoted ordinal 2 stays master;
* **advertised address** — the pod IP from the downward API (``$(POD_IP)`` is expanded by the
  kubelet in the command), so clients reach a broker directly, DNS or not; a restarted pod
  re-registers its new IP within one heartbeat;
* **name servers** — every name-server pod's stable DNS name, from ``broker.yaml``.

Rolling belongs to the operator, not the StatefulSet controller (``updateStrategy: OnDelete``):
slaves first, then a switchover before the master restarts (issue 14, item 5). The pod
template's config-hash annotation still changes with ``broker.yaml``, so the StatefulSet's
revision tells the operator which pods run stale settings.
"""

from __future__ import annotations

import math
from typing import Any

from orbitmq_operator.builders import auth, broker_settings, common, names, tls
from orbitmq_operator.builders.common import Cluster, Manifest
from orbitmq_operator.spec import RetentionPolicy

CONTAINER = "broker"
STARTUP_BUDGET_S = 600
"""After a crash a broker re-scans its commit log's tail with CRC checks and rebuilds consume
queues and index past the checkpoint before it serves; ten minutes covers a large store on a
slow volume, and liveness must not kill a recovery in progress (it would start over)."""
STOP_MARGIN_S = 55
"""Beyond the broker's own ``grace_ms`` (in-flight calls): unregistering from every name
server, persisting the config tables, flushing and closing the store. Dirty pages of an
ASYNC_FLUSH commit log may take tens of seconds to reach a slow disk; a SIGKILL before that
only costs a longer recovery, but there is no reason to cause one."""


def broker_objects(cluster: Cluster) -> list[Manifest]:
    """The ConfigMap first (pods mount it), then each group's Service, StatefulSet and PDB."""
    objects = [config_map(cluster)]
    for group in range(cluster.spec.brokers.groups):
        objects += [
            headless_service(cluster, group),
            statefulset(cluster, group),
            disruption_budget(cluster, group),
        ]
    return objects


def config_map(cluster: Cluster) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": common.object_meta(cluster, names.broker_config(cluster.name), names.BROKER),
        "data": {names.BROKER_CONFIG_KEY: broker_settings.broker_config_text(cluster)},
    }


def headless_service(cluster: Cluster, group: int) -> Manifest:
    name = names.broker_group(cluster.name, group)
    return common.headless_service(cluster, name, names.BROKER, names.BROKER_PORT, group)


def disruption_budget(cluster: Cluster, group: int) -> Manifest:
    return common.pod_disruption_budget(cluster, names.broker_group(cluster.name, group), names.BROKER, group)


def retention_policy(retention: RetentionPolicy) -> dict[str, str]:
    """``persistentVolumeClaimRetentionPolicy`` for ``spec.brokers.storage.retention``.

    ``whenDeleted`` follows the spec: ``Delete`` removes a group's volumes with its StatefulSet
    (the cluster resource deleted, or a group removed after it was drained). ``whenScaled`` is
    always ``Retain``: fewer replicas remove the highest ordinals, which after a failover may
    hold the master's data, and messages must never be deleted by a replica count. A kept
    volume is reused if the ordinal comes back (the slave truncates to the shared epoch point).
    """
    when_deleted = "Delete" if retention is RetentionPolicy.DELETE else "Retain"
    return {"whenDeleted": when_deleted, "whenScaled": "Retain"}


def volume_claim_template(cluster: Cluster, group: int) -> dict[str, Any]:
    storage = cluster.spec.brokers.storage
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name:  # absent: the cluster's default StorageClass
        spec["storageClassName"] = storage.storage_class_name
    return {
        # typed like any PVC: the API server returns the template with these, so a comparison
        # of desired with current (changes.py) sees no difference that is not one
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": names.DATA_VOLUME, "labels": names.labels(cluster.name, names.BROKER, group)},
        "spec": spec,
    }


def statefulset(cluster: Cluster, group: int) -> Manifest:
    brokers = cluster.spec.brokers
    name = names.broker_group(cluster.name, group)
    config_text = broker_settings.broker_config_text(cluster)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": common.object_meta(cluster, name, names.BROKER, group),
        "spec": {
            "serviceName": name,
            "replicas": 1 + brokers.slaves_per_group,
            # a slave need not wait for its master to be ready (it retries replication), and
            # a whole group should come back together after a node loss
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "persistentVolumeClaimRetentionPolicy": retention_policy(brokers.storage.retention),
            "selector": {"matchLabels": names.selector_labels(cluster.name, names.BROKER, group)},
            "template": common.pod_template(
                cluster,
                names.BROKER,
                _pod_spec(cluster, group),
                group,
                {names.ANNOTATION_CONFIG_HASH: common.content_hash(config_text)},
            ),
            "volumeClaimTemplates": [volume_claim_template(cluster, group)],
        },
    }


def termination_grace_s(cluster: Cluster) -> int:
    """The broker's own grace (``grace_ms``, which settings may change) plus the stop margin."""
    return math.ceil(broker_settings.effective(cluster).grace_ms / 1000) + STOP_MARGIN_S


def broker_command(cluster: Cluster, group: int) -> list[str]:
    return [
        "orbitmq",
        "--log-level",
        "INFO",
        "broker",
        "--config",
        f"{names.CONFIG_MOUNT}/{names.BROKER_CONFIG_KEY}",
        "--broker-name",
        names.broker_group(cluster.name, group),
        "--broker-id-from-hostname",
        "--advertise-addr",
        tls.broker_advertise(cluster, group),
    ]


def _pod_spec(cluster: Cluster, group: int) -> dict[str, Any]:
    spec = cluster.spec
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy.value,
        "command": broker_command(cluster, group),
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            *tls.broker_env(cluster),
            *auth.server_env(cluster, "ORBITMQ_BROKER_"),
        ],
        "ports": [common.tcp_port("grpc", names.BROKER_PORT), common.tcp_port("metrics", spec.metrics.port)],
        **common.grpc_probes(names.BROKER_PORT, STARTUP_BUDGET_S),
        "securityContext": common.container_security_context(),
        "volumeMounts": [
            {"name": names.DATA_VOLUME, "mountPath": names.DATA_MOUNT},
            {"name": names.CONFIG_VOLUME, "mountPath": names.CONFIG_MOUNT, "readOnly": True},
            {"name": names.TMP_VOLUME, "mountPath": names.TMP_MOUNT},
        ],
    }
    resources = common.container_resources(spec.brokers.resources)
    if resources:
        container["resources"] = resources
    pod = common.with_user_pod_settings(
        cluster,
        {
            "automountServiceAccountToken": False,  # see nameservers._pod_spec
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": termination_grace_s(cluster),
            "securityContext": common.pod_security_context(),
            "affinity": common.spread_over_nodes(cluster, names.BROKER, group),
            "containers": [container],
            "volumes": [
                {"name": names.CONFIG_VOLUME, "configMap": {"name": names.broker_config(cluster.name)}},
                common.tmp_volume(),
            ],
        },
    )
    return tls.with_tls(cluster, pod)
