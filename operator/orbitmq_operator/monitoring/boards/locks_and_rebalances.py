"""Locks and rebalances: queue lock owners and events, group members, membership changes and
the rebalances the brokers pushed, then the consumers' own rebalance figures."""

from __future__ import annotations

from orbitmq_operator.monitoring.panels import (
    CLIENT_DETAIL,
    RI,
    B,
    G,
    Query,
    Rows,
    T,
    increase,
    membership_changes,
    quantiles,
    rate,
    table_panel,
    ts,
)


def rows() -> Rows:
    """The broker's view first (it sees every consumer, also those that export no metrics:
    ``orbitmq consume``, most applications), then the consumers' own figures in a
    last row, as detail where they export them."""
    owners = f"orbitmq_queue_lock_owner{{{B}, {T}, {G}}}"
    return [
        (
            "Queue locks",
            [
                table_panel(
                    "Queue lock owners",
                    Query(f"max by (group, topic, broker, queue, client) ({owners})"),
                    description="Which client holds which queue's lock now (orderly consumers).",
                    value="held",
                    span=24,
                ),
                table_panel(
                    "Owners per queue over the range",
                    Query(f"count by (group, topic, broker, queue) (max_over_time({owners}[$__range]))"),
                    value="owners",
                    sort_by="owners",
                    span=24,
                    description="Distinct clients that held each queue's lock in the time range, most "
                    "first: above 1, the lock moved (a rebalance) or flaps. One evaluation over the "
                    "range (an instant query).",
                ),
                ts(
                    "Locked queues per client",
                    Query(f"count by (group, client) ({owners})", "{{group}} {{client}}"),
                    Query(
                        f"sum by (group, client) (orbitmq_client_locked_queues{{{G}, {T}}})",
                        "{{group}} {{client}} (client view)",
                    ),
                    description="Broker view; a queue moving between clients shows as a step down and "
                    "up. Where consumers export metrics, their own view too (client view).",
                ),
                ts(
                    "Lock events",
                    Query(
                        rate(f"orbitmq_queue_lock_events_total{{{B}, {G}}}", "group, event"),
                        "{{group}} {{event}}",
                    ),
                    unit="ops",
                    description="Queues acquired, renewed, expired (holder stopped renewing) and rejected "
                    "(held by another client), per group.",
                ),
            ],
        ),
        (
            "Rebalances",
            [
                ts(
                    "Group members",
                    Query(f"max by (group) (orbitmq_consumer_connections{{{B}, {G}}})", "{{group}}"),
                    description="Clients online in each consumer group, as the brokers see them (their "
                    "heartbeats): the member list every client's rebalance divides the queues by.",
                ),
                membership_changes(),
                ts(
                    "Rebalances pushed",
                    Query(
                        f"max by (group) (increase(orbitmq_rebalance_notifications_total{{{B}, {G}}}{RI}))",
                        "{{group}}",
                    ),
                    description="Consumer-ids-changed notifications the brokers pushed after a membership "
                    "change: each makes one member rebalance at once (members also rebalance on their "
                    "own timer). The largest figure of the brokers (each tells the members it has a "
                    "session with).",
                ),
            ],
        ),
        (
            CLIENT_DETAIL,
            [
                ts(
                    "Rebalance events by outcome",
                    Query(
                        increase(f"orbitmq_rebalance_events_total{{{G}, {T}}}", "group, outcome"),
                        "{{group}} {{outcome}}",
                    ),
                    description="Rebalances the consumers ran, by outcome. no_client_list: no master "
                    "listed this client; it kept its queues.",
                ),
                ts(
                    "Queues per client",
                    Query(
                        f"sum by (group, client) (orbitmq_client_queues_assigned{{{G}, {T}}})",
                        "{{group}} {{client}}",
                    ),
                ),
                ts(
                    "Rebalance duration",
                    *quantiles("orbitmq_rebalance_duration_seconds", G, "group"),
                    unit="s",
                ),
            ],
        ),
    ]
