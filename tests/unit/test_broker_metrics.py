"""The send and pull tallies export as the Prometheus counters and histograms they stand for."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from orbitmq.broker.metrics import LATENCY_BUCKETS, BrokerMetrics


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_counts_and_latency_buckets_read_as_prometheus_defines_them() -> None:
    registry = CollectorRegistry()
    metrics = BrokerMetrics(registry, "broker-a")
    metrics.observe_send("Orders", 128, 0.001)  # exactly on a bound: counted in that bucket (le)
    metrics.observe_send("Orders", 1, 0.0011)
    metrics.observe_send("Payments", 2, 100.0)  # above every bound: only +Inf
    metrics.observe_pull("CG", "Orders", 0, 0.2)  # an empty pull counts its latency, no messages
    metrics.observe_pull("CG", "Orders", 32, 0.0001)
    samples = _samples(registry)
    broker = ("broker", "broker-a")
    assert samples[("orbitmq_messages_put_total", (broker, ("topic", "Orders")))] == 129
    assert samples[("orbitmq_messages_put_total", (broker, ("topic", "Payments")))] == 2
    assert samples[("orbitmq_messages_got_total", (broker, ("group", "CG"), ("topic", "Orders")))] == 32

    def bucket(metric: str, le: str) -> float:
        return samples[(f"{metric}_bucket", (broker, ("le", le)))]

    assert bucket("orbitmq_send_latency_seconds", "0.0005") == 0
    assert bucket("orbitmq_send_latency_seconds", "0.001") == 1
    assert bucket("orbitmq_send_latency_seconds", "0.0025") == 2
    assert bucket("orbitmq_send_latency_seconds", str(float(LATENCY_BUCKETS[-1]))) == 2
    assert bucket("orbitmq_send_latency_seconds", "+Inf") == 3
    assert samples[("orbitmq_send_latency_seconds_count", (broker,))] == 3
    assert abs(samples[("orbitmq_send_latency_seconds_sum", (broker,))] - 100.0021) < 1e-9
    assert bucket("orbitmq_pull_latency_seconds", "0.0005") == 1
    assert bucket("orbitmq_pull_latency_seconds", "+Inf") == 2
