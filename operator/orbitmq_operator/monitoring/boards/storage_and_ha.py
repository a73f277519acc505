"""Storage and HA: commit log, fsync latency, disk space, dispatch, replication and failovers."""

from __future__ import annotations

from orbitmq_operator.monitoring.panels import (
    RI,
    B,
    Query,
    Rows,
    increase,
    per_broker,
    quantiles,
    ts,
)


def rows() -> Rows:
    legend = "{{broker}} {{role}} ({{instance}})"
    return [
        (
            "Storage",
            [
                ts("Commit-log bytes", Query(per_broker("orbitmq_commitlog_bytes"), legend), unit="bytes"),
                ts(
                    "Commit-log disk use",
                    Query(per_broker("orbitmq_commitlog_disk_bytes"), legend),
                    unit="bytes",
                    description="Disk space of the commit-log segments.",
                ),
                ts(
                    "Commit-log disk growth",
                    Query(per_broker(f"deriv(orbitmq_commitlog_disk_bytes{RI})"), legend),
                    unit="Bps",
                ),
                ts(
                    "Store disk use %",
                    Query(
                        f"orbitmq_store_disk_used_ratio{{{B}}}"
                        " * on(job, instance) group_left(broker_id, role) orbitmq_broker_role",
                        legend,
                    ),
                    unit="percentunit",
                    description="Used share of the file system holding the broker's data, as the broker "
                    "reads it every second (df's Use%: root's reserved blocks left out). "
                    "Past 85 % (disk_space_clean_forcibly_ratio) the broker deletes its oldest "
                    "segments before their retention time, past 90 % (disk_space_warning_level_ratio) "
                    "it refuses sends with DISK_FULL. The OrbitMQCommitLogDiskFilling alert fires "
                    "above 85 %.",
                ),
                ts(
                    "Sends refused: disk full",
                    Query(
                        increase(f"orbitmq_store_disk_full_refusals_total{{{B}}}", "broker, instance"),
                        "{{broker}} ({{instance}})",
                    ),
                    description="Sends each broker process refused with DISK_FULL (its disk past "
                    "disk_space_warning_level_ratio, or out of space). OrbitMQBrokerDiskFull fires "
                    "after a minute of it.",
                ),
                ts(
                    "Commit-log flush latency",
                    *quantiles("orbitmq_commitlog_flush_seconds", B, "broker, instance"),
                    unit="s",
                    description="Time of each fsync of the commit log: under SYNC_FLUSH a send waits "
                    "for one (group commit, shared by the sends that arrive meanwhile); under "
                    "ASYNC_FLUSH the periodic flush. A growing p99 is a slow or saturated disk.",
                ),
                ts(
                    "Dispatch lag",
                    Query(per_broker("orbitmq_dispatch_lag_bytes"), legend),
                    unit="bytes",
                    description="Commit-log bytes not yet in the consume queues.",
                ),
                ts("Long polls held", Query(per_broker("orbitmq_long_polls_held"), legend)),
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
                        increase(f"orbitmq_broker_role_changes_total{{{B}}}", "broker, change"),
                        "{{broker}} {{change}}",
                    ),
                    Query(
                        increase(
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
