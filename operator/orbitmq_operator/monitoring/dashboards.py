"""orbitmq's Grafana dashboards, built with ``grafana-foundation-sdk`` (the chart ships the JSON).

Five dashboards (overview; topics and consumer groups; locks and rebalances; storage and HA;
operator), each with the same template variables: ``datasource`` (any Prometheus), ``cluster``,
``broker``, ``topic`` and ``group``. Every query uses only the families of DESIGN §9 (see
:mod:`.inventory`), with the labels they really carry:

- only the name server's ``orbitmq_nameserver_brokers`` has ``cluster`` (and calls the broker
  ``broker_name``), so ``cluster`` narrows ``broker`` (a broker's name is its group's, shared by
  its master and slaves), and broker-side panels filter on ``broker``;
- the broker's older storage gauges (``orbitmq_commitlog_bytes``, ``orbitmq_dispatch_lag_bytes``,
  ...) have no labels of their own: :func:`.panels.per_broker` joins them with ``orbitmq_broker_role`` on
  the scrape target (``job``, ``instance``) to name and filter them; the disk gauges and the
  commit-log flush histogram carry ``broker``, and since a group's master and slaves share it,
  their panels keep ``instance`` apart;
- client-side families (rebalances, consume results) carry ``group``/``topic``/``client`` but no
  ``broker``; the operator's carry ``kind`` (failovers: ``namespace``, ``cluster``,
  ``broker_group``).

Sized for 100 topics x 8 queues x 10 groups (8 000 series per per-queue family, 16 000 with a
slave's copies; ``benchmarks/cardinality_bench.py``): per-queue figures are instant queries in
tables (one evaluation, whatever the range), and time series over those families draw a line
per group (or topic), narrowed by the variables, so every query answers well under a second at
"All".

Rates use ``$__rate_interval``; multi-value variables have ``.*`` as their "All" value, so every
matcher on them is ``=~``. Panels are written in the vocabulary of :mod:`.panels`, one module per
dashboard in :mod:`.boards`; this module names and orders them (:data:`BOARDS`) and turns them
into Grafana's JSON model. Pure: :func:`dashboard_files` returns the JSON text; only ``python -m
orbitmq_operator.monitoring DIR`` (run by ``scripts/gen-dashboards``) writes files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from orbitmq_operator.monitoring.boards import (
    locks_and_rebalances,
    operator,
    overview,
    storage_and_ha,
    topics_and_groups,
)
from orbitmq_operator.monitoring.panels import ALL_VALUE, CLIENT_DETAIL, Panel, Rows

__all__ = ["ALL_VALUE", "BOARDS", "CLIENT_DETAIL", "Board", "build", "dashboard_files", "dashboards"]

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")

VARIABLES: tuple[tuple[str, str, str], ...] = (
    ("cluster", "Cluster", "label_values(orbitmq_nameserver_brokers, cluster)"),
    ("broker", "Broker", 'label_values(orbitmq_nameserver_brokers{cluster=~"$cluster"}, broker_name)'),
    ("topic", "Topic", 'label_values(orbitmq_queue_max_offset{broker=~"$broker"}, topic)'),
    ("group", "Group", 'label_values(orbitmq_consumer_offset{broker=~"$broker", topic=~"$topic"}, group)'),
)
"""(name, label, query) of the query variables every dashboard has, besides ``datasource``."""

TAG = "orbitmq"


@dataclass(frozen=True)
class Board:
    name: str
    uid: str
    title: str
    description: str
    rows: Callable[[], Rows]


BOARDS: tuple[Board, ...] = (
    Board(
        "overview",
        "orbitmq-overview",
        "orbitmq / Overview",
        "Brokers, roles, traffic, latency, errors.",
        overview.rows,
    ),
    Board(
        "topics-and-groups",
        "orbitmq-topics-groups",
        "orbitmq / Topics and consumer groups",
        "Offsets, lag, consume results, retries and dead letters.",
        topics_and_groups.rows,
    ),
    Board(
        "locks-and-rebalances",
        "orbitmq-locks-rebalances",
        "orbitmq / Locks and rebalances",
        "Queue lock owners and events, rebalances, queues per client.",
        locks_and_rebalances.rows,
    ),
    Board(
        "storage-and-ha",
        "orbitmq-storage-ha",
        "orbitmq / Storage and HA",
        "Commit log, fsync latency, disk space, dispatch, replication, failovers.",
        storage_and_ha.rows,
    ),
    Board(
        "operator",
        "orbitmq-operator",
        "orbitmq / Operator",
        "Reconciles, errors, durations, failovers.",
        operator.rows,
    ),
)


# -- building ---------------------------------------------------------------------------------


def _panel(spec: Panel, panel_id: int) -> Any:
    """The one helper turning a :class:`Panel` into an SDK builder (ids, datasource, queries)."""
    builder: Any
    if spec.kind == "timeseries":
        builder = (
            timeseries.Panel()
            .legend(
                common_builders.VizLegendOptions()
                .display_mode(common.LegendDisplayMode.LIST)
                .placement(common.LegendPlacement.BOTTOM)
                .show_legend(True)
            )
            .tooltip(
                common_builders.VizTooltipOptions()
                .mode(common.TooltipDisplayMode.MULTI)
                .sort(common.SortOrder.DESCENDING)
            )
            .fill_opacity(10)
        )
    elif spec.kind == "stat":
        builder = (
            stat.Panel()
            .graph_mode(common.BigValueGraphMode.NONE)
            .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        )
    else:
        builder = (
            table.Panel()
            .align(common.FieldTextAlignment.AUTO)  # the table's field defaults, spelled out
            .inspect(False)
        )
        if len(spec.queries) > 1:
            builder = builder.with_transformation(model.DataTransformerConfig(id_val="merge", options={}))
        if spec.sort_by:
            builder = builder.sort_by(
                [common_builders.TableSortByFieldState().display_name(spec.sort_by).desc(True)]
            )
        builder = builder.with_transformation(
            model.DataTransformerConfig(
                id_val="organize",
                options={"excludeByName": {"Time": True}, "renameByName": dict(spec.rename)},
            )
        )
    builder = (
        builder.id(panel_id)
        .title(spec.title)
        .datasource(DATASOURCE)
        .unit(spec.unit)
        .span(spec.span)
        .height(spec.height)
    )
    if spec.description:
        builder = builder.description(spec.description)
    for index, query in enumerate(spec.queries):
        target = (
            prometheus.Dataquery()
            .expr(query.expr)
            .ref_id(chr(ord("A") + index))
            .datasource(DATASOURCE)
            .legend_format(query.legend or "__auto")
        )
        target = target.range() if spec.kind == "timeseries" else target.instant()
        if spec.kind == "table":
            target = target.format(PromQueryFormat.TABLE)
        builder = builder.with_target(target)
    return builder


def _variables() -> list[Any]:
    out: list[Any] = [
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus"),
    ]
    for name, label, query in VARIABLES:
        out.append(
            dash.QueryVariable(name)
            .label(label)
            .query(query)
            .datasource(DATASOURCE)
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(ALL_VALUE)
            .current(model.VariableOption(selected=True, text=["All"], value=["$__all"]))
        )
    return out


def build(board: Board) -> model.Dashboard:
    builder = (
        dash.Dashboard(board.title)
        .uid(board.uid)
        .description(board.description)
        .tags([TAG])
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .readonly()
        .variables(_variables())
        .link(
            dash.DashboardLink("orbitmq dashboards")
            .type(model.DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    panel_id = 1
    for title, panels in board.rows():
        builder = builder.with_row(dash.Row(title).id(panel_id))
        panel_id += 1
        for spec in panels:
            builder = builder.with_panel(_panel(spec, panel_id))
            panel_id += 1
    return builder.build()


def dashboards() -> dict[str, dict[str, Any]]:
    """Name -> the dashboard's JSON model (as Grafana stores it)."""
    return {board.name: json.loads(json.dumps(build(board), cls=JSONEncoder)) for board in BOARDS}


def dashboard_files() -> dict[str, str]:
    """``<name>.json`` -> its text, as the chart ships it."""
    return {
        f"{name}.json": json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        for name, data in dashboards().items()
    }
