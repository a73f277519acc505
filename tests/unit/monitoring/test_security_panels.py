"""Issue 26's audit figures on the overview dashboard and in the burst alert: both read the
refusals (failed authentications and denials) of ``orbitmq_auth_decisions_total`` by the labels the
audit module really counts under, and never its allowed admin changes as refusals."""

from __future__ import annotations

import re
from typing import Any

from orbitmq.auth.audit import DECISION_LABELS
from orbitmq_operator.monitoring import alerts, dashboards, inventory
from orbitmq_operator.monitoring.queries import check_promql, panel_queries, substitute_grafana_variables

BOARD = dashboards.dashboards()["overview"]
ALL = {name: dashboards.ALL_VALUE for name in ("cluster", "broker", "topic", "group")}
REFUSALS = {"authentication_failed", "denied"}


def _check(expr: str) -> Any:
    result = check_promql(substitute_grafana_variables(expr, ALL))
    assert not result.problems, result.problems
    return result


def _decisions_matched(expr: str) -> set[str]:
    """The decision labels an expression's ``decision`` matcher selects."""
    [(op, value)] = re.findall(r'decision(=~|=)"([^"]*)"', expr)
    pattern = value if op == "=~" else re.escape(value)
    return {label for label in DECISION_LABELS.values() if re.fullmatch(pattern, label)}


def _row(title: str) -> list[str]:
    """Panel titles of a row, in order."""
    titles, current = [], None
    for panel in BOARD["panels"]:
        if panel["type"] == "row":
            current = panel["title"]
        elif current == title:
            titles.append(panel["title"])
    return titles


def test_the_security_row_shows_refusals_and_admin_changes() -> None:
    assert _row("Security") == ["Refused requests", "Admin changes"]
    assert set(inventory.metric_families()["orbitmq_auth_decisions"].labels) == {
        "decision",
        "action",
        "resource_type",
    }


def test_refused_requests_are_a_rate_per_decision_action_and_resource_type() -> None:
    [expr] = [e for t, e in panel_queries(BOARD) if t == "Refused requests"]
    result = _check(expr)
    assert result.metrics == {"orbitmq_auth_decisions_total"}
    assert result.grouping == {"decision", "action", "resource_type"}
    assert "rate" in result.functions
    assert _decisions_matched(expr) == REFUSALS


def test_admin_changes_are_the_allowed_decisions_only() -> None:
    [expr] = [e for t, e in panel_queries(BOARD) if t == "Admin changes"]
    result = _check(expr)
    assert result.grouping == {"action", "resource_type"}
    assert _decisions_matched(expr) == {"allowed"}


def test_the_burst_alert_sums_refusals_only() -> None:
    [rule] = [
        r for g in alerts.rules()["groups"] for r in g["rules"] if r["alert"] == "OrbitMQAuthDenialsBurst"
    ]
    assert _decisions_matched(rule["expr"]) == REFUSALS
    assert f"[{alerts.AUTH_REFUSALS_WINDOW}]" in rule["expr"]
    assert f"> {alerts.AUTH_REFUSALS_BURST}" in rule["expr"]
    assert (rule["for"], rule["labels"]["severity"]) == ("2m", "warning")
