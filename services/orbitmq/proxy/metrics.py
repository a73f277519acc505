"""The proxy's Prometheus families (the conventions of README, "Metrics"), on its server's registry.

Requests are counted by RPC and by the v2 ``Code`` they were answered with (the code, not a gRPC
status, is what v2 clients act on), and timed by RPC; connected clients are counted at scrape
time from the registry of telemetry streams, so the gauge cannot drift from the truth.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from orbitmq.proxy.clients import ClientRegistry
from orbitmq.rocketmq_v2 import definition_pb2 as v2

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry, clients: ClientRegistry) -> None:
        self.requests = Counter(
            "orbitmq_proxy_requests_total",
            "apache.rocketmq.v2 requests by RPC and the v2 status code they were answered with",
            ["rpc", "code"],
            registry=registry,
        )
        self.latency = Histogram(
            "orbitmq_proxy_request_seconds",
            "Time from a v2 request to its answer, by RPC",
            ["rpc"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.checks_forwarded = Counter(
            "orbitmq_proxy_transaction_checks_forwarded_total",
            "Transaction check-backs pushed to a v2 producer's telemetry stream",
            registry=registry,
        )
        self.renewals = Counter(
            "orbitmq_proxy_invisibility_renewals_total",
            "Auto-renewed (push consumer) messages: renewed another slice, released for a gone "
            "client, dropped past the longest hold, or found done or handed out again",
            ["outcome"],
            registry=registry,
        )
        registry.register(_ClientsCollector(clients))

    def renewal(self, outcome: str) -> None:
        self.renewals.labels(outcome).inc()

    def observe(self, rpc: str, code: int, seconds: float) -> None:
        self.requests.labels(rpc, _code_name(code)).inc()
        self.latency.labels(rpc).observe(seconds)


def _code_name(code: int) -> str:
    try:
        return v2.Code.Name(code)  # type: ignore[arg-type]
    except ValueError:
        return str(code)


class _ClientsCollector(Collector):
    def __init__(self, clients: ClientRegistry) -> None:
        self._clients = clients

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "orbitmq_proxy_clients",
            "v2 clients with an open telemetry stream, by client type",
            labels=["client_type"],
        )
        counts = Tally(self._clients.client_types())
        for kind in (v2.PRODUCER, v2.PUSH_CONSUMER, v2.SIMPLE_CONSUMER, v2.PULL_CONSUMER):
            family.add_metric([v2.ClientType.Name(kind)], counts.get(kind, 0))  # type: ignore[arg-type]
        yield family
