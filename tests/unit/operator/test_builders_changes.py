"""What server-side apply cannot change in place, and the broker groups a spec no longer wants."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from orbitmq_operator.builders import Cluster, desired_objects
from orbitmq_operator.builders.changes import (
    parse_quantity,
    statefulset_immutable_changes,
    surplus_broker_groups,
    volume_resize_patch,
)
from orbitmq_operator.spec import ClusterSpec


def make(**brokers: Any) -> Cluster:
    spec = ClusterSpec.model_validate({"image": "orbitmq:1.0", "brokers": brokers})
    return Cluster("orbit", "mq", "uid", spec)


def broker_sts(cluster: Cluster, group: int = 0) -> dict[str, Any]:
    return next(
        o
        for o in desired_objects(cluster)
        if o["kind"] == "StatefulSet" and o["metadata"]["name"] == f"orbit-broker-{group}"
    )


def as_stored(sts: dict[str, Any]) -> dict[str, Any]:
    """The StatefulSet as the API server returns it: defaults filled in, quantities respelt."""
    stored = copy.deepcopy(sts)
    claim = stored["spec"]["volumeClaimTemplates"][0]
    claim["spec"].setdefault("storageClassName", "standard")
    claim["spec"]["volumeMode"] = "Filesystem"
    claim["status"] = {"phase": "Pending"}
    stored["spec"]["revisionHistoryLimit"] = 10
    stored["status"] = {"replicas": 2}
    return stored


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10Gi", 10 * 2**30),
        ("1536Mi", Decimal("1.5") * 2**30),
        ("500m", Decimal("0.5")),
        ("1e3", 1000),
        ("2k", 2000),
    ],
)
def test_quantities(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


def test_a_bad_quantity_is_named() -> None:
    with pytest.raises(ValueError, match="'10GB' is not a Kubernetes quantity"):
        parse_quantity("10GB")


def test_an_unchanged_statefulset_applies_in_place_whatever_the_server_filled_in() -> None:
    current = as_stored(broker_sts(make(storage={"size": "1.5Gi"})))
    current["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = "1536Mi"
    assert statefulset_immutable_changes(current, broker_sts(make(storage={"size": "1.5Gi"}))) == []
    # replicas, settings and the image change in place
    changed = broker_sts(make(storage={"size": "1.5Gi"}, slavesPerGroup=2, settings={"grace_ms": 1000}))
    assert statefulset_immutable_changes(current, changed) == []


def test_grown_storage_needs_the_statefulset_replaced() -> None:
    current = as_stored(broker_sts(make()))
    grown = make(storage={"size": "20Gi"})
    assert statefulset_immutable_changes(current, broker_sts(grown)) == ["volumeClaimTemplates"]
    assert volume_resize_patch(grown) == {"spec": {"resources": {"requests": {"storage": "20Gi"}}}}


def test_a_changed_selector_or_service_is_named() -> None:
    current = as_stored(broker_sts(make()))
    current["spec"]["serviceName"] = "old"
    current["spec"]["selector"]["matchLabels"]["extra"] = "x"
    assert statefulset_immutable_changes(current, broker_sts(make())) == ["selector", "serviceName"]


def test_surplus_groups_highest_first() -> None:
    existing = [broker_sts(make(groups=4), group) for group in range(4)]
    other_cluster = copy.deepcopy(existing[3])
    other_cluster["metadata"]["labels"]["app.kubernetes.io/instance"] = "other"
    assert surplus_broker_groups(make(groups=2), [*existing, other_cluster]) == [3, 2]
    assert surplus_broker_groups(make(groups=4), existing) == []
