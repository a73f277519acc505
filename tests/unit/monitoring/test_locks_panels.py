"""The locks-and-rebalances dashboard reads the brokers first: every panel above the consumers'
own row starts with a query of broker-side families (the brokers see every consumer, also one
that exports no metrics), and the panels only consumers with a metrics port can fill sit in
that last row (issue 23 item 12)."""

from __future__ import annotations

from orbitmq_operator.monitoring import dashboards, inventory
from orbitmq_operator.monitoring.queries import check_promql, substitute_grafana_variables

BOARD = dashboards.dashboards()["locks-and-rebalances"]
ALL = {name: dashboards.ALL_VALUE for name in ("cluster", "broker", "topic", "group")}
FAMILIES = inventory.metric_families()


def _side(expr: str) -> set[str]:
    """The modules defining the families a query reads ("broker", "client", ...)."""
    result = check_promql(substitute_grafana_variables(expr, ALL))
    assert not result.problems, result.problems
    sides = set()
    for family in FAMILIES.values():
        if result.metrics & set(family.series()):
            sides.add(family.module.split(".")[1])
    return sides


def _rows() -> list[tuple[str, list[dict]]]:
    rows: list[tuple[str, list[dict]]] = []
    for panel in BOARD["panels"]:
        if panel["type"] == "row":
            rows.append((panel["title"], []))
        else:
            rows[-1][1].append(panel)
    return rows


def test_broker_views_first_and_the_consumers_own_view_last() -> None:
    rows = _rows()
    assert [title for title, _ in rows] == ["Queue locks", "Rebalances", dashboards.CLIENT_DETAIL]
    for title, panels in rows[:-1]:
        for panel in panels:
            first, *rest = [t["expr"] for t in panel["targets"]]
            assert _side(first) == {"broker"}, (title, panel["title"], first)
            assert all(_side(e) <= {"broker", "client"} for e in rest), panel["title"]
    for panel in rows[-1][1]:
        assert all(_side(t["expr"]) == {"client"} for t in panel["targets"]), panel["title"]


def test_rebalances_and_membership_per_group_from_the_brokers() -> None:
    exprs = {p["title"]: [t["expr"] for t in p["targets"]] for _, ps in _rows() for p in ps}
    wanted = {
        "Group members": "orbitmq_consumer_connections",
        "Membership changes": "orbitmq_consumer_membership_changes_total",
        "Rebalances pushed": "orbitmq_rebalance_notifications_total",
        "Lock events": "orbitmq_queue_lock_events_total",
    }
    for title, series in wanted.items():
        result = check_promql(substitute_grafana_variables(exprs[title][0], ALL))
        assert result.metrics == {series}, title
        assert "group" in result.grouping, f"{title}: not per group"
        # A client heartbeats every broker: the largest figure of the brokers, never their sum.
        if title != "Lock events":
            assert exprs[title][0].startswith("max by (group"), title
