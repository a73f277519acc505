"""Client-side consumer metrics (docs/reference/metrics.md), on the host's registry or a private one."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from orbitmq.client.consumer_types import ConsumeStatus, OrderlyStatus
from orbitmq.common.tally import LatencyTally


class ConsumerMetrics:
    def __init__(self, group: str, client_id: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._group, self._client = group, client_id
        self.rebalances = Counter(
            "orbitmq_rebalance_events_total",
            "Rebalances",
            ["group", "topic", "client", "outcome"],
            registry=self.registry,
        )
        self.assigned = Gauge(
            "orbitmq_client_queues_assigned",
            "Queues this client consumes",
            ["group", "topic", "client"],
            registry=self.registry,
        )
        self.rebalance_seconds = Histogram(
            "orbitmq_rebalance_duration_seconds",
            "Time a rebalance took",
            ["group", "client"],
            registry=self.registry,
        )
        self.locked = Gauge(
            "orbitmq_client_locked_queues",
            "Queues locked on the broker, as this client sees it",
            ["group", "topic", "client"],
            registry=self.registry,
        )
        self.committed = Gauge(
            "orbitmq_client_committed_offset",
            "Offset committed by this client",
            ["group", "topic", "broker", "queue"],
            registry=self.registry,
        )
        self.lag = Gauge(
            "orbitmq_client_consumer_lag",
            "Messages between this client's committed offset and the queue's max offset",
            ["group", "topic", "broker", "queue"],
            registry=self.registry,
        )
        self._results: dict[tuple[str, ConsumeStatus | OrderlyStatus], int] = {}
        """Messages by (topic, listener result): plain ints, exported by a collector, because a
        Counter's lock per message costs more than the rest of the bookkeeping."""
        self.latency = LatencyTally(Histogram.DEFAULT_BUCKETS[:-1])
        """Listener run times, exported as the ``orbitmq_consume_latency_seconds`` histogram: a
        Histogram takes three locks an observation, and a quick listener is called per message.
        The event loop is the only writer (listener calls are settled there)."""
        self.registry.register(_ResultsCollector(group, self._results, self.latency))
        self.flow_pauses = Counter(
            "orbitmq_flow_control_pauses_total",
            "Pulls delayed by flow control",
            ["group", "reason"],
            registry=self.registry,
        )

    def consumed(
        self, topic: str, status: ConsumeStatus | OrderlyStatus, seconds: float, messages: int = 1
    ) -> None:
        """One listener call: its messages counted by result, its run time observed."""
        self.count(topic, status, messages)
        self.latency.observe(seconds)

    def count(self, topic: str, status: ConsumeStatus | OrderlyStatus, messages: int) -> None:
        """Messages counted by result, without a run time (a share's calls are observed one by
        one, their messages counted at once)."""
        key = (topic, status)  # not status.value: an enum property read costs more than the rest
        self._results[key] = self._results.get(key, 0) + messages

    def rebalanced(self, topic: str, outcome: str, assigned: int) -> None:
        self.rebalances.labels(self._group, topic, self._client, outcome).inc()
        self.assigned.labels(self._group, topic, self._client).set(assigned)


def start_metrics_server(port: int, metrics: ConsumerMetrics, addr: str = "127.0.0.1") -> int:
    """Serve ``/metrics`` for a consumer's registry; returns the bound port."""
    server, _ = start_http_server(port, addr=addr, registry=metrics.registry)
    return int(server.server_port)


class _ResultsCollector(Collector):
    def __init__(
        self,
        group: str,
        results: dict[tuple[str, ConsumeStatus | OrderlyStatus], int],
        latency: LatencyTally,
    ) -> None:
        self._group = group
        self._results = results
        self._latency = latency

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        family = CounterMetricFamily(
            "orbitmq_consume_results", "Messages by listener result", labels=["group", "topic", "status"]
        )
        for (topic, status), count in list(self._results.items()):
            family.add_metric([self._group, topic, status.value], count)
        yield family
        tally = self._latency
        latency = HistogramMetricFamily(
            "orbitmq_consume_latency_seconds", "Listener run time", labels=["group"]
        )
        bounds = [*map(floatToGoString, tally.bounds), "+Inf"]
        latency.add_metric(
            [self._group],
            list(zip(bounds, map(float, tally.cumulative()), strict=True)),
            sum_value=tally.total_seconds,
        )
        yield latency
