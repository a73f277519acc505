"""``reference/crds.md``: every custom resource kind, from the CRDs the operator's models give.

It reads :func:`orbitmq_operator.crds.crds` — the manifests ``scripts/gen-crds`` writes to
``charts/orbitmq/crds/`` — rather than the pydantic models directly, so the page shows exactly
what the API server enforces: the structural schema's types, defaults, bounds, patterns, enums
and CEL rules (``x-kubernetes-validations``) with the message a user gets.
"""

from __future__ import annotations

from typing import Any

from orbitmq.docsgen.markdown import Anchors, code, page_header, prose, slug, table
from orbitmq.docsgen.schema import HEADER, rows, schema_default


def render() -> str:
    from orbitmq_operator.crds import crds

    anchors = Anchors()
    manifests = crds()
    lines = page_header(
        "Custom resources reference",
        "the operator's models (`operator/orbitmq_operator/spec.py`, `user_spec.py`) through "
        "`orbitmq_operator.crds`, the source of `charts/orbitmq/crds/`",
        "The orbitmq operator watches the kinds below (API group `orbitmq.io`). Each table lists "
        "every field of the kind's `spec` and `status` with its type, the default the API server "
        "fills in, and the rules it checks before the operator sees the resource: bounds, "
        "patterns, allowed values and CEL rules, each with the message you get when a rule fails. "
        "`status` is written by the operator. Anchor of a field: the kind and the field path in "
        "lower case, `.` as `-`, list brackets dropped (`#orbitmqcluster-spec-brokers-groups`). "
        "The chart also installs kopf's peering CRDs (`charts/orbitmq/crds/kopf-peering.yml`), "
        "which the operators use to elect the acting one; they are kopf's, not orbitmq's.",
    )
    kinds = [manifest["spec"]["names"]["kind"] for manifest in manifests]
    lines += ["Kinds: " + ", ".join(f"[{kind}](#{slug(kind)})" for kind in kinds) + ".", ""]
    for manifest in manifests:
        lines += _kind_section(manifest, anchors)
    return "\n".join(lines).rstrip() + "\n"


def _kind_section(manifest: dict[str, Any], anchors: Anchors) -> list[str]:
    spec = manifest["spec"]
    names = spec["names"]
    version = spec["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    kind = names["kind"]
    anchor = anchors.add(slug(kind))
    lines = [f"## {kind} {{#{anchor}}}", "", prose(schema.get("description")), ""]
    facts = [
        ("API version", code(f"{spec['group']}/{version['name']}")),
        ("CRD", code(manifest["metadata"]["name"])),
        ("Scope", spec["scope"]),
        ("Short names", ", ".join(code(name) for name in names.get("shortNames", ()))),
        ("Categories", ", ".join(code(name) for name in names.get("categories", ()))),
        ("Subresources", ", ".join(code(name) for name in version.get("subresources", {}))),
    ]
    scale = version.get("subresources", {}).get("scale")
    if scale:
        facts.append(
            (
                "`kubectl scale`",
                f"sets {code(scale['specReplicasPath'])}, reads {code(scale['statusReplicasPath'])}",
            )
        )
    columns = ", ".join(
        f"{column['name']} ({code(column['jsonPath'])})"
        for column in version.get("additionalPrinterColumns", ())
    )
    facts.append(("`kubectl get` columns", columns))
    for rule in schema.get("x-kubernetes-validations", ()):
        facts.append(("Rule", f"{code(rule['rule'])}: {prose(rule.get('message', ''))}"))
    lines += [*table(("Property", "Value"), facts), ""]
    for part in ("spec", "status"):
        node = schema["properties"].get(part)
        if node is None:
            continue
        body = []
        for row in rows(node, part, schema_default, part in schema.get("required", ())):
            row_anchor = anchors.add(slug(f"{kind}-{row.path}"))
            body.append(row.cells(row_anchor))
        lines += [f"### {kind} {part} {{#{anchors.add(slug(f'{kind}-{part}-fields'))}}}", ""]
        lines += [*table(HEADER, body), ""]
    return lines
