"""Overview: brokers registered and up, roles and epochs, traffic, latency, errors and security
(refused requests and admin changes of users and ACLs, from every server's audit counter)."""

from __future__ import annotations

from orbitmq.auth.audit import DECISION_LABELS
from orbitmq_operator.monitoring.panels import (
    RI,
    B,
    G,
    Query,
    Rows,
    T,
    increase,
    quantiles,
    rate,
    stat_panel,
    table_panel,
    ts,
)

REFUSED = "|".join(label for kind, label in DECISION_LABELS.items() if kind != "allowed_admin_change")
"""``decision`` values of ``orbitmq_auth_decisions_total`` that are refusals."""
ALLOWED = DECISION_LABELS["allowed_admin_change"]


def rows() -> Rows:
    return [
        (
            "Cluster",
            [
                stat_panel(
                    "Brokers registered",
                    Query(
                        "count(max by (cluster, broker_name, broker_id) "
                        '(orbitmq_nameserver_brokers{cluster=~"$cluster", broker_name=~"$broker"})) '
                        "or vector(0)"
                    ),
                    description="Broker addresses live in the name servers (a master and its slaves count "
                    "one each).",
                ),
                stat_panel(
                    "Brokers up",
                    Query(f"count(orbitmq_broker_role{{{B}}}) or vector(0)"),
                    description="Brokers whose metrics endpoint Prometheus scrapes.",
                ),
                stat_panel(
                    "Masters",
                    Query(f'count(orbitmq_broker_role{{{B}, role=~".+_MASTER"}}) or vector(0)'),
                ),
                stat_panel(
                    "Broker groups without a master",
                    Query(
                        f"count(count by (broker) (orbitmq_broker_role{{{B}}}) unless count by (broker) "
                        f'(orbitmq_broker_role{{{B}, role=~".+_MASTER"}})) or vector(0)'
                    ),
                ),
                table_panel(
                    "Roles and epochs",
                    Query(
                        "max by (broker, broker_id, role) "
                        f"(orbitmq_broker_epoch{{{B}}} * on(job, instance) group_left(broker_id, role) "
                        "orbitmq_broker_role)"
                    ),
                    description="Each broker's role and the role-change epoch it acts under.",
                    value="epoch",
                ),
                ts(
                    "Epoch by broker",
                    Query(f"max by (broker) (orbitmq_broker_epoch{{{B}}})", "{{broker}}"),
                    description="The epoch goes up by one with every failover or switchover.",
                ),
            ],
        ),
        (
            "Traffic",
            [
                ts(
                    "Produce rate by topic",
                    Query(rate(f"orbitmq_messages_put_total{{{B}, {T}}}", "topic"), "{{topic}}"),
                    unit="msg/s",
                ),
                ts(
                    "Consume rate by group",
                    Query(rate(f"orbitmq_messages_got_total{{{B}, {T}, {G}}}", "group"), "{{group}}"),
                    unit="msg/s",
                    description="Messages returned by pulls, over the topics selected (pick a topic to "
                    "see its consumers alone): one series per group, however many topics it reads.",
                ),
                ts("Send latency", *quantiles("orbitmq_send_latency_seconds", B), unit="s"),
                ts(
                    "Pull latency",
                    *quantiles("orbitmq_pull_latency_seconds", B),
                    unit="s",
                    description="Long-poll waiting included: an idle consumer's pulls take the hold time.",
                ),
            ],
        ),
        (
            "Errors",
            [
                ts(
                    "Errors",
                    Query(
                        rate(
                            f'orbitmq_consume_results_total{{{G}, {T}, status!~"CONSUME_SUCCESS|SUCCESS"}}',
                            "status",
                        ),
                        "consume {{status}}",
                    ),
                    Query(
                        rate('orbitmq_nameserver_route_queries_total{outcome="not_found"}', "outcome"),
                        "route {{outcome}}",
                    ),
                    Query(
                        rate(f'orbitmq_queue_lock_events_total{{{B}, event="rejected"}}', "event"),
                        "lock {{event}}",
                    ),
                    Query("sum(rate(orbitmq_nameserver_brokers_expired_total" + RI + "))", "brokers expired"),
                    Query(rate("orbitmq_operator_reconcile_errors_total", "kind"), "operator {{kind}}"),
                    unit="ops",
                    description="Listener failures, unknown-topic route lookups, refused queue locks, "
                    "brokers dropped for missed heartbeats and failed operator reconciles.",
                ),
                ts(
                    "Route lookups",
                    Query(rate("orbitmq_nameserver_route_queries_total", "outcome"), "{{outcome}}"),
                    unit="ops",
                ),
            ],
        ),
        (
            "Security",
            [
                ts(
                    "Refused requests",
                    Query(
                        rate(
                            f'orbitmq_auth_decisions_total{{decision=~"{REFUSED}"}}',
                            "decision, action, resource_type",
                        ),
                        "{{decision}} {{action}} {{resource_type}}",
                    ),
                    unit="ops",
                    description="Failed authentications (unknown key, bad signature, date outside the "
                    "window, disabled user) and ACL denials, per action and resource type, summed over "
                    "every server. Each is one line of the servers' orbitmq.audit log, naming who, "
                    "from where and on what.",
                ),
                ts(
                    "Admin changes",
                    Query(
                        increase(
                            f'orbitmq_auth_decisions_total{{decision="{ALLOWED}"}}', "action, resource_type"
                        ),
                        "{{action}} {{resource_type}}",
                    ),
                    description="Users and ACLs created, updated or deleted (each also logged on "
                    "orbitmq.audit): a change just before refusals start is the first suspect.",
                ),
            ],
        ),
    ]
