"""Comparisons of what exists with what is desired, for the reconciler to act on.

Server-side apply changes an object in place, and for most fields that is all a changed spec
needs. Two things it cannot do, said here as pure functions so the reconciler stays thin:

* a StatefulSet's selector, service name, pod management policy and volume claim templates
  are immutable: an apply that changes them is refused. :func:`statefulset_immutable_changes`
  names them; the reconciler then deletes the StatefulSet with ``propagationPolicy: Orphan``
  (its pods and volumes stay, and ``OnDelete`` means none restarts) and applies it again. A
  grown ``storage.size`` also needs each existing PVC patched (:func:`volume_resize_patch`).
* broker groups beyond ``spec.brokers.groups`` must be drained before their StatefulSet goes
  (DESIGN §10): :func:`surplus_broker_groups` lists them, the drain itself is the reconciler's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from orbitmq_operator.builders import names
from orbitmq_operator.builders.common import Cluster

_SUFFIXES = {
    "": 1,
    "m": Decimal("0.001"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    **{s: 1024 ** (i + 1) for i, s in enumerate(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])},
}
_QUANTITY = re.compile(r"^([0-9.]+)(?:[eE]([-+]?[0-9]+))?([a-zA-Z]*)$")


def parse_quantity(value: str) -> Decimal:
    """A resource quantity's value (``"1.5Gi"`` → 1610612736): the API server may store a
    quantity in another spelling than applied (``1536Mi``), so compare values, not strings."""
    match = _QUANTITY.match(value.strip())
    if match is None or match[3] not in _SUFFIXES:
        raise ValueError(f"{value!r} is not a Kubernetes quantity such as 500m, 10Gi or 1e3")
    number, exponent, suffix = match.groups()
    return Decimal(number) * Decimal(10) ** int(exponent or 0) * _SUFFIXES[suffix]


def _claims(statefulset: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
    """What of each volume claim template we set, in comparable form."""
    out = {}
    for claim in statefulset.get("spec", {}).get("volumeClaimTemplates", []):
        spec = claim.get("spec", {})
        size = spec.get("resources", {}).get("requests", {}).get("storage", "0")
        out[claim["metadata"]["name"]] = (parse_quantity(size), spec.get("storageClassName"))
    return out


def statefulset_immutable_changes(current: Mapping[str, Any], desired: Mapping[str, Any]) -> list[str]:
    """Immutable StatefulSet fields whose desired value differs from the current object's.

    A storage class left out of the desired claim (the default class) matches whatever class
    the API server filled in. Empty: apply in place.
    """
    now, want = current.get("spec", {}), desired.get("spec", {})
    changed = [
        field
        for field in ("selector", "serviceName", "podManagementPolicy")
        if field in want and now.get(field) != want[field]
    ]
    current_claims, desired_claims = _claims(current), _claims(desired)
    if set(current_claims) != set(desired_claims):
        return [*changed, "volumeClaimTemplates"]
    for name, (size, storage_class) in desired_claims.items():
        current_size, current_class = current_claims[name]
        if size != current_size or (storage_class is not None and storage_class != current_class):
            return [*changed, "volumeClaimTemplates"]
    return changed


def volume_resize_patch(cluster: Cluster) -> dict[str, Any]:
    """The merge patch that grows an existing broker PVC to ``spec.brokers.storage.size``
    (its StorageClass must allow expansion; the API server refuses shrinking)."""
    return {"spec": {"resources": {"requests": {"storage": cluster.spec.brokers.storage.size}}}}


def surplus_broker_groups(cluster: Cluster, existing: Iterable[Mapping[str, Any]]) -> list[int]:
    """Groups of ``existing`` objects (by their broker-group label) that the spec no longer
    wants, highest first: scaling down removes the last groups, and draining them in that order
    keeps the remaining groups' names contiguous at every step."""
    found = set()
    for obj in existing:
        labels = obj.get("metadata", {}).get("labels", {})
        if (
            labels.get(names.LABEL_INSTANCE) != cluster.name
            or labels.get(names.LABEL_COMPONENT) != names.BROKER
        ):
            continue
        group = labels.get(names.LABEL_BROKER_GROUP, "")
        if group.isdigit() and int(group) >= cluster.spec.brokers.groups:
            found.add(int(group))
    return sorted(found, reverse=True)
