"""orbitmq's Grafana dashboards, built with ``grafana-foundation-sdk`` (the chart ships the JSON).

Five dashboards (overview; topics and consumer groups; locks and rebalances; storage and HA;
operator), each with the same template variables: ``datasource`` (any Prometheus), ``cluster``,
``broker``, ``topic`` and ``group``. Every query uses only the families of DESIGN §9 (see
:mod:`.inventory`), with the labels they really carry:

- only the name server's ``orbitmq_nameserver_brokers`` has ``cluster`` (and calls the broker
  ``broker_name``), so ``cluster`` narrows ``broker`` (a broker's name is its group's, shared by
  its master and slaves), and broker-side panels filter on ``broker``;
- the broker's older storage gauges (``orbitmq_commitlog_bytes``, ``orbitmq_dispatch_lag_bytes``,
  ...) have no labels of their own: :func:`_per_broker` joins them with ``orbitmq_broker_role`` on
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
matcher on them is ``=~``. Pure: :func:`dashboard_files` returns the JSON text; only ``python -m
orbitmq_operator.monitoring DIR`` (run by ``scripts/gen-dashboards``) writes files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
ALL_VALUE = ".*"
"""What a variable's "All" stands for in the queries (Grafana's ``allValue``)."""

VARIABLES: tuple[tuple[str, str, str], ...] = (
    ("cluster", "Cluster", "label_values(orbitmq_nameserver_brokers, cluster)"),
    ("broker", "Broker", 'label_values(orbitmq_nameserver_brokers{cluster=~"$cluster"}, broker_name)'),
    ("topic", "Topic", 'label_values(orbitmq_queue_max_offset{broker=~"$broker"}, topic)'),
    ("group", "Group", 'label_values(orbitmq_consumer_offset{broker=~"$broker", topic=~"$topic"}, group)'),
)
"""(name, label, query) of the query variables every dashboard has, besides ``datasource``."""

TAG = "orbitmq"
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


def _rate(selector: str, by: str) -> str:
    return f"sum by ({by}) (rate({selector}{RI}))"


def _increase(selector: str, by: str) -> str:
    return f"sum by ({by}) (increase({selector}{RI}))"


def _quantiles(family: str, selector: str, by: str = "") -> tuple[Query, ...]:
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


def _group_lag() -> str:
    """Each (group, broker)'s lag summed over its queues, the larger of the master's and its
    slaves' totals (they all expose it). Summing per scrape target first keeps the aggregation
    small: at 100 topics x 8 queues x 10 groups the selector still reads 16 000 series, but each
    step groups them into 20 sums, not 8 000 maxima."""
    lag = f"orbitmq_consumer_lag{{{B}, {T}, {G}}}"
    return f"max by (group, broker) (sum by (group, broker, instance) ({lag}))"


def _membership_changes() -> Panel:
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


def _per_broker(family: str) -> str:
    """A broker gauge without labels, named by the broker it was scraped from."""
    return f"{family} * on(job, instance) group_left(broker, broker_id, role) orbitmq_broker_role{{{B}}}"


# -- the dashboards --------------------------------------------------------------------------


def overview() -> list[tuple[str, list[Panel]]]:
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
                    Query(_rate(f"orbitmq_messages_put_total{{{B}, {T}}}", "topic"), "{{topic}}"),
                    unit="msg/s",
                ),
                ts(
                    "Consume rate by group",
                    Query(_rate(f"orbitmq_messages_got_total{{{B}, {T}, {G}}}", "group"), "{{group}}"),
                    unit="msg/s",
                    description="Messages returned by pulls, over the topics selected (pick a topic to "
                    "see its consumers alone): one series per group, however many topics it reads.",
                ),
                ts("Send latency", *_quantiles("orbitmq_send_latency_seconds", B), unit="s"),
                ts(
                    "Pull latency",
                    *_quantiles("orbitmq_pull_latency_seconds", B),
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
                        _rate(
                            f'orbitmq_consume_results_total{{{G}, {T}, status!~"CONSUME_SUCCESS|SUCCESS"}}',
                            "status",
                        ),
                        "consume {{status}}",
                    ),
                    Query(
                        _rate('orbitmq_nameserver_route_queries_total{outcome="not_found"}', "outcome"),
                        "route {{outcome}}",
                    ),
                    Query(
                        _rate(f'orbitmq_queue_lock_events_total{{{B}, event="rejected"}}', "event"),
                        "lock {{event}}",
                    ),
                    Query("sum(rate(orbitmq_nameserver_brokers_expired_total" + RI + "))", "brokers expired"),
                    Query(_rate("orbitmq_operator_reconcile_errors_total", "kind"), "operator {{kind}}"),
                    unit="ops",
                    description="Listener failures, unknown-topic route lookups, refused queue locks, "
                    "brokers dropped for missed heartbeats and failed operator reconciles.",
                ),
                ts(
                    "Route lookups",
                    Query(_rate("orbitmq_nameserver_route_queries_total", "outcome"), "{{outcome}}"),
                    unit="ops",
                ),
            ],
        ),
    ]


def topics_and_groups() -> list[tuple[str, list[Panel]]]:
    queue = "topic, queue, broker"
    return [
        (
            "Offsets",
            [
                table_panel(
                    "Committed offset and lag per queue",
                    Query(f"max by (group, {queue}) (orbitmq_consumer_offset{{{B}, {T}, {G}}})"),
                    Query(f"max by (group, {queue}) (orbitmq_consumer_lag{{{B}, {T}, {G}}})"),
                    values=("committed offset", "lag"),
                    sort_by="lag",
                    span=24,
                    description="Each group's committed offset and lag on every queue now (broker view; "
                    "the larger of a master's and its slaves' figures), largest lag first. An instant "
                    "query: one row per (group, topic, queue) reads fast at any size, where a time "
                    "series per queue would not (8 000 series at 100 topics x 8 queues x 10 groups).",
                ),
                ts(
                    "Max offset per queue",
                    Query(
                        f"max by ({queue}) (orbitmq_queue_max_offset{{{B}, {T}}})",
                        "{{topic}} {{broker}}:{{queue}}",
                    ),
                    description="The next offset of each consume queue (messages ever stored in it).",
                ),
                ts(
                    "Consumer lag by group",
                    Query(f"sum by (group) ({_group_lag()})", "{{group}}"),
                    description="Messages stored but not yet committed by each group (broker view), over "
                    "the topics selected: pick a topic to see its lag alone; the per-queue figures are "
                    "in the table above.",
                ),
                ts(
                    "Lag growth",
                    Query(f"deriv((sum by (group) ({_group_lag()}))[$__rate_interval:])", "{{group}}"),
                    unit="msg/s",
                    description="How fast each group's lag (over the topics selected) grows: above zero "
                    "the group falls behind. The slope of the summed lag (a subquery at the rule "
                    "evaluation interval, which must be at most half of $__rate_interval): about the "
                    "sum of every queue's slope, at a fraction of its cost.",
                ),
                ts(
                    "Client-side lag",
                    Query(
                        f"sum by (group, topic) (orbitmq_client_consumer_lag{{{B}, {T}, {G}}})",
                        "{{group}} / {{topic}}",
                    ),
                    description="Messages between each client's committed offset and the queue's max "
                    "offset, as the consumers see it.",
                ),
                table_panel(
                    "Client committed offset",
                    Query(f"max by (group, {queue}) (orbitmq_client_committed_offset{{{B}, {T}, {G}}})"),
                    value="committed offset",
                    span=24,
                    description="The offset each consumer last committed on each of its queues, now (as "
                    "the clients see it).",
                ),
            ],
        ),
        (
            "Consumption",
            [
                ts(
                    "Consume results",
                    Query(
                        _rate(f"orbitmq_consume_results_total{{{G}, {T}}}", "group, status"),
                        "{{group}} {{status}}",
                    ),
                    unit="msg/s",
                ),
                ts(
                    "Consume latency",
                    *_quantiles("orbitmq_consume_latency_seconds", G, "group"),
                    unit="s",
                    description="Listener run time.",
                ),
                ts(
                    "Retries",
                    Query(
                        _rate(
                            f'orbitmq_consume_results_total{{{G}, {T}, status=~"RECONSUME_LATER|SUSPEND.*"}}',
                            "group, status",
                        ),
                        "{{group}} {{status}}",
                    ),
                    Query(
                        "sum by (topic) (max by (topic, queue, broker) "
                        f'(delta(orbitmq_queue_max_offset{{{B}, topic=~"%RETRY%$group"}}{RI})))',
                        "{{topic}} stored",
                    ),
                    unit="msg/s",
                    description="Messages a listener asked to retry, and messages reaching the groups' "
                    "retry topics once their delay is over.",
                ),
                ts(
                    "Dead letters",
                    Query(
                        "sum by (topic) (max by (topic, queue, broker) "
                        f'(orbitmq_queue_max_offset{{{B}, topic=~"%DLQ%$group"}}))',
                        "{{topic}}",
                    ),
                    description="Messages moved to the groups' dead-letter topics after their last retry.",
                ),
                ts(
                    "Timed messages",
                    Query(f"max by (broker) (orbitmq_timer_pending{{{B}}})", "{{broker}} waiting"),
                    Query(
                        "sum by (topic) (max by (topic, broker) "
                        f"(rate(orbitmq_timer_delivered_total{{{B}, {T}}}{RI})))",
                        "{{topic}} delivered/s",
                    ),
                    description="Messages waiting in the brokers' timers for their delivery time "
                    "(deliver_at_ms/delay_ms, RocketMQ 5 delivery timestamps), and the rate at which "
                    "they reach their topics.",
                ),
                ts(
                    "Timer lateness",
                    *_quantiles("orbitmq_timer_lateness_seconds", B, "broker"),
                    unit="s",
                    description="How long after its requested time each timed message was delivered "
                    "(never early; the timer looks at least every timer_precision_ms).",
                ),
                ts(
                    "Flow-control pauses",
                    Query(
                        _rate(f"orbitmq_flow_control_pauses_total{{{G}}}", "group, reason"),
                        "{{group}} {{reason}}",
                    ),
                    unit="ops",
                ),
                _membership_changes(),
            ],
        ),
        (
            "Sidecar",
            [
                ts(
                    "Sidecar deliveries",
                    Query(
                        _rate(f"orbitmq_sidecar_deliveries_total{{{G}}}", "group, kind"), "{{group}} {{kind}}"
                    ),
                    Query(
                        _rate(f"orbitmq_sidecar_acks_total{{{G}}}", "group, status"),
                        "{{group}} ack {{status}}",
                    ),
                    unit="msg/s",
                ),
                ts(
                    "Sidecar in flight and waiting",
                    Query(f"sum by (group) (orbitmq_sidecar_in_flight{{{G}}})", "{{group}} in flight"),
                    Query(f"sum by (group) (orbitmq_sidecar_waiting{{{G}}})", "{{group}} waiting"),
                ),
            ],
        ),
        (
            "RocketMQ 5 clients (orbitmq proxy, POP)",
            [
                ts(
                    "POP in flight",
                    Query(
                        "sum by (group) (max by (group, topic, broker) "
                        f"(orbitmq_pop_in_flight{{{B}, {T}, {G}}}))",
                        "{{group}}",
                    ),
                    description="Messages received by RocketMQ 5 consumers (ReceiveMessage, a broker POP) "
                    "and not acked yet: invisible, or expired and waiting to be handed out again. The "
                    "larger of a master's and its slave's figure (the slave replays the POP log).",
                ),
                ts(
                    "POP acks, revives and dead letters",
                    *(
                        Query(
                            f"sum by (group) (max by (group, topic, broker) "
                            f"(rate(orbitmq_pop_{family}_total{{{B}, {T}, {G}}}{RI})))",
                            f"{{{{group}}}} {label}",
                        )
                        for family, label in (
                            ("acks", "acked"),
                            ("revives", "revived"),
                            ("dead_letters", "DLQ"),
                        )
                    ),
                    unit="msg/s",
                    description="Acks; deliveries whose invisibility expired and that were handed out "
                    "again (the consumer was too slow, crashed, or did not ack); messages moved to the "
                    "dead-letter topic after the group's maximum delivery attempts.",
                ),
                ts(
                    "Proxy requests",
                    Query(
                        'sum by (rpc, code) (rate(orbitmq_proxy_requests_total{code!="OK"}' + RI + "))",
                        "{{rpc}} {{code}}",
                    ),
                    Query("sum by (rpc) (rate(orbitmq_proxy_requests_total" + RI + "))", "{{rpc}} all"),
                    unit="reqps",
                    description="apache.rocketmq.v2 requests per RPC, and those answered with another "
                    "code than OK by code (MESSAGE_NOT_FOUND is a ReceiveMessage long poll that found "
                    "nothing: normal when idle).",
                ),
                ts(
                    "Proxy latency",
                    *_quantiles("orbitmq_proxy_request_seconds", 'rpc!="ReceiveMessage"', "rpc"),
                    unit="s",
                    description="Time from a v2 request to its answer, per RPC (ReceiveMessage left out: "
                    "its long poll waits up to the client's await duration by design).",
                ),
                ts(
                    "RocketMQ 5 clients",
                    Query("sum by (client_type) (orbitmq_proxy_clients)", "{{client_type}}"),
                    description="Clients with an open Telemetry stream to a proxy, by type.",
                ),
            ],
        ),
    ]


def locks_and_rebalances() -> list[tuple[str, list[Panel]]]:
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
                        _rate(f"orbitmq_queue_lock_events_total{{{B}, {G}}}", "group, event"),
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
                _membership_changes(),
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
                        _increase(f"orbitmq_rebalance_events_total{{{G}, {T}}}", "group, outcome"),
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
                    *_quantiles("orbitmq_rebalance_duration_seconds", G, "group"),
                    unit="s",
                ),
            ],
        ),
    ]


def storage_and_ha() -> list[tuple[str, list[Panel]]]:
    legend = "{{broker}} {{role}} ({{instance}})"
    return [
        (
            "Storage",
            [
                ts("Commit-log bytes", Query(_per_broker("orbitmq_commitlog_bytes"), legend), unit="bytes"),
                ts(
                    "Commit-log disk use",
                    Query(_per_broker("orbitmq_commitlog_disk_bytes"), legend),
                    unit="bytes",
                    description="Disk space of the commit-log segments.",
                ),
                ts(
                    "Commit-log disk growth",
                    Query(_per_broker(f"deriv(orbitmq_commitlog_disk_bytes{RI})"), legend),
                    unit="Bps",
                ),
                ts(
                    "Store disk use %",
                    Query(
                        f"(1 - orbitmq_store_disk_available_bytes{{{B}}}"
                        f" / orbitmq_store_disk_total_bytes{{{B}}})"
                        " * on(job, instance) group_left(broker_id, role) orbitmq_broker_role",
                        legend,
                    ),
                    unit="percentunit",
                    description="Share of the file system holding the broker's data that the broker can "
                    "no longer write (1 - available / size: space reserved for root counts as used). "
                    "The OrbitMQCommitLogDiskFilling alert fires above 85 %.",
                ),
                ts(
                    "Commit-log flush latency",
                    *_quantiles("orbitmq_commitlog_flush_seconds", B, "broker, instance"),
                    unit="s",
                    description="Time of each fsync of the commit log: under SYNC_FLUSH a send waits "
                    "for one (group commit, shared by the sends that arrive meanwhile); under "
                    "ASYNC_FLUSH the periodic flush. A growing p99 is a slow or saturated disk.",
                ),
                ts(
                    "Dispatch lag",
                    Query(_per_broker("orbitmq_dispatch_lag_bytes"), legend),
                    unit="bytes",
                    description="Commit-log bytes not yet in the consume queues.",
                ),
                ts("Long polls held", Query(_per_broker("orbitmq_long_polls_held"), legend)),
            ],
        ),
        (
            "High availability",
            [
                ts(
                    "Replication lag per slave",
                    Query(
                        f"max by (broker, slave) (orbitmq_replication_lag_bytes{{{B}}})",
                        "{{broker}} {{slave}}",
                    ),
                    unit="bytes",
                    description="Commit-log bytes each slave is behind its master (the larger of the "
                    "master's and the slave's own figure).",
                ),
                ts(
                    "Failovers",
                    Query(
                        _increase(f"orbitmq_broker_role_changes_total{{{B}}}", "broker, change"),
                        "{{broker}} {{change}}",
                    ),
                    Query(
                        _increase(
                            'orbitmq_operator_failovers_total{cluster=~"$cluster"}', "cluster, broker_group"
                        ),
                        "operator: {{cluster}} {{broker_group}}",
                    ),
                    description="Role changes applied by brokers (promoted, demoted) and promotions the "
                    "operator carried out.",
                ),
                ts(
                    "Registered brokers",
                    Query(
                        "sum by (cluster, broker_name) "
                        '(orbitmq_nameserver_brokers{cluster=~"$cluster", broker_name=~"$broker"})',
                        "{{cluster}} {{broker_name}}",
                    ),
                    description="Live broker addresses per broker group in the name servers.",
                ),
                ts(
                    "Name-server heartbeats and expiries",
                    Query("sum(rate(orbitmq_nameserver_registrations_total" + RI + "))", "registrations"),
                    Query("sum(rate(orbitmq_nameserver_brokers_expired_total" + RI + "))", "expired"),
                    unit="ops",
                ),
            ],
        ),
    ]


def operator() -> list[tuple[str, list[Panel]]]:
    return [
        (
            "Reconciles",
            [
                ts(
                    "Reconciles",
                    Query(_rate("orbitmq_operator_reconcile_duration_seconds_count", "kind"), "{{kind}}"),
                    unit="ops",
                ),
                ts(
                    "Reconcile errors",
                    Query(
                        _rate("orbitmq_operator_reconcile_errors_total", "kind, reason"),
                        "{{kind}} {{reason}}",
                    ),
                    unit="ops",
                ),
                ts(
                    "Reconcile duration",
                    *_quantiles("orbitmq_operator_reconcile_duration_seconds", "", "kind"),
                    unit="s",
                ),
                ts(
                    "Object writes",
                    Query(_rate("orbitmq_operator_object_writes_total", "kind"), "{{kind}}"),
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
                        _increase(
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


@dataclass(frozen=True)
class Board:
    name: str
    uid: str
    title: str
    description: str
    rows: Callable[[], list[tuple[str, list[Panel]]]]


BOARDS: tuple[Board, ...] = (
    Board(
        "overview",
        "orbitmq-overview",
        "orbitmq / Overview",
        "Brokers, roles, traffic, latency, errors.",
        overview,
    ),
    Board(
        "topics-and-groups",
        "orbitmq-topics-groups",
        "orbitmq / Topics and consumer groups",
        "Offsets, lag, consume results, retries and dead letters.",
        topics_and_groups,
    ),
    Board(
        "locks-and-rebalances",
        "orbitmq-locks-rebalances",
        "orbitmq / Locks and rebalances",
        "Queue lock owners and events, rebalances, queues per client.",
        locks_and_rebalances,
    ),
    Board(
        "storage-and-ha",
        "orbitmq-storage-ha",
        "orbitmq / Storage and HA",
        "Commit log, fsync latency, disk space, dispatch, replication, failovers.",
        storage_and_ha,
    ),
    Board(
        "operator",
        "orbitmq-operator",
        "orbitmq / Operator",
        "Reconciles, errors, durations, failovers.",
        operator,
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
