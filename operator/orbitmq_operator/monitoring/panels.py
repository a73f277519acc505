"""The vocabulary the dashboards are written in (pure data, no SDK): :class:`Panel` and
:class:`Query`, the panel makers :func:`ts`, :func:`stat_panel` and :func:`table_panel`, the
matchers of the template variables (:data:`B`, :data:`T`, :data:`G`) and the PromQL helpers
every dashboard uses. :mod:`.dashboards` turns panels into Grafana's JSON model.

Multi-value variables have ``.*`` as their "All" value (:data:`ALL_VALUE`), so every matcher on
them is ``=~``; rates use ``$__rate_interval`` (:data:`RI`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ALL_VALUE = ".*"
"""What a variable's "All" stands for in the queries (Grafana's ``allValue``)."""

CLIENT_DETAIL = "Consumers' own view (where they export metrics)"
"""The row of panels read only from client-side families (a consumer started with a metrics
port): the last of a dashboard, after the panels the brokers' series fill for every consumer."""

B = 'broker=~"$broker"'
T = 'topic=~"$topic"'
G = 'group=~"$group"'
RI = "[$__rate_interval]"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


PanelKind = Literal["timeseries", "stat", "table"]


@dataclass(frozen=True)
class Panel:
    """One panel's shape: what the helper :func:`_panel` turns into an SDK builder."""

    kind: PanelKind
    title: str
    queries: tuple[Query, ...]
    description: str = ""
    unit: str = "short"
    span: int = 12
    height: int = 8
    rename: tuple[tuple[str, str], ...] = ()
    """Table columns to rename (``Value`` -> what it is)."""
    sort_by: str = ""
    """A table's column sorted on, largest first (after renaming)."""


Rows = list[tuple[str, list[Panel]]]
"""A dashboard's rows: (row title, its panels), top to bottom."""


def ts(title: str, *queries: Query, unit: str = "short", description: str = "", span: int = 12) -> Panel:
    return Panel("timeseries", title, queries, description, unit, span)


def stat_panel(
    title: str, query: Query, *, unit: str = "short", description: str = "", span: int = 6
) -> Panel:
    return Panel("stat", title, (query,), description, unit, span, height=4)


def table_panel(
    title: str,
    *queries: Query,
    description: str = "",
    span: int = 12,
    value: str = "value",
    values: tuple[str, ...] = (),
    sort_by: str = "",
) -> Panel:
    """A table of instant queries (one evaluation, at the range's end: what is true now).

    One query: its ``Value`` column is called ``value``. Several (``values`` names each one's
    column): they must share their labels, and a ``merge`` transformation joins them into one
    row per label set (Grafana calls their columns ``Value #A``, ``Value #B``, ...)."""
    if len(queries) == 1:
        rename: tuple[tuple[str, str], ...] = (("Value", value),)
    elif len(values) == len(queries):
        rename = tuple((f"Value #{chr(ord('A') + i)}", name) for i, name in enumerate(values))
    else:
        raise ValueError(f"table {title!r}: {len(queries)} queries need as many column names, got {values!r}")
    return Panel("table", title, queries, description, span=span, rename=rename, sort_by=sort_by)


def rate(selector: str, by: str) -> str:
    return f"sum by ({by}) (rate({selector}{RI}))"


def increase(selector: str, by: str) -> str:
    return f"sum by ({by}) (increase({selector}{RI}))"


def quantiles(family: str, selector: str, by: str = "") -> tuple[Query, ...]:
    """p50, p95 and p99 of a histogram family, per ``by`` labels."""
    group = f"{by}, le" if by else "le"
    legend = "".join(f"{{{{{label.strip()}}}}} " for label in by.split(",") if label.strip())
    matchers = f"{{{selector}}}" if selector else ""
    return tuple(
        Query(
            f"histogram_quantile({q}, sum by ({group}) (rate({family}_bucket{matchers}{RI})))",
            f"{legend}p{round(q * 100)}",
        )
        for q in (0.5, 0.95, 0.99)
    )


def group_lag() -> str:
    """Each (group, broker)'s lag summed over its queues, the larger of the master's and its
    slaves' totals (they all expose it). Summing per scrape target first keeps the aggregation
    small: at 100 topics x 8 queues x 10 groups the selector still reads 16 000 series, but each
    step groups them into 20 sums, not 8 000 maxima."""
    lag = f"orbitmq_consumer_lag{{{B}, {T}, {G}}}"
    return f"max by (group, broker) (sum by (group, broker, instance) ({lag}))"


def membership_changes() -> Panel:
    """Joins, leaves and expiries per group (broker view), on two dashboards."""
    return ts(
        "Membership changes",
        Query(
            f"max by (group, change) (increase(orbitmq_consumer_membership_changes_total{{{B}, {G}}}{RI}))",
            "{{group}} {{change}}",
        ),
        description="Clients that joined, left (closed, unregistered) or expired (silent for the "
        "broker's channel_expiry_ms) per group. Every broker a client heartbeats counts it: the "
        "largest figure of the brokers.",
    )


def per_broker(family: str) -> str:
    """A broker gauge without labels, named by the broker it was scraped from."""
    return f"{family} * on(job, instance) group_left(broker, broker_id, role) orbitmq_broker_role{{{B}}}"
