"""The storage-and-HA dashboard's panels for issue 15's missing metrics: commit-log fsync latency
percentiles and the share of the data disk in use, both per broker process (a master and its
slaves share a broker name, not a disk), read from the families the broker defines."""

from __future__ import annotations

import re
from typing import Any

from orbitmq_operator.monitoring import dashboards, inventory
from orbitmq_operator.monitoring.queries import check_promql, panel_queries, substitute_grafana_variables

BOARD = dashboards.dashboards()["storage-and-ha"]
SERIES = inventory.series_labels()
ALL = {name: dashboards.ALL_VALUE for name in ("cluster", "broker", "topic", "group")}


def _check(expr: str) -> Any:
    result = check_promql(substitute_grafana_variables(expr, ALL))
    assert not result.problems, result.problems
    return result


def _panel(title: str) -> dict[str, Any]:
    return next(p for p in BOARD["panels"] if p.get("title") == title)


def test_flush_latency_shows_p50_p95_p99_per_broker_process() -> None:
    panel = _panel("Commit-log flush latency")
    assert panel["fieldConfig"]["defaults"]["unit"] == "s"
    exprs = [expr for title, expr in panel_queries(BOARD) if title == panel["title"]]
    quantiles = [re.findall(r"^histogram_quantile\(([\d.]+),", e) for e in exprs]
    assert quantiles == [["0.5"], ["0.95"], ["0.99"]]
    for expr in exprs:
        result = _check(expr)
        assert result.metrics == {"orbitmq_commitlog_flush_seconds_bucket"}
        assert result.grouping == {"broker", "instance", "le"}
        assert SERIES["orbitmq_commitlog_flush_seconds_bucket"] == {"broker", "le"}


def test_disk_use_is_the_ratio_the_broker_acts_on() -> None:
    panel = _panel("Store disk use %")
    assert panel["fieldConfig"]["defaults"]["unit"] == "percentunit"
    [(_, expr)] = [(t, e) for t, e in panel_queries(BOARD) if t == panel["title"]]
    assert expr.startswith('orbitmq_store_disk_used_ratio{broker=~"$broker"}')
    result = _check(expr)
    assert "orbitmq_store_disk_used_ratio" in result.metrics
    assert SERIES["orbitmq_store_disk_used_ratio"] == {"broker"}


def test_disk_full_refusals_show_per_broker_process() -> None:
    panel = _panel("Sends refused: disk full")
    [(_, expr)] = [(t, e) for t, e in panel_queries(BOARD) if t == panel["title"]]
    result = _check(expr)
    assert result.metrics == {"orbitmq_store_disk_full_refusals_total"}
    assert result.grouping == {"broker", "instance"}
    assert SERIES["orbitmq_store_disk_full_refusals_total"] == {"broker"}
