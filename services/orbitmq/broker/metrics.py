"""Broker metrics (DESIGN §9): counters and histograms updated by handlers, plus gauges read
from the store, offset table and lock table at scrape time (so they are never stale)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from orbitmq.broker.server import Broker

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 30)


class BrokerMetrics:
    def __init__(self, registry: CollectorRegistry, broker_name: str) -> None:
        self.broker_name = broker_name
        self.role_changes = Counter(
            "orbitmq_broker_role_changes_total",
            "Role changes applied (promoted, demoted): failovers seen by this broker",
            ["broker", "change"],
            registry=registry,
        )
        self.messages_put = Counter(
            "orbitmq_messages_put_total", "Messages stored by sends", ["topic", "broker"], registry=registry
        )
        self.messages_got = Counter(
            "orbitmq_messages_got_total",
            "Messages returned by pulls",
            ["group", "topic", "broker"],
            registry=registry,
        )
        self.send_latency = Histogram(
            "orbitmq_send_latency_seconds",
            "Time to handle a send",
            ["broker"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.pull_latency = Histogram(
            "orbitmq_pull_latency_seconds",
            "Time to handle a pull, long-poll waiting included",
            ["broker"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.membership_pushes = Counter(
            "orbitmq_consumer_membership_changes_total",
            "Consumer group membership changes pushed to clients",
            ["group", "broker"],
            registry=registry,
        )

        self._send_latency = self.send_latency.labels(broker_name)
        self._pull_latency = self.pull_latency.labels(broker_name)
        self._put_by_topic: dict[str, Counter] = {}
        self._got_by_key: dict[tuple[str, str], Counter] = {}

    def observe_send(self, topic: str, count: int, seconds: float) -> None:
        counter = self._put_by_topic.get(topic)
        if counter is None:  # labels() is a locked lookup; keep the children
            counter = self._put_by_topic[topic] = self.messages_put.labels(topic, self.broker_name)
        counter.inc(count)
        self._send_latency.observe(seconds)

    def observe_pull(self, group: str, topic: str, count: int, seconds: float) -> None:
        if count:
            counter = self._got_by_key.get((group, topic))
            if counter is None:
                counter = self._got_by_key[(group, topic)] = self.messages_got.labels(
                    group, topic, self.broker_name
                )
            counter.inc(count)
        self._pull_latency.observe(seconds)


class BrokerStateCollector(Collector):
    """Gauges computed from live broker state when Prometheus scrapes."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        b = self._broker
        if not b.store.is_open:
            return
        name = b.settings.broker_name
        low = GaugeMetricFamily(
            "orbitmq_queue_min_offset", "Smallest queue offset", labels=["topic", "queue", "broker"]
        )
        high = GaugeMetricFamily(
            "orbitmq_queue_max_offset", "Next queue offset", labels=["topic", "queue", "broker"]
        )
        for topic, queue_id in b.store.queues():
            labels = [topic, str(queue_id), name]
            low.add_metric(labels, b.store.min_offset_in_queue(topic, queue_id))
            high.add_metric(labels, b.store.max_offset_in_queue(topic, queue_id))
        yield low
        yield high
        committed = GaugeMetricFamily(
            "orbitmq_consumer_offset",
            "Committed consumer offset",
            labels=["group", "topic", "queue", "broker"],
        )
        lag = GaugeMetricFamily(
            "orbitmq_consumer_lag", "Messages not yet consumed", labels=["group", "topic", "queue", "broker"]
        )
        for key, offsets in b.offsets.snapshot().items():
            topic, _, group = key.partition("@")
            for queue_id, offset in offsets.items():
                labels = [group, topic, str(queue_id), name]
                committed.add_metric(labels, offset)
                lag.add_metric(labels, max(0, b.store.max_offset_in_queue(topic, queue_id) - offset))
        yield committed
        yield lag
        owners = GaugeMetricFamily(
            "orbitmq_queue_lock_owner",
            "1 while the client holds the queue lock",
            labels=["group", "topic", "broker", "queue", "client"],
        )
        for group, (topic, broker_name, queue_id), client in b.locks.snapshot():
            owners.add_metric([group, topic, broker_name, str(queue_id), client], 1)
        yield owners
        events = CounterMetricFamily(
            "orbitmq_queue_lock_events", "Queue lock events", labels=["event", "broker"]
        )
        for event in ("acquired", "renewed", "rejected", "expired"):
            events.add_metric([event, name], getattr(b.locks, event))
        yield events
        yield GaugeMetricFamily("orbitmq_long_polls_held", "Pulls waiting for messages", value=b.holds.held)
        role = GaugeMetricFamily(
            "orbitmq_broker_role",
            "1 for the role the broker acts in now",
            labels=["broker", "broker_id", "role"],
        )
        role.add_metric([name, str(b.broker_id), b.broker_role.value], 1)
        yield role
        epoch = GaugeMetricFamily(
            "orbitmq_broker_epoch", "Role-change epoch the broker acts under", labels=["broker"]
        )
        epoch.add_metric([name], b.epoch)
        yield epoch
        replication = GaugeMetricFamily(
            "orbitmq_replication_lag_bytes",
            "Commit-log bytes a slave is behind its master (on a master: per slave; on a slave: its own)",
            labels=["broker", "slave"],
        )
        if b.is_slave:
            behind = b.replication.lag_bytes if b.replication is not None else 0
            replication.add_metric([name, b.address], behind)
        else:
            end = b.store.commitlog.max_offset
            for link in b.replicas.slaves.values():
                replication.add_metric([name, link.address], max(0, end - link.acked_offset))
        yield replication
        commitlog = b.store.commitlog
        yield GaugeMetricFamily(
            "orbitmq_commitlog_bytes",
            "Bytes of log between min and max offset",
            value=commitlog.max_offset - commitlog.min_offset,
        )
        yield GaugeMetricFamily(
            "orbitmq_commitlog_disk_bytes",
            "Disk space of the commit-log segments",
            value=sum(s.size for s in commitlog.segments),
        )
        yield GaugeMetricFamily(
            "orbitmq_dispatch_lag_bytes",
            "Log bytes not yet in consume queues",
            value=b.store.dispatcher.lag_bytes,
        )
