"""``reference/metrics.md``: every ``orbitmq_*`` metric family, from the metric inventory.

:func:`orbitmq_operator.monitoring.inventory.metric_families` reads the families (name, type,
labels) from the modules that define them, without starting a process; the dashboards and
alerts are checked against the same inventory. The meaning is the family's help text, read here
from the same source: the first string passed after the name (``Gauge(name, help, ...)``, the sidecar's
``_gauge(name, help, ...)``, or the first string after the name in the broker's loop tuples).
A family without a help text fails the generation, so every metric has a meaning on the page.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from orbitmq.docsgen.markdown import Anchors, anchor_tag, code, page_header, prose, slug, table

PROCESSES = {
    "orbitmq.broker.metrics": "Broker",
    "orbitmq.nameserver.servicer": "Name server",
    "orbitmq.proxy.metrics": "Proxy",
    "orbitmq.sidecar.server": "Sidecar",
    "orbitmq.client.consumer_metrics": "Consumers (client library, sidecar)",
    "orbitmq.auth.audit": "Servers with authentication on (broker, name server, proxy, sidecar)",
    "orbitmq.common.runtime_metrics": "Every server process",
    "orbitmq_operator.metrics": "Operator",
}
"""Defining module -> the processes whose ``/metrics`` page shows its families."""

_SUFFIXES = {"counter": "_total", "info": "_info"}


def render() -> str:
    from orbitmq_operator.monitoring.inventory import SOURCES, metric_families

    unknown = sorted(set(SOURCES) - set(PROCESSES))
    if unknown:
        raise ValueError(f"no process named for metric modules {unknown}: add them to PROCESSES")
    families = metric_families(SOURCES)
    helps: dict[str, str] = {}
    for module in SOURCES:
        helps.update(help_texts(module))
    anchors = Anchors()
    lines = page_header(
        "Metrics reference",
        "the metric inventory (`operator/orbitmq_operator/monitoring/inventory.py`) and the help "
        "texts of the modules that define each family",
        "Every Prometheus family orbitmq's processes export, grouped by the process that exports "
        "it, with its type, labels and meaning. Names are as exposed: a counter's series end in "
        "`_total` (some also have a `_created` time stamp), a histogram's in `_bucket`, `_sum` and "
        "`_count`, an info's in `_info`. Prometheus "
        "adds `job` and `instance` (and the prometheus-operator `namespace`, `pod`, ...) to each. "
        "Every server also exports prometheus_client's `process_*` families (memory, open files, "
        "CPU). Anchor of a family: its name with `_` as `-` (`#orbitmq-consumer-lag`).",
    )
    for module, process in PROCESSES.items():
        found = sorted((f for f in families.values() if f.module == module), key=lambda f: f.name)
        if not found:
            continue
        lines += [f"## {process}", "", f"Defined in `{module}`.", ""]
        body = []
        for family in found:
            exposed = family.name + _SUFFIXES.get(family.type, "")
            meaning = next((helps[n] for n in (family.name, exposed) if n in helps), None)
            if not meaning:
                raise ValueError(f"{family.name} ({module}) has no help text the generator can read")
            labels = ", ".join(code(label) for label in family.labels)
            body.append(
                (
                    anchor_tag(anchors.add(slug(family.name))) + code(exposed),
                    family.type,
                    labels,
                    prose(meaning),
                )
            )
        lines += [*table(("Metric", "Type", "Labels", "Meaning"), body), ""]
    return "\n".join(lines).rstrip() + "\n"


def help_texts(module: str) -> dict[str, str]:
    """Family name as the code spells it (a counter's maybe with ``_total``) -> help text."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(module)
    tree = ast.parse(Path(spec.origin).read_text())
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        elements: list[ast.expr] = []
        if isinstance(node, ast.Call):
            elements = list(node.args)
            documentation = [k.value for k in node.keywords if k.arg == "documentation"]
            if elements and documentation:
                elements = [elements[0], *documentation]
        elif isinstance(node, ast.Tuple):
            elements = list(node.elts)
        for index, name_node in enumerate(elements):
            name = _string(name_node)
            text = next((t for t in map(_string, elements[index + 1 :]) if t), None)
            if name and name.startswith("orbitmq_") and text:
                out.setdefault(name, text)
    return out


def _string(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None
