"""The CustomResourceDefinitions, derived from the pydantic models in :mod:`orbitmq_operator.spec`.

The models are the one source: the operator parses resources with them and this module turns
their JSON schemas into the *structural* OpenAPI v3 schemas the API server wants, so what the
API server refuses and what the operator accepts cannot drift apart. ``scripts/gen-crds`` writes
the result to the chart (``charts/orbitmq/crds/``) and ``scripts/gen-crds --check`` fails the
test command when the committed YAML is stale.

Pydantic's JSON schema is close to OpenAPI but not structural, so :func:`structural_schema`
rewrites it: ``$ref``s are inlined, ``X | None`` becomes ``X`` (absent rather than null),
``additionalProperties: false`` is dropped (the API server prunes unknown fields instead),
``title``s are dropped, and a sub-model field filled by a ``default_factory`` gets
``default: {}`` so that the API server fills that sub-object's own defaults too.
:func:`structural_problems` checks the result against the API server's rules, so a model change
that the API server would refuse fails a unit test rather than an install.

Pure (no Kubernetes client); only ``python -m orbitmq_operator.crds DIR``, which the generator
script runs, writes files.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from orbitmq_operator.builders.names import MAX_CLUSTER_NAME
from orbitmq_operator.spec import (
    GROUP,
    VERSION,
    ClusterSpec,
    ClusterStatus,
    ConsumerGroupSpec,
    ResourceStatus,
    TopicSpec,
    cel,
)
from orbitmq_operator.user_spec import UserSpec, UserStatus

CATEGORY = "orbitmq"
"""``kubectl get orbitmq`` lists every orbitmq resource of a namespace."""

Schema = dict[str, Any]

_LEADING_KEYS = ("type", "description")
_DROPPED_KEYS = frozenset({"title"})
_ABSENT = "x-orbitmq-absent-by-default"
"""Marks, while converting, an optional sub-object whose default is None: it stays absent rather
than being defaulted to its fields' defaults (which may leave its required fields unset)."""
"""Pydantic's titles repeat the field name; ``kubectl explain`` shows descriptions instead."""


def _ready_column() -> dict[str, Any]:
    return {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
        "description": "Status of the Ready condition.",
    }


def _age_column() -> dict[str, Any]:
    return {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


@dataclass(frozen=True)
class Kind:
    """One custom resource kind: its names, models and ``kubectl get`` columns.

    ``scale`` is the scale subresource (``kubectl scale``, HPAs), or ``None`` where no single
    replica count fits the kind.
    """

    kind: str
    plural: str
    short_names: tuple[str, ...]
    spec: type[BaseModel]
    status: type[BaseModel]
    printer_columns: tuple[dict[str, Any], ...]
    scale: dict[str, str] | None = None
    description: str = ""
    rules: tuple[dict[str, str], ...] = ()
    """CEL rules on the whole resource (``metadata.name`` is only visible there)."""

    @property
    def name(self) -> str:
        """The CRD's own name, ``<plural>.<group>``."""
        return f"{self.plural}.{GROUP}"


_CLUSTER_NAME_RULE = (
    f"must start with a letter, hold only lowercase letters, digits and '-', and have at most "
    f"{MAX_CLUSTER_NAME} characters: it names the cluster's Services and StatefulSets "
    "(<name>-broker-<n>)"
)

KINDS: tuple[Kind, ...] = (
    Kind(
        kind="OrbitMQCluster",
        plural="orbitmqclusters",
        short_names=("omq", "omqcluster"),
        spec=ClusterSpec,
        status=ClusterStatus,
        printer_columns=(
            {"name": "Groups", "type": "integer", "jsonPath": ".spec.brokers.groups"},
            {
                "name": "Groups-Ready",
                "type": "integer",
                "jsonPath": ".status.brokerGroupsReady",
                "description": "Broker groups with a writable master.",
            },
            {
                "name": "Proxies-Ready",
                "type": "integer",
                "jsonPath": ".status.proxiesReady",
                "description": "Ready pods of orbitmq proxy (spec.proxy), the RocketMQ 5 endpoint.",
                "priority": 1,
            },
            _ready_column(),
            _age_column(),
        ),
        # Scaling a cluster means adding or draining broker groups, so `kubectl scale` drives
        # the group count; ready groups are those with a writable master.
        scale={"specReplicasPath": ".spec.brokers.groups", "statusReplicasPath": ".status.brokerGroupsReady"},
        description="An orbitmq cluster: name servers and broker groups (a master and its slaves each).",
        rules=(
            {
                **cel(
                    f"self.metadata.name.size() <= {MAX_CLUSTER_NAME} && "
                    "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
                    f"metadata.name {_CLUSTER_NAME_RULE}",
                    # a rule on the root is reported as "<nil>: Invalid value" without a field path
                    field_path=".metadata.name",
                ),
                # the same, naming the value given
                "messageExpression": f'"metadata.name \'" + self.metadata.name + "\' {_CLUSTER_NAME_RULE}"',
            },
        ),
    ),
    Kind(
        kind="OrbitMQTopic",
        plural="orbitmqtopics",
        short_names=("omqtopic", "omqt"),
        spec=TopicSpec,
        status=ResourceStatus,
        printer_columns=(
            {"name": "Cluster", "type": "string", "jsonPath": ".spec.cluster"},
            {"name": "Topic", "type": "string", "jsonPath": ".spec.topicName"},
            {"name": "Read", "type": "integer", "jsonPath": ".spec.readQueues"},
            {"name": "Write", "type": "integer", "jsonPath": ".spec.writeQueues"},
            _ready_column(),
            _age_column(),
        ),
        description="A topic on every broker group of an OrbitMQCluster.",
    ),
    Kind(
        kind="OrbitMQConsumerGroup",
        plural="orbitmqconsumergroups",
        short_names=("omqgroup", "omqg"),
        spec=ConsumerGroupSpec,
        status=ResourceStatus,
        printer_columns=(
            {"name": "Cluster", "type": "string", "jsonPath": ".spec.cluster"},
            {"name": "Group", "type": "string", "jsonPath": ".spec.groupName"},
            _ready_column(),
            _age_column(),
        ),
        description="A consumer (subscription) group on every broker group of an OrbitMQCluster.",
    ),
    Kind(
        kind="OrbitMQUser",
        plural="orbitmqusers",
        short_names=("omquser", "omqu"),
        spec=UserSpec,
        status=UserStatus,
        printer_columns=(
            {"name": "Cluster", "type": "string", "jsonPath": ".spec.cluster"},
            {"name": "Type", "type": "string", "jsonPath": ".spec.userType"},
            {
                "name": "Secret",
                "type": "string",
                "jsonPath": ".status.secretName",
                "description": "The Secret holding accessKey and secretKey.",
            },
            _ready_column(),
            _age_column(),
        ),
        description="A user of an OrbitMQCluster (access key, secret, ACL 2.0 policies), on every "
        "master of the cluster; deleting it revokes the user at once.",
        rules=(
            cel(
                "self.spec.authentication.type != 'generated' || self.metadata.name.size() <= 64",
                "metadata.name is the generated user's access key: at most 64 characters",
                field_path=".metadata.name",
            ),
        ),
    ),
)


def crds() -> list[dict[str, Any]]:
    """Every CustomResourceDefinition of orbitmq, in :data:`KINDS` order."""
    return [crd(kind) for kind in KINDS]


def crd(kind: Kind) -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition of one kind."""
    subresources: dict[str, Any] = {"status": {}}
    if kind.scale is not None:
        subresources["scale"] = dict(kind.scale)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.name},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                "shortNames": list(kind.short_names),
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": subresources,
                    "additionalPrinterColumns": [dict(column) for column in kind.printer_columns],
                    "schema": {"openAPIV3Schema": resource_schema(kind)},
                }
            ],
        },
    }


def resource_schema(kind: Kind) -> Schema:
    """The whole resource's schema: ``spec`` (required) and ``status`` from the kind's models."""
    schema: Schema = {
        "type": "object",
        "description": kind.description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            # ``name`` declared so that a root rule's fieldPath may point at it (the API server
            # resolves every fieldPath in the schema); metadata may declare nothing else
            "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
            "spec": structural_schema(kind.spec),
            "status": structural_schema(kind.status),
        },
    }
    if kind.rules:
        schema["x-kubernetes-validations"] = [dict(rule) for rule in kind.rules]
    return schema


def structural_schema(model: type[BaseModel]) -> Schema:
    """A model's JSON schema (wire names) rewritten as a structural OpenAPI v3 schema."""
    raw = model.model_json_schema(by_alias=True)
    return _convert(raw, raw.get("$defs", {}))


def _convert(node: Schema, defs: dict[str, Schema]) -> Schema:
    """One node, its ``$ref`` and nullable ``anyOf`` resolved, its children converted."""
    node = _resolve(node, defs)
    out: Schema = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS or key == "$defs":
            continue
        if key == "properties":
            out[key] = {name: _convert(child, defs) for name, child in value.items()}
        elif key == "items":
            out[key] = _convert(value, defs)
        elif key == "description":
            out[key] = value.replace("``", "")  # reST literals read as noise in kubectl explain
        elif key == "additionalProperties":
            # false: pruning drops unknown fields; true: stands for "any value", which
            # structural schemas say with x-kubernetes-preserve-unknown-fields instead.
            if isinstance(value, dict):
                out[key] = _convert(value, defs)
        else:
            out[key] = value
    if "properties" in out:
        out["type"] = "object"
        _default_sub_objects(out, node.get("required", ()))
        for child in out["properties"].values():
            child.pop(_ABSENT, None)
    if out.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in out:
        out.setdefault("type", "object")
    return _ordered(out)


def _ordered(node: Schema) -> Schema:
    """``type`` and ``description`` first: the generated YAML reads like a hand-written CRD."""
    first = {key: node[key] for key in _LEADING_KEYS if key in node}
    return {**first, **{key: value for key, value in node.items() if key not in first}}


def _resolve(node: Schema, defs: dict[str, Schema]) -> Schema:
    """Inline ``$ref`` and turn ``X | None`` into ``X``; the node's own keys (description,
    default, validations) win over the referenced definition's."""
    node = dict(node)
    if "anyOf" in node:
        branches = [branch for branch in node.pop("anyOf") if branch.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"only 'X | None' unions map onto a structural schema: {branches}")
        if node.get("default", ...) is None:
            del node["default"]  # absent, not null: the API server has no "null" default
            node[_ABSENT] = True
        node = {**_resolve(branches[0], defs), **node}
    if "$ref" in node:
        name = node.pop("$ref").removeprefix("#/$defs/")
        node = {**_resolve(defs[name], defs), **node}
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**_resolve(node.pop("allOf")[0], defs), **node}
    return node


def _default_sub_objects(out: Schema, required: Any) -> None:
    """Default optional sub-objects that have none (a pydantic ``default_factory``) to their
    fields' defaults, so the API server fills a missing sub-object as the operator's model would.

    The default is spelled out rather than ``{}``: the API server checks a default against the
    CEL rules without defaulting it first, so ``{}`` would fail a rule reading its fields.
    """
    for name, child in out["properties"].items():
        if name in required or "default" in child or child.get(_ABSENT):
            continue
        if child.get("type") == "object" and "properties" in child:
            child["default"] = {
                key: grandchild["default"]
                for key, grandchild in child["properties"].items()
                if "default" in grandchild
            }


def structural_problems(schema: Schema, path: str = "") -> list[str]:
    """What makes ``schema`` non-structural (empty when it is fine), each with its path.

    The API server's rules that matter for generated schemas: every node has a ``type`` (unless
    it preserves unknown fields), objects say ``type: object``, ``properties`` and
    ``additionalProperties`` never meet, nothing keeps a ``$ref``, ``anyOf``/``oneOf``/``allOf``,
    ``nullable`` without reason or a ``null`` default.
    """
    problems = []
    for where, node in schema_nodes(schema, path or "<root>"):
        if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            problems.append(f"{where}: no type")
        if ("properties" in node or "additionalProperties" in node) and node.get("type") != "object":
            problems.append(f"{where}: properties without type: object")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{where}: properties and additionalProperties together")
        for key in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "title", "nullable"):
            if key in node:
                problems.append(f"{where}: {key}")
        if "default" in node and node["default"] is None:
            problems.append(f"{where}: null default")
        if node.get("type") == "array" and "items" not in node:
            problems.append(f"{where}: array without items")
    return problems


def schema_nodes(node: Schema, path: str = "<root>") -> Iterator[tuple[str, Schema]]:
    """Every schema node under ``node`` (itself included), with a readable path."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from schema_nodes(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from schema_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from schema_nodes(node["additionalProperties"], f"{path}{{}}")


YAML_HEADER = "# Generated by scripts/gen-crds from operator/orbitmq_operator/spec.py: do not edit.\n"


def crd_files() -> dict[str, str]:
    """``<plural>.yaml`` -> its YAML text, for every kind; refuses a non-structural schema
    (the API server would reject the CRD, better to learn it before writing the chart)."""
    files = {}
    for kind, manifest in zip(KINDS, crds(), strict=True):
        problems = structural_problems(manifest["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
        if problems:
            raise ValueError(f"{kind.kind}'s schema is not structural: " + "; ".join(problems))
        text = yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False, width=100)
        files[f"{kind.plural}.yaml"] = YAML_HEADER + text
    return files


def _main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m orbitmq_operator.crds OUTPUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    for name, text in crd_files().items():
        (out / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
