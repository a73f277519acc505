"""Operator: reconciles, errors, durations, object writes and failovers."""

from __future__ import annotations

from orbitmq_operator.monitoring.panels import (
    Query,
    Rows,
    increase,
    quantiles,
    rate,
    stat_panel,
    table_panel,
    ts,
)


def rows() -> Rows:
    return [
        (
            "Reconciles",
            [
                ts(
                    "Reconciles",
                    Query(rate("orbitmq_operator_reconcile_duration_seconds_count", "kind"), "{{kind}}"),
                    unit="ops",
                ),
                ts(
                    "Reconcile errors",
                    Query(
                        rate("orbitmq_operator_reconcile_errors_total", "kind, reason"),
                        "{{kind}} {{reason}}",
                    ),
                    unit="ops",
                ),
                ts(
                    "Reconcile duration",
                    *quantiles("orbitmq_operator_reconcile_duration_seconds", "", "kind"),
                    unit="s",
                ),
                ts(
                    "Object writes",
                    Query(rate("orbitmq_operator_object_writes_total", "kind"), "{{kind}}"),
                    unit="ops",
                    description="Server-side applies of changed objects (unchanged ones are skipped).",
                ),
            ],
        ),
        (
            "Failovers",
            [
                stat_panel(
                    "Failovers in range",
                    Query(
                        'sum(increase(orbitmq_operator_failovers_total{cluster=~"$cluster"}[$__range])) '
                        "or vector(0)"
                    ),
                ),
                ts(
                    "Operator failovers",
                    Query(
                        increase(
                            'orbitmq_operator_failovers_total{cluster=~"$cluster"}',
                            "namespace, cluster, broker_group",
                        ),
                        "{{namespace}}/{{cluster}} {{broker_group}}",
                    ),
                    span=18,
                ),
                table_panel(
                    "Last failover decision",
                    Query(
                        "max by (namespace, cluster, broker_group, promote, demote, epoch, reason) "
                        '(orbitmq_operator_last_failover_decision_info{cluster=~"$cluster"})'
                    ),
                    description="The operator's last role-changing decision (since it started).",
                    span=24,
                ),
            ],
        ),
    ]
