"""The route table of a name server (RocketMQ's RouteInfoManager); pure, clock injected.

Four maps, kept consistent by every change so no reader has to repair them:

* cluster → broker names;
* broker name → broker group: cluster and addresses by broker id (0 = master);
* topic → broker name → :class:`QueueData` (queue counts, permission, order flag);
* broker address → :class:`BrokerLive` (last registration, data version, timeout, HA
  address, epoch). Every address of a broker group has exactly one live entry.

Only a master's registration says what queues a broker group serves: a slave copies its
topics from the master, so its registration refreshes liveness and addresses only. A broker
group without a master takes no writes, so losing the master (expiry, unregistration, or the
address coming back under a slave id) drops the group's queue data; losing the last address
drops the group.

Write permission of a broker group can be wiped (RocketMQ's ``wipeWritePerm``, the first step
of draining a group before it is removed): the table keeps the perm each broker registers and
remembers the wiped broker names apart, masking WRITE off when a route is read. A master
re-registers every 30 s with its own perm (6), so storing a masked perm would be undone at the
next heartbeat; masking at read time survives that, a restart of the broker and even the
group expiring, and :meth:`RouteTable.add_write_perm` restores exactly what the broker says.
The table never does I/O: the servicer turns requests into
:class:`Registration` values and results into protos, the server runs :meth:`RouteTable.expire`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from orbitmq.common.clock import Clock
from orbitmq.common.errors import OrbitError

log = logging.getLogger(__name__)

MASTER_ID = 0
"""Broker id of a broker group's master; slaves have ids 1 and up."""
PERM_WRITE = 2
"""The WRITE bit of a topic's permission (READ 4, WRITE 2, INHERIT 1)."""
DEFAULT_BROKER_EXPIRY_MS = 120_000
"""A broker silent this long is dropped: four missed 30 s heartbeats (RocketMQ's default)."""


@dataclass(frozen=True, slots=True)
class DataVersion:
    """Version of a broker's topic configuration (creation time and change counter)."""

    timestamp_ms: int = 0
    counter: int = 0


@dataclass(frozen=True, slots=True)
class TopicQueues:
    """What a broker reports of one topic: queue counts, permission bits, order flag."""

    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool = False


@dataclass(frozen=True, slots=True)
class QueueData:
    """One topic on one broker group. ``order`` is not on the wire's QueueData: it makes
    the route's ``order_topic``."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool = False


@dataclass(frozen=True, slots=True)
class BrokerData:
    """A broker group as readers see it: addresses by broker id, 0 = master."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str]


@dataclass(frozen=True, slots=True)
class BrokerLive:
    """The last registration of one broker address."""

    cluster: str
    broker_name: str
    broker_id: int
    last_update_ms: int
    data_version: DataVersion
    heartbeat_timeout_ms: int
    ha_addr: str
    epoch: int

    def expired(self, now_ms: int) -> bool:
        """Silent for longer than its timeout (exactly the timeout is still alive)."""
        return now_ms - self.last_update_ms > self.heartbeat_timeout_ms


@dataclass(frozen=True, slots=True)
class Registration:
    """One RegisterBroker request, validated by the caller.

    ``topics`` is only read from a master (``broker_id`` 0). ``heartbeat_timeout_ms`` of 0
    means the table's default; a larger value than the default is capped at it. ``epoch`` is
    the broker group's role-change epoch (0 before any failover).
    """

    cluster: str
    broker_name: str
    broker_addr: str
    broker_id: int
    ha_addr: str = ""
    topics: Mapping[str, TopicQueues] = field(default_factory=dict)
    data_version: DataVersion = DataVersion()
    heartbeat_timeout_ms: int = 0
    epoch: int = 0


class RegisterResult(NamedTuple):
    """The broker group's master address and its HA address ("" when it has no master)."""

    master_addr: str
    ha_addr: str


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """Where a topic lives: queue data and addresses of every broker group serving it."""

    topic: str
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic: bool


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    broker_addr_table: dict[str, BrokerData]
    cluster_addr_table: dict[str, list[str]]
    live_brokers: dict[str, BrokerLive]


class StaleEpochError(OrbitError, ValueError):
    """A master registration older (by epoch) than the live master of its broker group.

    After a failover the returning old master must rejoin as a slave; letting its stale
    registration take broker id 0 would send producers to a broker that lost the role.
    """


@dataclass(slots=True)
class _BrokerGroup:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)


BrokerKey = tuple[str, str, int]
"""(cluster, broker name, broker id) of a live broker."""


class RouteTable:
    """Routes of every topic, built from broker registrations and dropped on expiry.

    Args:
        clock: source of "now" for registrations and for route liveness checks.
        broker_expiry_ms: how long a broker may stay silent (default 120 s); a registration
            may ask for a shorter timeout, never a longer one.
    """

    def __init__(self, clock: Clock, broker_expiry_ms: int = DEFAULT_BROKER_EXPIRY_MS) -> None:
        if broker_expiry_ms <= 0:
            raise ValueError(f"broker_expiry_ms {broker_expiry_ms} must be positive")
        self._clock = clock
        self._expiry_ms = broker_expiry_ms
        self._clusters: dict[str, set[str]] = {}
        self._groups: dict[str, _BrokerGroup] = {}
        self._topics: dict[str, dict[str, QueueData]] = {}
        self._live: dict[str, BrokerLive] = {}
        self._write_wiped: set[str] = set()

    # -- changes -------------------------------------------------------------------------------

    def register(self, registration: Registration) -> RegisterResult:
        """Record a registration (or heartbeat); returns the group's master and HA addresses.

        Raises :class:`StaleEpochError` when a master registers with an epoch older than the
        live master it would replace. A master with the same or a newer epoch replaces it
        (same epoch: a restarted master on a new address, as in RocketMQ).
        """
        reg = registration
        if reg.broker_id < 0:
            raise ValueError(f"broker id {reg.broker_id} must be 0 (master) or more (slave)")
        now = self._clock.now_ms()
        self._check_epoch(reg, now)
        previous = self._live.get(reg.broker_addr)
        if previous is not None and previous.broker_name != reg.broker_name:
            log.info(
                "broker %s moved from broker name %s to %s",
                reg.broker_addr,
                previous.broker_name,
                reg.broker_name,
            )
            self._drop_address(reg.broker_addr)
        group = self._group_for(reg.cluster, reg.broker_name)
        for broker_id, addr in list(group.broker_addrs.items()):
            if addr == reg.broker_addr and broker_id != reg.broker_id:
                # The broker changed role (e.g. an old master back as a slave): one id per address.
                del group.broker_addrs[broker_id]
                if broker_id == MASTER_ID:
                    self._drop_queue_data(reg.broker_name)
        displaced = group.broker_addrs.get(reg.broker_id)
        if displaced is not None and displaced != reg.broker_addr:
            log.info(
                "broker %s id %s: %s (epoch %s) replaces %s",
                reg.broker_name,
                reg.broker_id,
                reg.broker_addr,
                reg.epoch,
                displaced,
            )
            self._live.pop(displaced, None)
        group.broker_addrs[reg.broker_id] = reg.broker_addr
        timeout = self._expiry_ms
        if 0 < reg.heartbeat_timeout_ms < timeout:
            timeout = reg.heartbeat_timeout_ms
        self._live[reg.broker_addr] = BrokerLive(
            cluster=reg.cluster,
            broker_name=reg.broker_name,
            broker_id=reg.broker_id,
            last_update_ms=now,
            data_version=reg.data_version,
            heartbeat_timeout_ms=timeout,
            ha_addr=reg.ha_addr,
            epoch=reg.epoch,
        )
        if reg.broker_id == MASTER_ID:
            self._replace_queue_data(reg.broker_name, reg.topics)
        if previous is None:
            log.info(
                "broker registered: cluster %s broker %s id %s at %s (%s topics)",
                reg.cluster,
                reg.broker_name,
                reg.broker_id,
                reg.broker_addr,
                len(reg.topics),
            )
        return self._master_of(group)

    def unregister(self, broker_name: str, broker_addr: str) -> bool:
        """Forget an address that leaves on purpose; False when it was not registered there.

        The address identifies the broker: its current broker id is whatever it last
        registered with, so a stale id in the request cannot remove another broker.
        """
        live = self._live.get(broker_addr)
        if live is None or live.broker_name != broker_name:
            return False
        self._drop_address(broker_addr)
        log.info("broker unregistered: broker %s id %s at %s", broker_name, live.broker_id, broker_addr)
        return True

    def expire(self, now_ms: int) -> list[str]:
        """Drop every address silent for longer than its timeout; returns them, sorted."""
        dead = sorted(addr for addr, live in self._live.items() if live.expired(now_ms))
        for addr in dead:
            live = self._live[addr]
            log.warning(
                "broker expired: broker %s id %s at %s silent for %s ms (timeout %s ms)",
                live.broker_name,
                live.broker_id,
                addr,
                now_ms - live.last_update_ms,
                live.heartbeat_timeout_ms,
            )
            self._drop_address(addr)
        return dead

    def delete_topic(self, topic: str) -> bool:
        """Remove a topic from the routes (after it was deleted on the brokers)."""
        return self._topics.pop(topic, None) is not None

    def wipe_write_perm(self, broker_name: str) -> int:
        """Route ``broker_name``'s topics without WRITE from now on, whatever it registers;
        returns how many of its topics were writable in the routes (0 when already wiped)."""
        count = 0 if broker_name in self._write_wiped else self._writable_topics(broker_name)
        self._write_wiped.add(broker_name)
        log.info("write permission wiped: broker %s (%s topics)", broker_name, count)
        return count

    def add_write_perm(self, broker_name: str) -> int:
        """Undo :meth:`wipe_write_perm`; returns how many topics are writable again (0 when
        the broker name was not wiped)."""
        if broker_name not in self._write_wiped:
            return 0
        self._write_wiped.discard(broker_name)
        count = self._writable_topics(broker_name)
        log.info("write permission restored: broker %s (%s topics)", broker_name, count)
        return count

    def write_wiped(self) -> frozenset[str]:
        """Broker names whose write permission is wiped."""
        return frozenset(self._write_wiped)

    # -- reads ---------------------------------------------------------------------------------

    def route(self, topic: str) -> TopicRoute | None:
        """The topic's route over broker groups with live addresses; None when there is none.

        Liveness is checked against the clock here too, so a broker past its timeout stops
        being routed to at once, not only at the next expiry scan.
        """
        per_broker = self._topics.get(topic)
        if not per_broker:
            return None
        now = self._clock.now_ms()
        queue_datas: list[QueueData] = []
        broker_datas: list[BrokerData] = []
        for name in sorted(per_broker):
            group = self._groups.get(name)
            if group is None:
                continue
            addrs = {
                broker_id: addr
                for broker_id, addr in sorted(group.broker_addrs.items())
                if not self._live[addr].expired(now)
            }
            if not addrs:
                continue
            queue_datas.append(self._routed(per_broker[name]))
            broker_datas.append(BrokerData(group.cluster, name, addrs))
        if not queue_datas:
            return None
        return TopicRoute(
            topic=topic,
            queue_datas=tuple(queue_datas),
            broker_datas=tuple(broker_datas),
            order_topic=any(q.order for q in queue_datas),
        )

    def cluster_info(self) -> ClusterInfo:
        """Every registered broker group, cluster and live address (a copy)."""
        return ClusterInfo(
            broker_addr_table={
                name: BrokerData(g.cluster, name, dict(sorted(g.broker_addrs.items())))
                for name, g in sorted(self._groups.items())
            },
            cluster_addr_table={c: sorted(names) for c, names in sorted(self._clusters.items())},
            live_brokers=dict(sorted(self._live.items())),
        )

    def topics(self) -> list[str]:
        """Names of every topic some broker group reported, sorted."""
        return sorted(self._topics)

    def live_keys(self) -> set[BrokerKey]:
        """(cluster, broker name, broker id) of every registered address (for the gauge)."""
        return {(live.cluster, live.broker_name, live.broker_id) for live in self._live.values()}

    def sizes(self) -> dict[str, int]:
        """Entries of each table: registered brokers, broker groups, topics (for the gauges)."""
        return {"brokers": len(self._live), "broker_groups": len(self._groups), "topics": len(self._topics)}

    # -- helpers -------------------------------------------------------------------------------

    def _check_epoch(self, reg: Registration, now: int) -> None:
        if reg.broker_id != MASTER_ID:
            return
        group = self._groups.get(reg.broker_name)
        current = group.broker_addrs.get(MASTER_ID) if group else None
        if current is None or current == reg.broker_addr:
            return
        live = self._live[current]
        if not live.expired(now) and reg.epoch < live.epoch:
            raise StaleEpochError(
                f"broker {reg.broker_name!r}: master registration from {reg.broker_addr} has epoch "
                f"{reg.epoch}, older than the live master {current} at epoch {live.epoch}; "
                f"rejoin as a slave (broker id >= 1)"
            )

    def _routed(self, queue_data: QueueData) -> QueueData:
        if queue_data.broker_name in self._write_wiped and queue_data.perm & PERM_WRITE:
            return replace(queue_data, perm=queue_data.perm & ~PERM_WRITE)
        return queue_data

    def _writable_topics(self, broker_name: str) -> int:
        return sum(
            1
            for per_broker in self._topics.values()
            if (q := per_broker.get(broker_name)) is not None and q.perm & PERM_WRITE
        )

    def _group_for(self, cluster: str, broker_name: str) -> _BrokerGroup:
        group = self._groups.get(broker_name)
        if group is None:
            group = self._groups[broker_name] = _BrokerGroup(cluster, broker_name)
        elif group.cluster != cluster:
            log.info("broker %s moved from cluster %s to %s", broker_name, group.cluster, cluster)
            self._forget_in_cluster(group.cluster, broker_name)
            group.cluster = cluster
        self._clusters.setdefault(cluster, set()).add(broker_name)
        return group

    def _forget_in_cluster(self, cluster: str, broker_name: str) -> None:
        names = self._clusters.get(cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self._clusters[cluster]

    def _master_of(self, group: _BrokerGroup) -> RegisterResult:
        master = group.broker_addrs.get(MASTER_ID, "")
        live = self._live.get(master) if master else None
        return RegisterResult(master, live.ha_addr if live else "")

    def _drop_address(self, addr: str) -> None:
        live = self._live.pop(addr, None)
        if live is None:
            return
        group = self._groups.get(live.broker_name)
        if group is None:
            return
        for broker_id, known in list(group.broker_addrs.items()):
            if known == addr:
                del group.broker_addrs[broker_id]
                if broker_id == MASTER_ID:
                    self._drop_queue_data(group.broker_name)
        if not group.broker_addrs:
            del self._groups[group.broker_name]
            self._forget_in_cluster(group.cluster, group.broker_name)
            self._drop_queue_data(group.broker_name)

    def _drop_queue_data(self, broker_name: str) -> None:
        for topic, per_broker in list(self._topics.items()):
            per_broker.pop(broker_name, None)
            if not per_broker:
                del self._topics[topic]

    def _replace_queue_data(self, broker_name: str, topics: Mapping[str, TopicQueues]) -> None:
        self._drop_queue_data(broker_name)
        for topic, queues in topics.items():
            self._topics.setdefault(topic, {})[broker_name] = QueueData(
                broker_name=broker_name,
                read_queue_nums=queues.read_queue_nums,
                write_queue_nums=queues.write_queue_nums,
                perm=queues.perm,
                order=queues.order,
            )
