"""What the operator may do in Kubernetes: its RBAC rules, and the objects granting them.

Least privilege, derived from what the code calls (``reconcile/``, ``handlers/``, kopf):

* **Its custom resources** (``orbitmq.io``): kopf lists and watches them and patches their
  metadata (finalizer ``orbitmq.io/operator``, its ``operator.orbitmq.io/*`` annotations) and,
  through the ``status`` subresource, their status; the topic and group handlers ``get`` the
  cluster they name. ``orbitmqclusters/finalizers`` ``update``: the objects a cluster owns carry
  ``blockOwnerDeletion``, which an API server with the OwnerReferencesPermissionEnforcement
  admission plugin (OpenShift) allows only to who may update the owner's finalizers.
* **What a cluster is made of** (``reconcile/apply.py``: server-side apply, which needs
  ``create`` as well as ``patch`` when the object is new; listed by label each reconcile):
  StatefulSets (also ``get`` and ``delete``: re-created orphaning their pods for an immutable
  change, removed by a drain, read by the roll), Services and PodDisruptionBudgets (``delete``:
  a drained group's), ConfigMaps (never deleted by the operator: owner references do that).
* **Pods**: listed and watched (kopf's index of broker pods for failover, the status, the roll,
  name-server pod IPs), deleted one at a time by the roll. **PersistentVolumeClaims**: listed and
  patched (a grown ``storage.size``).
* **Events**: created (kopf posts them; it never patches one).
* **Secrets** (``reconcile/secrets.py``): read and created, never listed or deleted:
  a cluster's operator user ``<cluster>-operator-user`` and a generated ``OrbitMQUser``'s
  credentials are made once and read afterwards (owner references delete them), and a user's
  own Secret (``spec.authentication.secretName``) is read. ``orbitmqusers/finalizers``
  ``update``: a generated Secret's owner reference blocks the user's deletion (see clusters').
  With TLS (``reconcile/certificates.py``) also patched, by server-side apply: the operator's
  CA ``<cluster>-ca``, the clients' bundle ``<cluster>-ca-cert`` and the server certificate
  ``<cluster>-tls`` are written when made or renewed; a ``secretName`` Secret is only read.
* **cert-manager Certificates** (``cert-manager.io``): applied (``get``, ``create``,
  ``patch``) for a cluster whose ``spec.security.tls.issuer`` names an issuer; cert-manager
  itself writes the Secret.
* **Peering** (``kopf.dev``, see :mod:`orbitmq_operator.peering`): ``KopfPeering`` objects in
  the watched namespaces, or the ``ClusterKopfPeering`` when watching all of them: listed,
  read, watched, patched (keep-alives in their status); never created: the chart owns them and
  the operator waits for its own at start.
* **kopf's cluster observation**: CRDs listed and watched (it notices CRDs appearing or
  changing); namespaces listed and watched when watching some namespaces (kopf matches its
  ``--namespace`` patterns against them; with ``--all-namespaces`` it does not look). Without
  these kopf still runs, falling back with a warning.

Discovery (``/api``, ``/apis``) is granted to every authenticated user by default. Nothing
else: no listing of Secrets, no nodes, no ``*``.

The functions are pure (dicts in, dicts out), for the Helm chart and the tests to render.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orbitmq_operator.crds import KINDS
from orbitmq_operator.peering import PEERING_GROUP
from orbitmq_operator.spec import GROUP

Rule = dict[str, list[str]]
Manifest = dict[str, Any]

DEFAULT_NAME = "orbitmq-operator"
RBAC_API = "rbac.authorization.k8s.io"
RBAC_VERSION = f"{RBAC_API}/v1"
CLUSTERS = "orbitmqclusters"
USERS = "orbitmqusers"
PLURALS = tuple(kind.plural for kind in KINDS)
"""orbitmqclusters, orbitmqtopics, orbitmqconsumergroups."""


def _rule(group: str, resources: Sequence[str], verbs: Sequence[str]) -> Rule:
    return {"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}


def namespaced_rules(*, clusterwide: bool = False) -> list[Rule]:
    """The rules on namespaced objects, granted in each watched namespace (or in all of them).

    ``clusterwide`` (``--all-namespaces``) leaves out ``kopfpeerings``: that operator's peering
    object is the cluster-scoped ``ClusterKopfPeering`` (:func:`cluster_rules`).
    """
    rules = [
        _rule(GROUP, [CLUSTERS], ["get", "list", "watch", "patch"]),
        _rule(GROUP, [p for p in PLURALS if p != CLUSTERS], ["list", "watch", "patch"]),
        _rule(GROUP, [f"{p}/status" for p in PLURALS], ["patch"]),
        _rule(GROUP, [f"{CLUSTERS}/finalizers"], ["update"]),
        _rule("apps", ["statefulsets"], ["get", "list", "create", "patch", "delete"]),
        _rule("apps", ["deployments"], ["list", "create", "patch", "delete"]),
        _rule("", ["services"], ["list", "create", "patch", "delete"]),
        _rule("", ["configmaps"], ["list", "create", "patch"]),
        _rule("policy", ["poddisruptionbudgets"], ["list", "create", "patch", "delete"]),
        _rule("", ["pods"], ["list", "watch", "delete"]),
        _rule("", ["persistentvolumeclaims"], ["list", "patch"]),
        _rule("", ["events"], ["create"]),
        _rule("", ["secrets"], ["get", "create", "patch"]),
        _rule("cert-manager.io", ["certificates"], ["get", "create", "patch"]),
        _rule(GROUP, [f"{USERS}/finalizers"], ["update"]),
    ]
    if not clusterwide:
        rules.append(_rule(PEERING_GROUP, ["kopfpeerings"], ["get", "list", "watch", "patch"]))
    return rules


def uninstall_rules() -> list[Rule]:
    """The chart's pre-delete hook (:mod:`orbitmq_operator.uninstall`), in the release's
    namespace: it lists the release's resources, deletes them, and patches the operator's
    finalizer away from one the operator did not release in time; it deletes the release's
    ``helm test`` pods (Helm leaves test hooks behind)."""
    return [
        _rule(GROUP, list(PLURALS), ["list", "delete", "patch"]),
        _rule("", ["pods"], ["list", "delete"]),
    ]


def cluster_rules(*, clusterwide: bool = False) -> list[Rule]:
    """The rules on cluster-scoped objects (a ClusterRole whatever is watched)."""
    rules = [_rule("apiextensions.k8s.io", ["customresourcedefinitions"], ["list", "watch"])]
    if clusterwide:
        rules.append(_rule(PEERING_GROUP, ["clusterkopfpeerings"], ["get", "list", "watch", "patch"]))
    else:
        rules.append(_rule("", ["namespaces"], ["list", "watch"]))
    return rules


def _meta(name: str, labels: dict[str, str], namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def _binding(
    kind: str,
    name: str,
    role: str,
    subject: dict[str, str],
    labels: dict[str, str],
    namespace: str | None = None,
) -> Manifest:
    return {
        "apiVersion": RBAC_VERSION,
        "kind": kind,
        "metadata": _meta(name, labels, namespace),
        "roleRef": {"apiGroup": RBAC_API, "kind": "ClusterRole", "name": role},
        "subjects": [subject],
    }


def rbac_manifests(
    namespace: str,
    watch: Sequence[str] | None = None,
    *,
    name: str = DEFAULT_NAME,
    labels: dict[str, str] | None = None,
) -> list[Manifest]:
    """The operator's ServiceAccount ``namespace/name`` and what grants it its rules.

    ``watch``: the namespaces it watches (``--namespace``), or ``None`` for all of them
    (``--all-namespaces``).

    * all namespaces: one ClusterRole ``name`` with every rule, bound by a ClusterRoleBinding;
    * some namespaces: a ClusterRole ``name`` with :func:`namespaced_rules`, bound in each
      watched namespace by a RoleBinding (so it grants nothing elsewhere), and a ClusterRole
      ``name-cluster`` with :func:`cluster_rules`, bound by a ClusterRoleBinding.

    Deployed as ``serviceAccountName: name`` in ``namespace``.
    """
    labels = {"app.kubernetes.io/name": name, **(labels or {})}
    subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    account: Manifest = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(name, labels, namespace),
    }
    clusterwide = watch is None
    if clusterwide:
        role = {
            "apiVersion": RBAC_VERSION,
            "kind": "ClusterRole",
            "metadata": _meta(name, labels),
            "rules": namespaced_rules(clusterwide=True) + cluster_rules(clusterwide=True),
        }
        return [account, role, _binding("ClusterRoleBinding", name, name, subject, labels)]
    if not watch:
        raise ValueError("watch: the namespaces to watch, or None for all of them")
    cluster_name = f"{name}-cluster"
    return [
        account,
        {
            "apiVersion": RBAC_VERSION,
            "kind": "ClusterRole",
            "metadata": _meta(name, labels),
            "rules": namespaced_rules(),
        },
        {
            "apiVersion": RBAC_VERSION,
            "kind": "ClusterRole",
            "metadata": _meta(cluster_name, labels),
            "rules": cluster_rules(),
        },
        _binding("ClusterRoleBinding", cluster_name, cluster_name, subject, labels),
        *(_binding("RoleBinding", name, name, subject, labels, ns) for ns in dict.fromkeys(watch)),
    ]
