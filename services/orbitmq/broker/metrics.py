"""Broker metrics (docs/reference/metrics.md): counters and histograms updated by handlers, plus gauges read
from the store, offset table and lock table at scrape time (so they are never stale).

Hot-path figures (sends, pulls, commit-log fsyncs) are plain tallies (:class:`_Tally`,
:class:`~orbitmq.common.tally.LatencyTally`) that the collectors below turn into Prometheus
families when scraped; the store keeps its own fsync tally, since it imports no Prometheus.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from orbitmq.broker.consumers import ClientRegistry, MembershipChange
from orbitmq.broker.locks import LockEvent, LockTable
from orbitmq.common.tally import LatencyTally

if TYPE_CHECKING:
    from orbitmq.broker.server import Broker
    from orbitmq.store.config import StoreConfig
    from orbitmq.store.disk import DiskGuard

log = logging.getLogger(__name__)

Kind = TypeVar("Kind", bound=enum.Enum)

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

        self.messages_put = _Tally()
        """Messages stored by sends, by topic."""
        self.messages_got = _Tally()
        """Messages returned by pulls, by (group, topic)."""
        self.send_latency = LatencyTally(LATENCY_BUCKETS)
        self.pull_latency = LatencyTally(LATENCY_BUCKETS)
        registry.register(_HotPathCollector(self))

    def observe_send(self, topic: str, count: int, seconds: float) -> None:
        self.messages_put.add((topic,), count)
        self.send_latency.observe(seconds)

    def observe_pull(self, group: str, topic: str, count: int, seconds: float) -> None:
        if count:
            self.messages_got.add((group, topic), count)
        self.pull_latency.observe(seconds)


class _Tally:
    """Counts by label values in a dict of plain ints.

    Every send and pull bumps these; prometheus_client's own counters take a lock (and a
    histogram three) per update, a few microseconds of a send that costs tens. The event loop
    is the only writer and :class:`_HotPathCollector` reads them when Prometheus scrapes.
    """

    def __init__(self) -> None:
        self.counts: dict[tuple[str, ...], int] = {}

    def add(self, labels: tuple[str, ...], amount: int) -> None:
        counts = self.counts
        counts[labels] = counts.get(labels, 0) + amount

    def get(self, *labels: str) -> int:
        return self.counts.get(labels, 0)


def histogram_buckets(tally: LatencyTally) -> list[tuple[str, float]]:
    """A tally's Prometheus buckets: (upper bound as exposed, observations at or below it)."""
    bounds = [*map(floatToGoString, tally.bounds), "+Inf"]
    return list(zip(bounds, map(float, tally.cumulative()), strict=True))


class _HotPathCollector(Collector):
    """Exports the send and pull tallies as the counters and histograms they stand for."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        m, name = self._metrics, self._metrics.broker_name
        put = CounterMetricFamily(
            "orbitmq_messages_put", "Messages stored by sends", labels=["topic", "broker"]
        )
        for (topic,), count in list(m.messages_put.counts.items()):
            put.add_metric([topic, name], count)
        yield put
        got = CounterMetricFamily(
            "orbitmq_messages_got", "Messages returned by pulls", labels=["group", "topic", "broker"]
        )
        for (group, topic), count in list(m.messages_got.counts.items()):
            got.add_metric([group, topic, name], count)
        yield got
        for metric, tally, doc in (
            ("orbitmq_send_latency_seconds", m.send_latency, "Time to handle a send"),
            (
                "orbitmq_pull_latency_seconds",
                m.pull_latency,
                "Time to handle a pull, long-poll waiting included",
            ),
        ):
            family = HistogramMetricFamily(metric, doc, labels=["broker"])
            family.add_metric([name], histogram_buckets(tally), sum_value=tally.total_seconds)
            yield family


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
        flushes = HistogramMetricFamily(
            "orbitmq_commitlog_flush_seconds",
            "Time of each commit-log fsync (SYNC_FLUSH: a group commit; ASYNC_FLUSH: a periodic flush)",
            labels=["broker"],
        )
        tally = commitlog.flush_latency
        flushes.add_metric([name], histogram_buckets(tally), sum_value=tally.total_seconds)
        yield flushes
        yield from _disk_gauges(commitlog.directory, name)
        yield from _disk_guard_metrics(b.store.disk, b.store.config, name)


class ConsumerGroupCollector(Collector):
    """What the broker sees of its consumer groups, read from the client registry and the lock
    table when scraped: members online, membership changes and the rebalances they pushed, the
    owner of each queue lock and the lock events. The broker sees every consumer, so these
    series exist whether or not the consumers export metrics of their own (``orbitmq consume``
    and most applications do not); the client-side families add detail where they do.

    Every broker a client heartbeats counts its joins and leaves (a master and its slaves, each
    broker group): a dashboard takes the largest figure per group, not the sum.
    """

    def __init__(self, broker_name: str, clients: ClientRegistry, locks: LockTable) -> None:
        self._name = broker_name
        self._clients = clients
        self._locks = locks

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        name, clients = self._name, self._clients
        members = GaugeMetricFamily(
            "orbitmq_consumer_connections",
            "Clients online in the consumer group (heartbeating this broker)",
            labels=["group", "broker"],
        )
        for group, count in sorted(clients.members_per_group().items()):
            members.add_metric([group, name], count)
        yield members
        changes = CounterMetricFamily(
            "orbitmq_consumer_membership_changes",
            "Clients that joined, left or expired from the consumer group",
            labels=["group", "change", "broker"],
        )
        for group, change, count in _every_kind(clients.membership_changes, MembershipChange):
            changes.add_metric([group, change, name], count)
        yield changes
        pushed = CounterMetricFamily(
            "orbitmq_rebalance_notifications",
            "Consumer-ids-changed notifications pushed to group members: each makes one rebalance now",
            labels=["group", "broker"],
        )
        # from the group's first membership change, at 0 until one is pushed: whether the first
        # join pushes anything depends on who else is online, and a series that appears later
        # made the series count per group vary with timing
        notified = clients.rebalance_notifications
        for group in sorted({group for group, _ in clients.membership_changes} | set(notified)):
            pushed.add_metric([group, name], notified.get(group, 0))
        yield pushed
        owners = GaugeMetricFamily(
            "orbitmq_queue_lock_owner",
            "1 while the client holds the queue lock",
            labels=["group", "topic", "broker", "queue", "client"],
        )
        for group, (topic, broker_name, queue_id), client in self._locks.snapshot():
            owners.add_metric([group, topic, broker_name, str(queue_id), client], 1)
        yield owners
        events = CounterMetricFamily(
            "orbitmq_queue_lock_events", "Queue lock events", labels=["group", "event", "broker"]
        )
        for group, event, count in _every_kind(self._locks.events, LockEvent):
            events.add_metric([group, event, name], count)
        yield events


def _every_kind(counts: Mapping[tuple[str, Kind], int], kinds: type[Kind]) -> Iterator[tuple[str, str, int]]:
    """(group, kind, count) for every kind of every group counted at all, 0 where none yet: a
    counter's series exists from the group's first event, so the first of each other kind shows
    as an increase and the series count does not creep up as kinds occur."""
    for group in sorted({group for group, _ in counts}):
        for kind in kinds:
            yield group, kind.value, counts.get((group, kind), 0)


def _disk_gauges(directory: Path, broker: str) -> Iterator[GaugeMetricFamily]:
    """Size and space left of the file system holding the commit log, read when scraped.

    *Available* is what an unprivileged process may still write (``statvfs``'s ``f_bavail``,
    what ``df`` shows as Avail), not ``f_bfree``, which counts the blocks ext4 reserves for root:
    the broker runs as an ordinary user and is stopped by the smaller figure. A file system that
    cannot be read leaves both gauges out of this scrape (and logs why) instead of failing the
    whole scrape.
    """
    try:
        stats = os.statvfs(directory)
    except OSError as error:
        log.warning("no disk gauges for %s: statvfs failed: %s", directory, error)
        return
    total = GaugeMetricFamily(
        "orbitmq_store_disk_total_bytes",
        "Size of the file system holding the commit log",
        labels=["broker"],
    )
    total.add_metric([broker], stats.f_blocks * stats.f_frsize)
    yield total
    available = GaugeMetricFamily(
        "orbitmq_store_disk_available_bytes",
        "Space the broker can still write on the file system holding the commit log",
        labels=["broker"],
    )
    available.add_metric([broker], stats.f_bavail * stats.f_frsize)
    yield available


def _disk_guard_metrics(
    disk: DiskGuard, config: StoreConfig, broker: str
) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """What the store's disk check last read and did (see :mod:`orbitmq.store.disk`): the used
    ratio beside the ratio at which sends are refused (an alert compares the two, so a broker
    set to another ratio is judged by its own), whether sends are refused now, and how many were."""
    state = disk.state
    ratio = GaugeMetricFamily(
        "orbitmq_store_disk_used_ratio",
        "Used share of the file system holding the store, as of the last disk check",
        labels=["broker"],
    )
    ratio.add_metric([broker], state.used_ratio)
    yield ratio
    limit = GaugeMetricFamily(
        "orbitmq_store_disk_full_ratio",
        "disk_space_warning_level_ratio: past this used share the broker refuses sends",
        labels=["broker"],
    )
    limit.add_metric([broker], config.disk_space_warning_level_ratio)
    yield limit
    full = GaugeMetricFamily(
        "orbitmq_store_disk_full",
        "1 while sends are refused because the store's disk is full",
        labels=["broker"],
    )
    full.add_metric([broker], 1 if disk.refusal is not None else 0)
    yield full
    refused = CounterMetricFamily(
        "orbitmq_store_disk_full_refusals",
        "Sends refused with DISK_FULL since the broker started",
        labels=["broker"],
    )
    refused.add_metric([broker], disk.refused_writes)
    yield refused


class PopCollector(Collector):
    """POP consumption figures (see :mod:`orbitmq.broker.pop`), read from the broker's
    :class:`~orbitmq.broker.pop.service.PopService` when scraped: messages in flight now (0 for
    every group and topic the POP state knows: a series that vanished at 0 would stop a graph's
    line and give an alert nothing to compare), and acks, revives (expired messages delivered
    again) and dead letters since the start."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        b = self._broker
        pop = getattr(b, "pop", None)
        if pop is None:
            return
        name = b.settings.broker_name
        labels = ["group", "topic", "broker"]
        in_flight = GaugeMetricFamily(
            "orbitmq_pop_in_flight", "POP deliveries not yet acked (invisible or expired)", labels=labels
        )
        for (group, topic), count in sorted(pop.state.in_flight_by_topic().items()):
            in_flight.add_metric([group, topic, name], count)
        yield in_flight
        for metric, help_text, tally in (
            ("orbitmq_pop_acks", "POP deliveries acked", pop.acks),
            ("orbitmq_pop_revives", "POP deliveries expired and handed out again", pop.revives),
            ("orbitmq_pop_dead_letters", "POP messages moved to the dead-letter topic", pop.dead_letters),
        ):
            family = CounterMetricFamily(metric, help_text, labels=labels)
            for (group, topic), count in sorted(tally.items()):
                family.add_metric([group, topic, name], count)
            yield family


class TimerCollector(Collector):
    """Timed delivery figures (see :mod:`orbitmq.broker.timer`), read from the broker's
    :class:`~orbitmq.broker.timer.service.TimerService` when scraped: timers waiting now (a
    slave reports 0: its timers are loaded when it is promoted), deliveries by real topic, and
    how late each was after its requested time."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        timer = getattr(self._broker, "timer", None)
        if timer is None:
            return
        name = self._broker.settings.broker_name
        pending = GaugeMetricFamily(
            "orbitmq_timer_pending", "Timed messages waiting for their delivery time", labels=["broker"]
        )
        pending.add_metric([name], timer.pending)
        yield pending
        delivered = CounterMetricFamily(
            "orbitmq_timer_delivered",
            "Timed messages delivered to their real topic",
            labels=["topic", "broker"],
        )
        for topic, count in sorted(timer.delivered.items()):
            delivered.add_metric([topic, name], count)
        yield delivered
        lateness = HistogramMetricFamily(
            "orbitmq_timer_lateness_seconds",
            "How long after its requested time each timed message was delivered",
            labels=["broker"],
        )
        tally = timer.lateness
        lateness.add_metric([name], histogram_buckets(tally), sum_value=tally.total_seconds)
        yield lateness
