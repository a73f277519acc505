"""Rows of a schema table, shared by the CRD and the Helm values pages.

Both sources are JSON-schema-shaped (the CRDs' structural OpenAPI v3 schemas, the chart's
``values.schema.json``), so one walk lists every field with its path, type, default, rules and
description. A map's value schema and a list's scalar item schema are folded into their
parent's row ("each value: ..."), as a reader sets them there; a list of objects gets a row per
field of its items (``volumes[].name``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from orbitmq.docsgen.markdown import anchor_tag, code, prose, value

Schema = dict[str, Any]
DefaultOf = Callable[[str, Schema], str]
"""The default to show for a path and its node (the CRDs read it from the schema, the chart
from ``values.yaml``)."""


@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    rules: str
    description: str

    def cells(self, anchor: str) -> tuple[str, str, str, str]:
        """(field, type, default, description and rules) for a table of :data:`HEADER`."""
        text = " ".join(filter(None, (self.description, f"*Rules:* {self.rules}." if self.rules else "")))
        return (anchor_tag(anchor) + code(self.path), self.type, self.default, text)


HEADER = ("Field", "Type", "Default", "Description")


def rows(node: Schema, path: str, default_of: DefaultOf, required: bool = False) -> Iterator[Row]:
    """The row of ``node`` (at ``path``) and of every field under it."""
    rules = _rules(node)
    if required:
        rules.insert(0, "**required**")
    yield Row(path, type_of(node), default_of(path, node), "; ".join(rules), prose(node.get("description")))
    needed = set(node.get("required", ()))
    for name, child in node.get("properties", {}).items():
        yield from rows(child, f"{path}.{name}" if path else name, default_of, name in needed)
    items = node.get("items")
    if isinstance(items, dict) and "properties" in items:
        needed = set(items.get("required", ()))
        for name, child in items["properties"].items():
            yield from rows(child, f"{path}[].{name}", default_of, name in needed)


def schema_default(_path: str, node: Schema) -> str:
    """The schema's own default; an object's spelled-out default is its fields' (shown on them)."""
    if "default" not in node:
        return ""
    default = node["default"]
    if isinstance(default, dict) and default and "properties" in node:
        return "its fields' defaults"
    return value(default)


def type_of(node: Schema) -> str:
    kind = node.get("type", "")
    if isinstance(kind, list):
        return " or ".join(type_of({**node, "type": one}) for one in kind)
    if node.get("x-kubernetes-preserve-unknown-fields") and "properties" not in node:
        return "object (any fields)"
    if kind == "array":
        items = node.get("items", {})
        return f"list of {type_of(items)}" if items else "list"
    extra = node.get("additionalProperties")
    if kind == "object" and isinstance(extra, dict):
        return f"map of {type_of(extra)}"
    if kind == "object" and "properties" not in node:
        return "object (any fields)"
    names = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}
    text = names.get(kind, kind or "any")
    if "format" in node:
        text += f" ({node['format']})"
    return text


def _rules(node: Schema) -> list[str]:
    out = _scalar_rules(node)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and _scalar_rules(extra):
        out.append("each value: " + ", ".join(_scalar_rules(extra)))
    items = node.get("items")
    if isinstance(items, dict) and "properties" not in items and _scalar_rules(items):
        out.append("each item: " + ", ".join(_scalar_rules(items)))
    if "minItems" in node:
        out.append(f"at least {node['minItems']} items")
    if "maxItems" in node:
        out.append(f"at most {node['maxItems']} items")
    if node.get("uniqueItems"):
        out.append("no repeated items")
    if "maxProperties" in node:
        out.append(f"at most {node['maxProperties']} entries")
    if node.get("x-kubernetes-list-type") == "map":
        keys = ", ".join(code(key) for key in node.get("x-kubernetes-list-map-keys", ()))
        out.append(f"one item per {keys}")
    elif node.get("x-kubernetes-list-type"):
        out.append(f"list type {code(node['x-kubernetes-list-type'])}")
    for rule in node.get("x-kubernetes-validations", ()):
        message = prose(rule.get("message", ""))
        out.append(f"rule {code(rule['rule'])}" + (f": {message}" if message else ""))
    return out


def _scalar_rules(node: Schema) -> list[str]:
    out = []
    if "enum" in node:
        out.append("one of " + ", ".join(value(item) for item in node["enum"]))
    for key, symbol in (
        ("minimum", "≥"),
        ("exclusiveMinimum", ">"),
        ("maximum", "≤"),
        ("exclusiveMaximum", "<"),
    ):
        if key in node and not isinstance(node[key], bool):
            out.append(f"{symbol} {node[key]}")
    if "minLength" in node:
        out.append(f"at least {node['minLength']} characters")
    if "maxLength" in node:
        out.append(f"at most {node['maxLength']} characters")
    if "pattern" in node:
        out.append(f"matches {code(node['pattern'])}")
    return out
