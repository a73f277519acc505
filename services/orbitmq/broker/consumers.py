"""Who is connected: clients, their groups, their session streams (RocketMQ's ConsumerManager).

Consumers heartbeat their groups and subscriptions; a group's member list feeds the clients'
rebalance. When membership changes, every member with an open session is told at once so it
rebalances without waiting for its 20 s timer. A client whose session closes leaves at once; a
client silent for ``expiry_ms`` is swept.

The registry counts what it sees per group (:attr:`ClientRegistry.membership_changes`,
:attr:`ClientRegistry.rebalance_notifications`): the broker's metrics then show every join,
leave and pushed rebalance, also of consumers that export no metrics themselves.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from orbitmq.common.clock import Clock
from orbitmq.v1 import broker_pb2

log = logging.getLogger(__name__)

SESSION_QUEUE_LIMIT = 1024
"""Events queued for a slow session before the oldest are dropped (they are hints, not data)."""


class MembershipChange(enum.Enum):
    """How a client's membership of a consumer group changed (the metric's ``change`` label)."""

    JOINED = "joined"
    """Its heartbeat named the group for the first time (or again after it left)."""
    LEFT = "left"
    """It unregistered, its heartbeat stopped naming the group, or its session closed."""
    EXPIRED = "expired"
    """It was silent for ``expiry_ms``."""


@dataclass(slots=True)
class ClientInfo:
    client_id: str
    address: str
    last_heartbeat_ms: int
    consumers: dict[str, broker_pb2.ConsumerData] = field(default_factory=dict)
    producers: dict[str, int] = field(default_factory=dict)
    """Producer group -> when a heartbeat last named it (ms). Several producers of one process
    share its client id (``host@pid``, RocketMQ's clientId) and heartbeat on their own, each
    naming its group only: a group stays until it is unregistered or unnamed for the expiry,
    as RocketMQ's ProducerManager keeps each group's channel (a heartbeat that replaced the set
    left a TransactionProducer beside a plain Producer unknown to the broker half the time, and
    its check-backs unsent until the half messages were discarded)."""


class Session:
    """One server-push stream of a client; events wait in a bounded queue. ``groups``: the
    producer and consumer groups its hello named (one process's producers share a client id,
    each with a stream of its own)."""

    def __init__(self, client_id: str, groups: frozenset[str] = frozenset()) -> None:
        self.client_id = client_id
        self.groups = groups
        self.events: asyncio.Queue[broker_pb2.ServerEvent] = asyncio.Queue(SESSION_QUEUE_LIMIT)

    def push(self, event: broker_pb2.ServerEvent) -> None:
        if self.events.full():
            self.events.get_nowait()
        self.events.put_nowait(event)


class ClientRegistry:
    def __init__(self, clock: Clock, expiry_ms: int) -> None:
        self._clock = clock
        self._expiry_ms = expiry_ms
        self._clients: dict[str, ClientInfo] = {}
        self._sessions: dict[str, list[Session]] = {}
        """Open session streams by client id, oldest first."""
        self.membership_changes: dict[tuple[str, MembershipChange], int] = {}
        """Clients per (group, change) since the start, exported as metrics."""
        self.rebalance_notifications: dict[str, int] = {}
        """Consumer-ids-changed events queued per group since the start (one per member told)."""

    def _count(self, groups: Iterable[str], change: MembershipChange) -> None:
        for group in groups:
            key = (group, change)
            self.membership_changes[key] = self.membership_changes.get(key, 0) + 1

    # -- membership ----------------------------------------------------------------------------

    def heartbeat(
        self,
        client_id: str,
        address: str,
        producers: Iterable[str],
        consumers: Iterable[broker_pb2.ConsumerData],
    ) -> set[str]:
        """Record a heartbeat; returns the consumer groups whose membership changed."""
        info = self._clients.get(client_id)
        if info is None:
            info = self._clients[client_id] = ClientInfo(client_id, address, 0)
        info.last_heartbeat_ms = self._clock.now_ms()
        info.address = address
        now = info.last_heartbeat_ms
        info.producers = {g: t for g, t in info.producers.items() if now - t < self._expiry_ms}
        info.producers.update(dict.fromkeys(producers, now))
        before = set(info.consumers)
        info.consumers = {data.group: data for data in consumers}
        after = set(info.consumers)
        self._count(after - before, MembershipChange.JOINED)
        self._count(before - after, MembershipChange.LEFT)
        return before ^ after

    def unregister(self, client_id: str, producer_group: str, consumer_group: str) -> set[str]:
        info = self._clients.get(client_id)
        if info is None:
            return set()
        info.producers.pop(producer_group, None)
        changed = {consumer_group} if info.consumers.pop(consumer_group, None) is not None else set()
        self._count(changed, MembershipChange.LEFT)
        if not info.producers and not info.consumers:
            del self._clients[client_id]
        return changed

    def remove_client(self, client_id: str, change: MembershipChange = MembershipChange.LEFT) -> set[str]:
        """Forget a client (its session closed, or it expired); returns the groups it left."""
        info = self._clients.pop(client_id, None)
        groups = set(info.consumers) if info else set()
        self._count(groups, change)
        return groups

    def sweep(self) -> tuple[list[str], set[str]]:
        """Drop clients silent for too long; returns (their ids, groups that changed)."""
        now = self._clock.now_ms()
        expired = [c for c, i in self._clients.items() if now - i.last_heartbeat_ms >= self._expiry_ms]
        changed: set[str] = set()
        for client_id in expired:
            changed |= self.remove_client(client_id, MembershipChange.EXPIRED)
            log.info("client %s expired after %d ms without heartbeat", client_id, self._expiry_ms)
        return expired, changed

    def consumer_ids(self, group: str) -> list[str]:
        return sorted(c for c, info in self._clients.items() if group in info.consumers)

    def consumer_data(self, group: str) -> broker_pb2.ConsumerData | None:
        """The newest heartbeat's view of the group (subscriptions, model, ...)."""
        latest = None
        for info in self._clients.values():
            data = info.consumers.get(group)
            if data is not None and (latest is None or info.last_heartbeat_ms >= latest[0]):
                latest = (info.last_heartbeat_ms, data)
        return latest[1] if latest else None

    def connections(self, group: str) -> list[ClientInfo]:
        return [info for _, info in sorted(self._clients.items()) if group in info.consumers]

    def consumer_groups(self) -> set[str]:
        return {group for info in self._clients.values() for group in info.consumers}

    def members_per_group(self) -> dict[str, int]:
        """Clients online in each group, 0 for a group whose members have all left (a series
        that vanished at 0 would end a graph's line instead of drawing the drop)."""
        members = {group: 0 for group, _ in self.membership_changes}
        for info in self._clients.values():
            for group in info.consumers:
                members[group] = members.get(group, 0) + 1
        return members

    def producer_clients(self, group: str) -> list[str]:
        return sorted(c for c, info in self._clients.items() if group in info.producers)

    def client(self, client_id: str) -> ClientInfo | None:
        return self._clients.get(client_id)

    def client_count(self) -> int:
        """Clients known now (the ``broker_clients`` table of the server's metrics)."""
        return len(self._clients)

    def session_count(self) -> int:
        return sum(len(sessions) for sessions in list(self._sessions.values()))

    # -- sessions ------------------------------------------------------------------------------

    def open_session(self, client_id: str, groups: Iterable[str] = ()) -> Session:
        """A new stream of the client; it replaces one that named the same groups (the same
        producer or consumer reconnecting), not the streams of the process's other producers:
        a check-back for a group must reach the producer of that group, whose ``check`` knows
        its transactions (RocketMQ's client instance picks the producer by group)."""
        session = Session(client_id, frozenset(groups))
        sessions = self._sessions.setdefault(client_id, [])
        for old in [s for s in sessions if s.groups == session.groups]:
            log.info("client %s opened a new session for %s; the old one is replaced", client_id, old.groups)
            sessions.remove(old)
        sessions.append(session)
        return session

    def close_session(self, session: Session) -> bool:
        """Forget the session; True when it was the client's last open one."""
        sessions = self._sessions.get(session.client_id)
        if not sessions or session not in sessions:
            return False
        sessions.remove(session)
        if sessions:
            return False
        del self._sessions[session.client_id]
        return True

    def session(self, client_id: str, group: str | None = None) -> Session | None:
        """The client's newest stream; with ``group``, its newest stream that named the group,
        else its newest that named none (a hello without groups speaks for all of them), never
        the stream of another group's producer."""
        sessions = self._sessions.get(client_id)
        if not sessions:
            return None
        if group is None:
            return sessions[-1]
        named = next((s for s in reversed(sessions) if group in s.groups), None)
        return named or next((s for s in reversed(sessions) if not s.groups), None)

    def notify_changed(self, groups: Iterable[str]) -> int:
        """Tell every member of each group with an open session; returns events queued."""
        sent = 0
        for group in groups:
            event = broker_pb2.ServerEvent(
                consumer_ids_changed=broker_pb2.ConsumerIdsChanged(consumer_group=group)
            )
            told = 0
            for client_id in self.consumer_ids(group):
                session = self.session(client_id, group) or self.session(client_id)
                if session is not None:
                    session.push(event)
                    told += 1
            if told:
                self.rebalance_notifications[group] = self.rebalance_notifications.get(group, 0) + told
            sent += told
        return sent

    def push_to_group(self, group: str, event: broker_pb2.ServerEvent) -> int:
        sent = 0
        for client_id in self.consumer_ids(group):
            session = self.session(client_id, group) or self.session(client_id)
            if session is not None:
                session.push(event)
                sent += 1
        return sent
