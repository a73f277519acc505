"""The chart's Grafana dashboards: generated from code, loadable by grafana-foundation-sdk's own
models, and every query names metric families and labels that orbitmq's processes really expose
(read from the code that defines them, so renaming a metric fails here)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import prometheus as prometheus_model

from orbitmq_operator.monitoring import dashboards, inventory
from orbitmq_operator.monitoring.queries import (
    builtin_variables,
    check_promql,
    panel_queries,
    panel_titles,
    substitute_grafana_variables,
    variable_queries,
)

CHART_DASHBOARDS = Path(__file__).resolve().parents[3] / "charts" / "orbitmq" / "dashboards"
GENERATED = dashboards.dashboards()
SERIES = inventory.series_labels()
TEMPLATE_VARIABLES = ("cluster", "broker", "topic", "group")
SELECTIONS: list[dict[str, str | list[str]]] = [
    {name: dashboards.ALL_VALUE for name in TEMPLATE_VARIABLES},
    {"cluster": ["orbit"], "broker": ["orbit-0", "orbit-1"], "topic": ["Orders"], "group": ["CG.a", "CG|b"]},
]
"""Variable selections the queries must stay valid PromQL with: everything ("All"), and multi
values with regex metacharacters (escaped as Grafana does)."""


def _all_queries() -> list[tuple[str, str, str]]:
    return [(name, title, expr) for name, board in GENERATED.items() for title, expr in panel_queries(board)]


def test_the_chart_holds_the_generated_dashboards_unchanged() -> None:
    files = dashboards.dashboard_files()
    on_disk = {path.name: path.read_text() for path in CHART_DASHBOARDS.glob("*.json")}
    assert set(on_disk) == set(files), "run scripts/gen-dashboards"
    for name, text in files.items():
        assert on_disk[name] == text, f"{name} is stale: run scripts/gen-dashboards"


def test_uids_and_titles_are_stable() -> None:
    assert {name: (board["uid"], board["title"]) for name, board in GENERATED.items()} == {
        "overview": ("orbitmq-overview", "orbitmq / Overview"),
        "topics-and-groups": ("orbitmq-topics-groups", "orbitmq / Topics and consumer groups"),
        "locks-and-rebalances": ("orbitmq-locks-rebalances", "orbitmq / Locks and rebalances"),
        "storage-and-ha": ("orbitmq-storage-ha", "orbitmq / Storage and HA"),
        "operator": ("orbitmq-operator", "orbitmq / Operator"),
    }
    assert dashboards.dashboards() == GENERATED  # deterministic: the same JSON on every run


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_each_dashboard_loads_back_with_the_sdk_models(name: str) -> None:
    register_default_plugins()
    data = json.loads((CHART_DASHBOARDS / f"{name}.json").read_text())
    loaded = model.Dashboard.from_json(data)
    assert json.loads(json.dumps(loaded, cls=JSONEncoder)) == data  # nothing unknown to the models
    assert loaded.uid == data["uid"]
    panels = [p for p in loaded.panels or [] if isinstance(p, model.Panel)]
    assert panels and all(p.type_val in ("timeseries", "stat", "table") for p in panels)
    for panel in panels:
        assert not isinstance(panel.options, dict), f"{panel.title}: options not decoded by the SDK"
        assert panel.targets and all(isinstance(t, prometheus_model.Dataquery) for t in panel.targets)
        assert panel.datasource is not None and panel.datasource.uid == "${datasource}"


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_every_dashboard_has_the_template_variables(name: str) -> None:
    variables = {v["name"]: v for v in GENERATED[name]["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for var in TEMPLATE_VARIABLES:
        assert variables[var]["type"] == "query"
        assert variables[var]["multi"] and variables[var]["includeAll"]
        assert variables[var]["allValue"] == ".*"
        assert variables[var]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    for var, query in variable_queries(GENERATED[name]):
        match = re.fullmatch(r"label_values\((\w+)(\{.*\})?, (\w+)\)", query)
        assert match, query
        metric, selector, label = match.groups()
        assert metric in SERIES and label in SERIES[metric], f"${var}: {query}"
        result = check_promql(substitute_grafana_variables(metric + (selector or ""), SELECTIONS[1]))
        assert not result.problems
        assert {m[1] for m in result.matchers} <= SERIES[metric]


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_panel_titles_and_ids_are_unique(name: str) -> None:
    titles = panel_titles(GENERATED[name])
    assert len(titles) == len(set(titles)), titles
    ids = [p["id"] for p in GENERATED[name]["panels"]]
    assert len(ids) == len(set(ids))
    assert all(p["gridPos"]["x"] + p["gridPos"]["w"] <= 24 for p in GENERATED[name]["panels"])


def test_the_issue_s_panels_are_there() -> None:
    wanted = {
        "overview": [
            "Brokers up",
            "Roles and epochs",
            "Produce rate by topic",
            "Consume rate by group",
            "Send latency",
            "Pull latency",
            "Errors",
        ],
        "topics-and-groups": [
            "Max offset per queue",
            "Committed offset and lag per queue",
            "Consumer lag by group",
            "Lag growth",
            "Consume results",
            "Retries",
            "Dead letters",
        ],
        "locks-and-rebalances": [
            "Queue lock owners",
            "Lock events",
            "Rebalance events by outcome",
            "Queues per client",
            "Rebalance duration",
        ],
        "storage-and-ha": [
            "Commit-log bytes",
            "Commit-log disk use",
            "Store disk use %",
            "Commit-log flush latency",
            "Dispatch lag",
            "Replication lag per slave",
            "Failovers",
        ],
        "operator": ["Reconciles", "Reconcile errors", "Reconcile duration", "Operator failovers"],
    }
    for name, titles in wanted.items():
        assert set(titles) <= set(panel_titles(GENERATED[name])), name


PER_QUEUE_AND_GROUP = frozenset(
    {
        "orbitmq_consumer_offset",
        "orbitmq_consumer_lag",
        "orbitmq_queue_lock_owner",
        "orbitmq_client_committed_offset",
        "orbitmq_client_consumer_lag",
    }
)
"""Families with a series per (group, topic, queue): 8 000 of them (16 000 with a slave's copies)
at the issue's 100 topics x 8 queues x 10 groups."""


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_time_series_panels_stay_small_at_all(name: str) -> None:
    """A time-series panel runs its query at every step of the range (240 for the default hour):
    over the per-(group, topic, queue) families it must draw a line per group or topic, not
    per queue (8 000 lines, 41 MB, seconds at "All"; benchmarks/cardinality_bench.py), and
    never scan ``$__range`` at each step. Per-queue "now" figures belong in instant tables."""
    for panel in GENERATED[name]["panels"]:
        if panel["type"] != "timeseries":
            continue
        for target in panel["targets"]:
            expr = target["expr"]
            assert "$__range" not in expr, f"{panel['title']}: $__range in a range query"
            if (
                not check_promql(substitute_grafana_variables(expr, SELECTIONS[0])).metrics
                & PER_QUEUE_AND_GROUP
            ):
                continue
            outer = re.search(r"\bby \(([^)]*)\)", expr)
            assert outer, f"{panel['title']}: per-queue series drawn unaggregated"
            assert "queue" not in outer.group(1), f"{panel['title']}: a line per queue ({outer.group(0)})"
    for panel in GENERATED[name]["panels"]:
        if panel["type"] == "table":
            assert all(t.get("instant") and not t.get("range") for t in panel["targets"]), panel["title"]


def test_the_inventory_reads_every_shape_of_metric_definition() -> None:
    families = inventory.metric_families()
    assert {f.module for f in families.values()} == set(inventory.SOURCES)
    # a direct call, a loop over literal tuples (broker latency), a helper (sidecar gauges), an Info
    assert families["orbitmq_queue_lock_owner"].labels == ("group", "topic", "broker", "queue", "client")
    assert families["orbitmq_send_latency_seconds"].type == "histogram"
    assert families["orbitmq_sidecar_in_flight"].labels == ("group",)
    assert families["orbitmq_broker_role_changes"].series() == {
        "orbitmq_broker_role_changes_total": frozenset({"broker", "change"})
    }
    assert "cluster" in families["orbitmq_operator_last_failover_decision"].labels
    assert (
        "orbitmq_pull_latency_seconds_bucket" in SERIES
        and "le" in SERIES["orbitmq_pull_latency_seconds_bucket"]
    )


@pytest.mark.parametrize(("dashboard", "title", "expr"), _all_queries())
def test_every_query_parses_and_names_real_families_and_labels(dashboard: str, title: str, expr: str) -> None:
    for brackets in re.findall(r"\[([^\]]*)\]", expr):
        assert brackets in ("$__rate_interval", "$__rate_interval:", "$__range"), (
            f"{title}: hard-coded range [{brackets}]"
        )
    for selection in SELECTIONS:
        promql = substitute_grafana_variables(expr, selection)
        result = check_promql(promql)
        assert not result.problems, (title, promql, result.problems)
        assert result.metrics, title
        assert result.metrics <= set(SERIES), f"{title}: unknown series {result.metrics - set(SERIES)}"
        for metric, label, _op, _value in result.matchers:
            assert label in SERIES[metric] | inventory.TARGET_LABELS, f"{title}: {metric} has no {label}"
        known = set().union(*(SERIES[m] for m in result.metrics)) | inventory.TARGET_LABELS
        assert result.grouping <= known, f"{title}: grouping by {result.grouping - known}"
        if any(m.endswith(("_total", "_bucket", "_count", "_sum")) for m in result.metrics):
            assert result.functions & {"rate", "increase", "irate"}, f"{title}: a counter read raw"


# -- the helpers other tests use ---------------------------------------------------------------


def test_builtin_variables_follow_grafana() -> None:
    assert builtin_variables() == {
        "__interval": "15s",
        "__interval_ms": "15000",
        "__rate_interval": "1m",  # max(15s + 15s, 4 * 15s)
        "__range": "3600s",
        "__range_s": "3600",
        "__range_ms": "3600000",
    }
    assert builtin_variables(scrape_interval="30s", interval="2m", range_="6h")["__rate_interval"] == "150s"
    assert builtin_variables(scrape_interval="30s", interval="5s")["__interval"] == "30s"


def test_substitution_formats_variables_as_the_prometheus_data_source() -> None:
    expr = 'sum(rate(x{a=~"$a", b=~"${b}", c=~"$c"}[$__rate_interval])) / $__range_s'
    values: dict[str, str | list[str]] = {"a": ".*", "b": ["one"], "c": ["x.y", "p|q"]}
    assert substitute_grafana_variables(expr, values) == (
        r'sum(rate(x{a=~".*", b=~"one", c=~"(x\\.y|p\\|q)"}[1m])) / 3600'
    )
    assert substitute_grafana_variables("$__interval", {}, interval="2m") == "2m"
    assert substitute_grafana_variables("${v:raw}", {"v": ["a", "b"]}) == "a,b"
    with pytest.raises(KeyError):
        substitute_grafana_variables('x{a="$missing"}', {})


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("sum(rate(x[1m])", "unclosed"),
        ("rate(x[1m]))", "unbalanced"),
        ("frobnicate(x)", "unknown function"),
        ("rate(x[$__rate_interval])", "unexpected"),
        ("rate(x[])", "range selector"),
        ('{a="b"}', "without a metric name"),
        ('x{a~"b"}', "bad label matcher"),
        ('x{a=~"("}', "bad regex"),
    ],
)
def test_the_promql_check_finds_broken_expressions(expr: str, problem: str) -> None:
    problems = check_promql(expr).problems
    assert any(problem in p for p in problems), problems


def test_the_promql_check_reports_what_an_expression_uses() -> None:
    result = check_promql(
        'histogram_quantile(0.99, sum by (le, group) (rate(a_bucket{group=~"g"}[5m]))) '
        "* on(job, instance) group_left(role) b or vector(0)"
    )
    assert not result.problems
    assert result.metrics == {"a_bucket", "b"}
    assert result.matchers == [("a_bucket", "group", "=~", "g")]
    assert result.grouping == {"le", "group", "job", "instance", "role"}
    assert result.functions == {"histogram_quantile", "sum", "rate", "vector"}
