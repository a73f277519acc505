"""Topics and consumer groups: offsets and lag (per queue in instant tables, per group over
time), consume results, retries, dead letters, timed messages, the sidecar and RocketMQ 5 (POP)
clients."""

from __future__ import annotations

from orbitmq_operator.monitoring.panels import (
    RI,
    B,
    G,
    Query,
    Rows,
    T,
    group_lag,
    increase,
    membership_changes,
    quantiles,
    rate,
    table_panel,
    ts,
)


def rows() -> Rows:
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
                    Query(f"sum by (group) ({group_lag()})", "{{group}}"),
                    description="Messages stored but not yet committed by each group (broker view), over "
                    "the topics selected: pick a topic to see its lag alone; the per-queue figures are "
                    "in the table above.",
                ),
                ts(
                    "Lag growth",
                    Query(f"deriv((sum by (group) ({group_lag()}))[$__rate_interval:])", "{{group}}"),
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
                        rate(f"orbitmq_consume_results_total{{{G}, {T}}}", "group, status"),
                        "{{group}} {{status}}",
                    ),
                    unit="msg/s",
                ),
                ts(
                    "Consume latency",
                    *quantiles("orbitmq_consume_latency_seconds", G, "group"),
                    unit="s",
                    description="Listener run time.",
                ),
                ts(
                    "Retries",
                    Query(
                        rate(
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
                    *quantiles("orbitmq_timer_lateness_seconds", B, "broker"),
                    unit="s",
                    description="How long after its requested time each timed message was delivered "
                    "(never early; the timer looks at least every timer_precision_ms).",
                ),
                ts(
                    "Flow-control pauses",
                    Query(
                        rate(f"orbitmq_flow_control_pauses_total{{{G}}}", "group, reason"),
                        "{{group}} {{reason}}",
                    ),
                    unit="ops",
                ),
                membership_changes(),
            ],
        ),
        (
            "Sidecar",
            [
                ts(
                    "Sidecar deliveries",
                    Query(
                        rate(f"orbitmq_sidecar_deliveries_total{{{G}}}", "group, kind"), "{{group}} {{kind}}"
                    ),
                    Query(
                        rate(f"orbitmq_sidecar_acks_total{{{G}}}", "group, status"),
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
                    *quantiles("orbitmq_proxy_request_seconds", 'rpc!="ReceiveMessage"', "rpc"),
                    unit="s",
                    description="Time from a v2 request to its answer, per RPC (ReceiveMessage left out: "
                    "its long poll waits up to the client's await duration by design).",
                ),
                ts(
                    "RocketMQ 5 clients",
                    Query("sum by (client_type) (orbitmq_proxy_clients)", "{{client_type}}"),
                    description="Clients with an open Telemetry stream to a proxy, by type.",
                ),
                ts(
                    "Poison messages (RocketMQ 5 consumers)",
                    Query(
                        increase(f'orbitmq_proxy_invisibility_changes_total{{change="again", {G}}}', "group"),
                        "{{group}} changed again",
                    ),
                    Query(
                        increase(f"orbitmq_proxy_dead_letter_forwards_total{{{G}}}", "group"),
                        "{{group}} forwarded to DLQ",
                    ),
                    description="Messages a group's consumers keep failing: a ChangeInvisibleDuration "
                    "of a message the proxy had already changed (a push consumer's nack after another "
                    "failed delivery), and messages a consumer gave up on and forwarded to the "
                    "group's dead-letter topic (ForwardMessageToDeadLetterQueue: a FIFO push "
                    "consumer past its maximum attempts).",
                ),
            ],
        ),
    ]
