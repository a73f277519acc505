"""Queue locks for ordered consumption (RocketMQ's RebalanceLockManager); pure, clock injected.

An orderly consumer may only consume a queue it holds locked on the master. A lock belongs to
one client of one group and lapses ``expiry_ms`` after its last renewal, so a crashed client's
queues free themselves; its owner renews by locking again.

Every lock event is counted per group (:attr:`LockTable.events`), so the broker's metrics show
who takes, keeps and loses queues whether or not the consumers export metrics of their own.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from orbitmq.common.clock import Clock

QueueKey = tuple[str, str, int]
"""(topic, broker name, queue id)."""


class LockEvent(enum.Enum):
    """What a lock request or a sweep did to one queue's lock (the metric's ``event`` label)."""

    ACQUIRED = "acquired"
    """A client took a free (or lapsed) lock."""
    RENEWED = "renewed"
    """Its owner locked it again."""
    REJECTED = "rejected"
    """Another client holds it."""
    EXPIRED = "expired"
    """Its owner stopped renewing it for ``expiry_ms``."""


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update_ms: int


class LockTable:
    def __init__(self, clock: Clock, expiry_ms: int) -> None:
        self._clock = clock
        self._expiry_ms = expiry_ms
        self._groups: dict[str, dict[QueueKey, LockEntry]] = {}
        self.events: dict[tuple[str, LockEvent], int] = {}
        """Queues per (group, event) since the start, exported as metrics."""

    def _count(self, group: str, event: LockEvent, queues: int = 1) -> None:
        if queues:
            key = (group, event)
            self.events[key] = self.events.get(key, 0) + queues

    def _live(self, entry: LockEntry | None, now: int) -> bool:
        return entry is not None and now - entry.last_update_ms < self._expiry_ms

    def lock_batch(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> list[QueueKey]:
        """Lock or renew each queue for ``client_id``; returns the queues it now holds."""
        now = self._clock.now_ms()
        table = self._groups.setdefault(group, {})
        held: list[QueueKey] = []
        for queue in queues:
            entry = table.get(queue)
            if entry is not None and entry.client_id == client_id:
                entry.last_update_ms = now
                self._count(group, LockEvent.RENEWED)
                held.append(queue)
            elif not self._live(entry, now):
                if entry is not None:
                    self._count(group, LockEvent.EXPIRED)
                table[queue] = LockEntry(client_id, now)
                self._count(group, LockEvent.ACQUIRED)
                held.append(queue)
            else:
                self._count(group, LockEvent.REJECTED)
        return held

    def unlock_batch(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> int:
        table = self._groups.get(group, {})
        released = 0
        for queue in queues:
            entry = table.get(queue)
            if entry is not None and entry.client_id == client_id:
                del table[queue]
                released += 1
        return released

    def release_client(self, client_id: str) -> int:
        """Drop every lock of a client that left (its session closed)."""
        released = 0
        for table in self._groups.values():
            for queue in [q for q, e in table.items() if e.client_id == client_id]:
                del table[queue]
                released += 1
        return released

    def owner(self, group: str, queue: QueueKey) -> str | None:
        entry = self._groups.get(group, {}).get(queue)
        return entry.client_id if self._live(entry, self._clock.now_ms()) and entry else None

    def sweep(self) -> int:
        """Forget lapsed locks; returns how many."""
        now, dropped = self._clock.now_ms(), 0
        for group, table in self._groups.items():
            lapsed = [q for q, e in table.items() if not self._live(e, now)]
            for queue in lapsed:
                del table[queue]
            self._count(group, LockEvent.EXPIRED, len(lapsed))
            dropped += len(lapsed)
        return dropped

    def entries(self) -> int:
        """Lock entries kept, lapsed ones not yet swept included."""
        return sum(len(table) for table in list(self._groups.values()))

    def snapshot(self) -> list[tuple[str, QueueKey, str]]:
        """(group, queue, owner) of every live lock."""
        now = self._clock.now_ms()
        return [
            (group, queue, entry.client_id)
            for group, table in self._groups.items()
            for queue, entry in table.items()
            if self._live(entry, now)
        ]
