"""The proxy's Prometheus families (the conventions of docs/reference/metrics.md), on its server's registry.

Requests are counted by RPC and by the v2 ``Code`` they were answered with (the code, not a gRPC
status, is what v2 clients act on), and timed by RPC; connected clients are counted at scrape
time from the registry of telemetry streams, so the gauge cannot drift from the truth.

A poison message (one its consumers fail over and over) shows per consumer group: each
``ChangeInvisibleDuration`` is counted as the first change of its message or a repeated one
(the proxy remembers the last :data:`REMEMBERED_CHANGES` messages changed; a push consumer
changes a message once per failed delivery, so "again" is a message failing repeatedly), and
each message a consumer gave up on (``ForwardMessageToDeadLetterQueue``) is counted.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections import OrderedDict
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from orbitmq.proxy.clients import ClientRegistry
from orbitmq.rocketmq_v2 import definition_pb2 as v2

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
REMEMBERED_CHANGES = 10_000
"""Messages whose invisibility this proxy changed, remembered to tell a repeated change from a
first one (about 2 MB; an older one changed again counts as a first change)."""


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
        self.invisibility_changes = Counter(
            "orbitmq_proxy_invisibility_changes_total",
            "ChangeInvisibleDuration of a message by consumer group: its first change through this "
            "proxy, or again (a message failing delivery after delivery: a poison message)",
            ["group", "change"],
            registry=registry,
        )
        self.dead_letter_forwards = Counter(
            "orbitmq_proxy_dead_letter_forwards_total",
            "Messages a consumer gave up on and forwarded to its group's dead-letter topic "
            "(ForwardMessageToDeadLetterQueue), by consumer group",
            ["group"],
            registry=registry,
        )
        self._changed: OrderedDict[tuple[str, str], None] = OrderedDict()
        registry.register(_ClientsCollector(clients))

    def invisibility_changed(self, group: str, message_id: str) -> None:
        """Count a change of ``message_id``'s invisibility, as a first change or a repeated one."""
        key = (group, message_id)
        changed = self._changed
        again = bool(message_id) and key in changed
        if again:
            changed.move_to_end(key)
        elif message_id:
            changed[key] = None
            if len(changed) > REMEMBERED_CHANGES:
                changed.popitem(last=False)
        self.invisibility_changes.labels(group, "again" if again else "first").inc()

    def dead_lettered(self, group: str, message_id: str) -> None:
        self.dead_letter_forwards.labels(group).inc()
        self._changed.pop((group, message_id), None)  # gone for good: nothing to remember

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
