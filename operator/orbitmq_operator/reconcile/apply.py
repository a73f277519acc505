"""Server-side apply of a cluster's desired objects, writing only what changed.

Every object is applied whole under one field manager (``orbitmq-operator``, conflicts forced:
the operator owns what it builds). Before applying, the object's content is hashed into the
``orbitmq.io/applied-hash`` annotation; an existing object carrying the same hash is skipped.
So reconciling an unchanged cluster makes no write at all (the API server would bump nothing
on an identical apply either, but each call still costs a request and an admission pass, and
the timer reconciles every cluster periodically), and a changed spec rewrites only the objects
whose content changed.

The hash compares our desired content with what we last applied, not with the live object: a
field someone else changed by hand (``kubectl scale``) is not reverted until the spec changes
that object again. That is deliberate (Strimzi does the same with its own annotations): the
operator never fights an administrator's emergency fix on every timer tick.

A StatefulSet whose immutable fields changed (:func:`statefulset_immutable_changes`) is deleted
with ``propagationPolicy: Orphan`` and applied again: its pods and volumes stay, and the new
StatefulSet adopts them. A grown storage size is carried to the existing volumes by a patch.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightkube import ApiError, AsyncClient, codecs
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.core_v1 import ConfigMap, PersistentVolumeClaim, Service
from lightkube.resources.policy_v1 import PodDisruptionBudget
from lightkube.types import CascadeType, PatchType

from orbitmq_operator import metrics
from orbitmq_operator.builders import Cluster, Manifest, names
from orbitmq_operator.builders.changes import statefulset_immutable_changes, volume_resize_patch
from orbitmq_operator.spec import GROUP

log = logging.getLogger(__name__)

FIELD_MANAGER = "orbitmq-operator"
ANNOTATION_APPLIED_HASH = f"{GROUP}/applied-hash"
KINDS: dict[str, Any] = {
    "ConfigMap": ConfigMap,
    "Service": Service,
    "StatefulSet": StatefulSet,
    "Deployment": Deployment,
    "PodDisruptionBudget": PodDisruptionBudget,
}
"""The kinds the builders make, each listed once per reconcile by the cluster's labels."""
ORPHAN_DELETE_WAIT_S = 30.0
"""How long a StatefulSet deleted for re-creation may take to disappear (its orphan finalizer)."""

Key = tuple[str, str]
"""(kind, name) of an object in the cluster's namespace."""


def applied_hash(manifest: Mapping[str, Any]) -> str:
    """A digest of the content we apply (canonical JSON: key order does not matter)."""
    text = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def stamped(manifest: Manifest) -> Manifest:
    """``manifest`` with its hash annotation, the form that is applied."""
    meta = dict(manifest["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}), ANNOTATION_APPLIED_HASH: applied_hash(manifest)}
    return {**manifest, "metadata": meta}


def key_of(manifest: Mapping[str, Any]) -> Key:
    return manifest["kind"], manifest["metadata"]["name"]


def needs_apply(desired: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    """Missing, or last applied with other content."""
    if current is None:
        return True
    annotations = current.get("metadata", {}).get("annotations") or {}
    return annotations.get(ANNOTATION_APPLIED_HASH) != applied_hash(desired)


@dataclass
class ApplyResult:
    created: list[Key] = field(default_factory=list)
    updated: list[Key] = field(default_factory=list)
    recreated: list[Key] = field(default_factory=list)
    """StatefulSets deleted (orphaning their pods) and applied again for an immutable change."""
    unchanged: list[Key] = field(default_factory=list)
    scaled: list[tuple[str, int, int]] = field(default_factory=list)
    """(StatefulSet, replicas before, replicas now) for each scaling step."""
    deleted: list[Key] = field(default_factory=list)
    """Objects of a prunable component no longer desired (a proxy scaled to 0)."""


async def existing_objects(client: AsyncClient, cluster: Cluster) -> dict[Key, dict[str, Any]]:
    """Every object of ``cluster`` (by its labels) of the kinds the builders make."""
    selector = {names.LABEL_NAME: names.APP, names.LABEL_INSTANCE: cluster.name}
    found: dict[Key, dict[str, Any]] = {}
    for kind, resource in KINDS.items():
        async for obj in client.list(resource, namespace=cluster.namespace, labels=selector):
            found[(kind, obj.metadata.name)] = obj.to_dict()
    return found


async def apply_objects(
    client: AsyncClient,
    cluster: Cluster,
    desired: Sequence[Manifest],
    current: Mapping[Key, Mapping[str, Any]],
) -> ApplyResult:
    """Apply each of ``desired`` (in order) that is missing or changed."""
    result = ApplyResult()
    for manifest in desired:
        key = key_of(manifest)
        now = current.get(key)
        if not needs_apply(manifest, now):
            result.unchanged.append(key)
            continue
        if now is not None and manifest["kind"] == "StatefulSet":
            if statefulset_immutable_changes(now, manifest):
                await _recreate_orphaning(client, cluster, manifest["metadata"]["name"])
                result.recreated.append(key)
                await _grow_volumes(client, cluster, manifest)
            before, after = now.get("spec", {}).get("replicas"), manifest["spec"]["replicas"]
            if before != after:
                result.scaled.append((key[1], int(before or 0), int(after)))
        await client.apply(codecs.from_dict(stamped(manifest)), field_manager=FIELD_MANAGER, force=True)
        metrics.OBJECT_WRITES.labels(key[0]).inc()
        if now is None:
            result.created.append(key)
        elif key not in result.recreated:
            result.updated.append(key)
        log.info("applied %s %s/%s", key[0], cluster.namespace, key[1])
    return result


def prunable_leftovers(
    desired: Sequence[Manifest], current: Mapping[Key, Mapping[str, Any]], components: frozenset[str]
) -> list[Key]:
    """Existing objects of ``components`` (by their component label) that ``desired`` no longer
    holds. Only such components: a broker group beyond the spec is drained, never deleted here."""
    wanted = {key_of(m) for m in desired}
    return sorted(
        key
        for key, obj in current.items()
        if key not in wanted
        and (obj.get("metadata", {}).get("labels") or {}).get(names.LABEL_COMPONENT) in components
    )


async def prune_objects(
    client: AsyncClient, cluster: Cluster, keys: Sequence[Key], result: ApplyResult
) -> None:
    """Delete ``keys`` (already gone is fine: another reconcile or a person got there first)."""
    for kind, name in keys:
        try:
            await client.delete(KINDS[kind], name, namespace=cluster.namespace)
        except ApiError as error:
            if error.status.code != 404:
                raise
        metrics.OBJECT_WRITES.labels(kind).inc()
        result.deleted.append((kind, name))
        log.info("deleted %s %s/%s (no longer in the spec)", kind, cluster.namespace, name)


async def _recreate_orphaning(client: AsyncClient, cluster: Cluster, name: str) -> None:
    """Delete a StatefulSet but not its pods or volumes, and wait until it is gone."""
    log.warning(
        "StatefulSet %s/%s: immutable fields changed, re-creating it (pods kept)", cluster.namespace, name
    )
    await client.delete(StatefulSet, name, namespace=cluster.namespace, cascade=CascadeType.ORPHAN)
    deadline = asyncio.get_running_loop().time() + ORPHAN_DELETE_WAIT_S
    while asyncio.get_running_loop().time() < deadline:
        try:
            await client.get(StatefulSet, name, namespace=cluster.namespace)
        except ApiError as error:
            if error.status.code == 404:
                return
            raise
        await asyncio.sleep(0.2)
    raise TimeoutError(
        f"StatefulSet {cluster.namespace}/{name} still exists {ORPHAN_DELETE_WAIT_S:.0f} s after deletion"
    )


async def _grow_volumes(client: AsyncClient, cluster: Cluster, desired: Mapping[str, Any]) -> None:
    """Patch each existing volume of a broker group up to the new size (growing only: the API
    server refuses a shrink, and the CRD refuses it before that)."""
    labels = desired["spec"]["selector"]["matchLabels"]
    patch = volume_resize_patch(cluster)
    async for claim in client.list(PersistentVolumeClaim, namespace=cluster.namespace, labels=labels):
        name = claim.metadata.name
        await client.patch(
            PersistentVolumeClaim, name, patch, namespace=cluster.namespace, patch_type=PatchType.MERGE
        )
        log.info("PVC %s/%s resized to %s", cluster.namespace, name, cluster.spec.brokers.storage.size)
