"""The generated Grafana dashboards' queries as Grafana sends them, for anything that runs them
on a real Prometheus (the live dashboards test, ``benchmarks/cardinality_bench.py``).

Enumeration and variable substitution live in :mod:`orbitmq_operator.monitoring.queries`
(the generator's own module); this adds what a runner needs around them: where the dashboards
are, every template variable at "All", and the parts of a ``label_values(selector, label)``.

Import it the way the other kits are imported::

    sys.path.insert(0, str(REPO_ROOT / "tests" / "integration" / "monitoring"))
    from dashkit import DASHBOARDS, all_variables, dashboard_queries
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
DASHBOARDS = REPO_ROOT / "charts" / "orbitmq" / "dashboards"

if str(REPO_ROOT / "operator") not in sys.path:
    sys.path.insert(0, str(REPO_ROOT / "operator"))
from orbitmq_operator.monitoring.queries import (  # noqa: E402
    panel_queries,
    substitute_grafana_variables,
    variable_queries,
)


def all_variables(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """Every template variable at "All" (its allValue, `.*` in our dashboards)."""
    return {
        v["name"]: v.get("allValue") or ".*"
        for v in dashboard.get("templating", {}).get("list", [])
        if v.get("type") == "query"
    }


def label_values_args(query: str) -> tuple[str, str]:
    """(selector, label) of Grafana's ``label_values(selector, label)``."""
    inner = query.strip()
    if not (inner.startswith("label_values(") and inner.endswith(")")):
        raise ValueError(f"{query!r} is not a label_values(selector, label) query")
    selector, _, label = inner[len("label_values(") : -1].rpartition(",")
    return selector.strip(), label.strip()


@dataclass(frozen=True)
class DashboardQuery:
    """One query of one panel: where it comes from, and the PromQL Grafana would send."""

    dashboard: str
    """The dashboard's file name (``overview.json``)."""
    title: str
    expr: str
    """As written in the dashboard, variables and all."""
    promql: str
    """With the template variables at "All" and Grafana's ``$__*`` variables substituted."""
    instant: bool = False
    """The panel asks for the value at the range's end only (``instant``, not ``range``: stat
    and table panels), not for a point per step."""


def panel_targets(dashboard: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(panel title, target) of every query :func:`panel_queries` lists, in the same order, with
    the rest of the target (``instant``, ``range``, ``format``)."""
    panels = []
    for panel in dashboard.get("panels") or []:
        panels.append(panel)
        panels.extend(panel.get("panels") or [])  # a collapsed row holds its panels
    found = [
        (panel.get("title", ""), target)
        for panel in panels
        for target in panel.get("targets") or []
        if target.get("expr") and not target.get("hide")
    ]
    if [(title, target["expr"]) for title, target in found] != panel_queries(dashboard):
        raise AssertionError("dashkit.panel_targets and queries.panel_queries disagree; align them")
    return found


def panel_rows(dashboard: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(row title, panel title, expr) of every query :func:`panel_targets` lists, in the same
    order: a panel belongs to the last row above it ('' before the first), or to the collapsed
    row holding it."""
    found = []
    row = ""
    for panel in dashboard.get("panels") or []:
        if panel.get("type") == "row":
            row = panel.get("title", "")
        for inner in [panel, *(panel.get("panels") or [])]:
            for target in inner.get("targets") or []:
                if target.get("expr") and not target.get("hide"):
                    found.append((row, inner.get("title", ""), target["expr"]))
    if [(title, expr) for _, title, expr in found] != panel_queries(dashboard):
        raise AssertionError("dashkit.panel_rows and queries.panel_queries disagree; align them")
    return found


def load_dashboards(directory: Path = DASHBOARDS) -> dict[str, dict[str, Any]]:
    """{file name: dashboard JSON} of every generated dashboard, sorted by name."""
    return {path.name: json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))}


def dashboard_queries(
    *,
    scrape_interval: str,
    interval: str,
    range_: str,
    selected: Mapping[str, str | Sequence[str]] | None = None,
    directory: Path = DASHBOARDS,
) -> Iterator[DashboardQuery]:
    """Every query of every panel of every dashboard, as Grafana sends it for a time range of
    ``range_`` at a step of ``interval`` with targets scraped every ``scrape_interval``; the
    template variables at "All" except those ``selected`` (a list: the values picked in a
    multi-value variable)."""
    for name, dashboard in load_dashboards(directory).items():
        variables: dict[str, str | Sequence[str]] = {**all_variables(dashboard), **(selected or {})}
        for title, target in panel_targets(dashboard):
            expr = target["expr"]
            promql = substitute_grafana_variables(
                expr, variables, scrape_interval=scrape_interval, interval=interval, range_=range_
            )
            instant = bool(target.get("instant")) and not target.get("range", False)
            yield DashboardQuery(name, title, expr, promql, instant)


def variable_selectors(
    *, scrape_interval: str, directory: Path = DASHBOARDS
) -> Iterator[tuple[str, str, str, str]]:
    """(dashboard file, variable name, selector, label) of every template variable's
    ``label_values`` query, the other variables at "All"."""
    for name, dashboard in load_dashboards(directory).items():
        variables = all_variables(dashboard)
        for variable, query in variable_queries(dashboard):
            selector, label = label_values_args(query)
            selector = substitute_grafana_variables(selector, variables, scrape_interval=scrape_interval)
            yield name, variable, selector, label
