"""The CRDs generated from the spec models: structural, defaulted like the models, validated, fresh.

The e2e tests (tests/e2e/test_crds.py) show the API server enforcing these schemas; these show,
without a cluster, that the generated schemas say what the models say, and that the committed
YAML in the chart is what the generator writes today. (Not named test_crds.py: test folders are
not packages, so pytest refuses two test modules with one basename.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from orbitmq_operator import crds as crds_module
from orbitmq_operator.crds import KINDS, Kind, crd, crd_files, schema_nodes, structural_problems
from orbitmq_operator.spec import (
    ClusterSpec,
    ConditionType,
    ConsumerGroupSpec,
    FlushMode,
    ReplicationMode,
    RetentionPolicy,
    TopicSpec,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
CRD_DIR = REPO_ROOT / "charts" / "orbitmq" / "crds"
KIND = {kind.kind: kind for kind in KINDS}


def schema_of(kind: str) -> dict[str, Any]:
    return crd(KIND[kind])["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema node of a dotted field path (``spec.brokers.groups``); ``[]`` steps into items."""
    node = schema
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """What the API server's defaulting makes of ``value`` under ``schema`` (objects only)."""
    if not isinstance(value, dict) or "properties" not in schema:
        return value
    filled = dict(value)
    for name, child in schema["properties"].items():
        if name not in filled and "default" in child:
            filled[name] = child["default"]
        if name in filled:
            filled[name] = apply_defaults(child, filled[name])
    return filled


def without_empty(value: Any) -> Any:
    """An absent map and an empty one mean the same to the API server and the models."""
    if isinstance(value, dict):
        kept = {key: without_empty(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item not in ({}, None)}
    return value


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_schemas_are_structural(kind: Kind) -> None:
    assert structural_problems(schema_of(kind.kind)) == []


def test_the_structural_check_finds_what_the_api_server_refuses() -> None:
    """Pydantic's raw schema ($ref, anyOf for X | None, titles) is what the conversion fixes."""
    raw = ClusterSpec.model_json_schema(by_alias=True)
    problems = "\n".join(structural_problems(raw))
    assert "<root>.brokers: $ref" in problems
    assert "$defs" in problems
    assert "title" in problems
    # Without the conversion, the optional storage class would be an anyOf with a null default.
    storage = raw["$defs"]["StorageSpec"]["properties"]["storageClassName"]
    assert any("anyOf" in p for p in structural_problems(storage))
    assert any("null default" in p for p in structural_problems(storage))


def test_optional_fields_are_their_non_null_type_and_not_required() -> None:
    storage = at(schema_of("OrbitMQCluster"), "spec.brokers.storage")
    assert storage["properties"]["storageClassName"]["type"] == "string"
    assert "default" not in storage["properties"]["storageClassName"]
    assert "storageClassName" not in storage.get("required", [])
    assert at(schema_of("OrbitMQCluster"), "spec")["required"] == ["image"]
    assert at(schema_of("OrbitMQTopic"), "spec")["required"] == ["cluster", "topicName"]


@pytest.mark.parametrize(
    ("kind", "given", "model"),
    [
        ("OrbitMQCluster", {"image": "orbitmq:1"}, ClusterSpec(image="orbitmq:1")),
        ("OrbitMQTopic", {"cluster": "c", "topicName": "t"}, TopicSpec(cluster="c", topic_name="t")),
        (
            "OrbitMQConsumerGroup",
            {"cluster": "c", "groupName": "g"},
            ConsumerGroupSpec(cluster="c", group_name="g"),
        ),
    ],
)
def test_schema_defaults_are_the_models_defaults(kind: str, given: dict[str, Any], model: Any) -> None:
    """A minimal spec, defaulted by the schema, is the model's defaults: the operator and the API
    server agree on what an omitted field means (sub-objects included)."""
    defaulted = apply_defaults(at(schema_of(kind), "spec"), given)
    assert without_empty(defaulted) == without_empty(model.model_dump(by_alias=True, mode="json"))


def test_sub_object_defaults_are_spelt_out_for_cel() -> None:
    """The API server checks a default against CEL rules as written; ``{}`` would fail the
    brokers' rule, which reads replicationMode and slavesPerGroup."""
    brokers = at(schema_of("OrbitMQCluster"), "spec.brokers")
    assert brokers["default"]["replicationMode"] == "SYNC_MASTER"
    assert brokers["default"]["slavesPerGroup"] == 1
    assert brokers["default"]["storage"] == {"size": "10Gi", "retention": "Retain"}


@pytest.mark.parametrize(
    ("kind", "path", "enum"),
    [
        ("OrbitMQCluster", "spec.brokers.flushMode", FlushMode),
        ("OrbitMQCluster", "spec.brokers.replicationMode", ReplicationMode),
        ("OrbitMQCluster", "spec.brokers.storage.retention", RetentionPolicy),
        ("OrbitMQCluster", "status.conditions.[].type", ConditionType),
        ("OrbitMQTopic", "status.conditions.[].type", ConditionType),
    ],
)
def test_enums_come_from_the_str_enums(kind: str, path: str, enum: type) -> None:
    node = at(schema_of(kind), path)
    assert node["type"] == "string"
    assert node["enum"] == [member.value for member in enum]


def test_ranges_patterns_and_bounds() -> None:
    cluster, topic = schema_of("OrbitMQCluster"), schema_of("OrbitMQTopic")
    assert (at(cluster, "spec.brokers.groups")["minimum"], at(cluster, "spec.brokers.groups")["maximum"]) == (
        1,
        64,
    )
    assert at(topic, "spec.readQueues")["maximum"] == 1024
    assert at(topic, "spec.topicName")["pattern"] == "^[%|a-zA-Z0-9_-]+$"
    assert at(topic, "spec.topicName")["maxLength"] == 127
    requests = at(cluster, "spec.brokers.resources.requests")
    assert requests["maxProperties"] == 16
    assert requests["additionalProperties"]["pattern"].startswith("^[0-9]+")
    settings = at(cluster, "spec.brokers.settings")
    assert settings["x-kubernetes-preserve-unknown-fields"] is True
    assert settings["maxProperties"] == 128
    assert "additionalProperties" not in settings


def rules(node: dict[str, Any]) -> list[str]:
    return [entry["rule"] for entry in node.get("x-kubernetes-validations", [])]


def test_cel_rules_are_carried_to_their_fields() -> None:
    cluster, topic, group = (
        schema_of("OrbitMQCluster"),
        schema_of("OrbitMQTopic"),
        schema_of("OrbitMQConsumerGroup"),
    )
    assert rules(at(cluster, "spec.brokers.storage.size")) == [
        "quantity(self).compareTo(quantity(oldSelf)) >= 0"
    ]
    assert rules(at(cluster, "spec.brokers.storage.storageClassName")) == ["self == oldSelf"]
    assert rules(at(cluster, "spec.brokers.storage")) == [
        "has(self.storageClassName) == has(oldSelf.storageClassName)"
    ]
    assert rules(at(cluster, "spec.brokers.segmentMib")) == ["self == oldSelf"]
    sync_master = at(cluster, "spec.brokers")["x-kubernetes-validations"]
    assert sync_master[0]["fieldPath"] == ".slavesPerGroup"
    assert "slavesPerGroup >= 1" in sync_master[0]["rule"]
    assert rules(at(topic, "spec")) == ["self.readQueues >= self.writeQueues"]
    for schema, fields in ((topic, ("cluster", "topicName")), (group, ("cluster", "groupName"))):
        for name in fields:
            assert rules(at(schema, f"spec.{name}")) == ["self == oldSelf"], name


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_rules_on_the_whole_resource_name_their_field(kind: Kind) -> None:
    """A rule on the resource's root (the only place ``metadata.name`` is visible to CEL) carries
    a ``fieldPath``, else the API server reports the refusal as ``<nil>: Invalid value``; and
    every ``fieldPath`` resolves in the schema, as the API server requires of a CRD."""
    for where, node in schema_nodes(schema_of(kind.kind), kind.kind):
        for entry in node.get("x-kubernetes-validations", []):
            if where == kind.kind:
                assert entry.get("fieldPath"), entry
            if "fieldPath" in entry:
                at(node, entry["fieldPath"].removeprefix("."))  # KeyError: not a field
    if kind.kind == "OrbitMQCluster":
        (name_rule,) = schema_of(kind.kind)["x-kubernetes-validations"]
        assert name_rule["fieldPath"] == ".metadata.name"
        assert "+ self.metadata.name +" in name_rule["messageExpression"], "the message names the value"


def test_strings_under_cel_rules_are_bounded() -> None:
    """A rule's cost is estimated from the largest value it may see: an unbounded string would
    push a rule over the API server's budget (and the CRD would be refused)."""
    for kind in KINDS:
        for where, node in schema_nodes(schema_of(kind.kind), kind.kind):
            if rules(node) and node.get("type") == "string":
                assert "maxLength" in node or "enum" in node, where


def test_names_columns_and_subresources() -> None:
    cluster = crd(KIND["OrbitMQCluster"])["spec"]
    assert cluster["group"] == "orbitmq.io"
    assert cluster["names"]["plural"] == "orbitmqclusters"
    assert "omq" in cluster["names"]["shortNames"]
    assert cluster["names"]["categories"] == ["orbitmq"]
    version = cluster["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.brokers.groups",
            "statusReplicasPath": ".status.brokerGroupsReady",
        },
    }
    assert [column["name"] for column in version["additionalPrinterColumns"]] == [
        "Groups",
        "Groups-Ready",
        "Proxies-Ready",
        "Ready",
        "Age",
    ]
    for kind in KINDS[1:]:
        assert "scale" not in crd(kind)["spec"]["versions"][0]["subresources"]
    assert {kind.plural for kind in KINDS} == {
        "orbitmqclusters",
        "orbitmqtopics",
        "orbitmqconsumergroups",
        "orbitmqusers",
    }
    assert {"omqtopic", "omqgroup", "omquser"} <= {name for kind in KINDS for name in kind.short_names}


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_printer_columns_and_scale_paths_name_schema_fields(kind: Kind) -> None:
    """A typo in a column's path shows an empty column forever; check each path exists."""
    schema = schema_of(kind.kind)
    paths = [column["jsonPath"] for column in kind.printer_columns]
    paths += list((kind.scale or {}).values())
    for path in paths:
        if path.startswith(".metadata."):
            continue
        field = path.split("[", 1)[0].lstrip(".")
        node = at(schema, field)
        assert node.get("type") in {"integer", "string", "array"}, path


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_every_status_has_observed_generation_and_conditions(kind: Kind) -> None:
    status = at(schema_of(kind.kind), "status")
    assert status["properties"]["observedGeneration"]["type"] == "integer"
    conditions = status["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["properties"]) >= {"type", "status", "reason", "message"}


def test_cluster_status_lists_each_broker_group() -> None:
    groups = at(schema_of("OrbitMQCluster"), "status.brokerGroups")
    assert set(groups["items"]["properties"]) >= {"name", "master", "epoch", "replicasReady", "writable"}
    assert groups["x-kubernetes-list-map-keys"] == ["name"]


def test_committed_yaml_is_what_the_generator_writes() -> None:
    """charts/orbitmq/crds/ is fresh (scripts/gen-crds regenerates it; --check runs in CI)."""
    files = crd_files()
    assert sorted(path.name for path in CRD_DIR.glob("*.yaml")) == sorted(files)
    for name, text in files.items():
        assert (CRD_DIR / name).read_text() == text, f"{name} is stale: run scripts/gen-crds"
    # The YAML is the CRDs themselves (no lossy dump).
    assert [yaml.safe_load(text) for text in files.values()] == crds_module.crds()
