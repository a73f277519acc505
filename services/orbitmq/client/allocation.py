"""Queue allocation strategies: which queues of a topic this consumer pulls, in clustering mode.

Rebalance has no coordinator. Every consumer of a group fetches the same two lists (the topic's
queues from the route, the group's client ids from a broker), runs the same pure function on
them and keeps its own share. That only works if the function is deterministic given the
lists, whatever order they arrived in and whichever process runs it; hence, as in RocketMQ,
both lists are sorted (and de-duplicated) before allocating, and nothing here depends on
Python's per-process ``hash()`` or on the clock.

Every strategy has one interface (:meth:`AllocateStrategy.allocate`) and a ``name`` used in
configuration (:data:`STRATEGIES`). The common rules live in the base class: arguments are
validated, and a client that is not in the client list (it registered after the list was
fetched, or its heartbeat lapsed) gets no queue rather than one that someone else also took.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar

from orbitmq.client.queue import MessageQueue

log = logging.getLogger(__name__)

MACHINE_ROOM_SEPARATOR = "@"
"""Broker names of the form ``room@name`` say which machine room (zone) the broker is in."""

DEFAULT_VIRTUAL_NODES = 10
"""RocketMQ's default for consistent hashing: enough to spread a few clients evenly enough."""


class AllocateStrategy(ABC):
    """Splits a topic's queues among the clients of a group; see the module docstring."""

    name: ClassVar[str]

    def allocate(
        self, group: str, current_client: str, queues: Sequence[MessageQueue], clients: Sequence[str]
    ) -> list[MessageQueue]:
        """The queues ``current_client`` should consume, sorted.

        Args:
            group: the consumer group (only for validation and log context).
            current_client: the client id of the consumer asking.
            queues: all queues of the topic; any order, duplicates ignored.
            clients: the client ids of every live consumer of ``group``; any order, duplicates
                ignored.

        Returns ``[]`` (and logs a warning) when ``current_client`` is not in ``clients``.
        Raises ``ValueError`` for an empty group or client id.
        """
        if not isinstance(group, str) or not group:
            raise ValueError(f"consumer group must be a non-empty string, got {group!r}")
        if not isinstance(current_client, str) or not current_client:
            raise ValueError(f"current client id must be a non-empty string, got {current_client!r}")
        sorted_clients = _sorted_unique(clients, "client id")
        sorted_queues = sorted(set(queues))
        if current_client not in sorted_clients:
            log.warning(
                "group %s: client %s is not among the group's clients %s; allocating it no queue (%s)",
                group,
                current_client,
                sorted_clients,
                self.name,
            )
            return []
        if not sorted_queues:
            return []
        return sorted(self._allocate(group, current_client, sorted_queues, sorted_clients))

    @abstractmethod
    def _allocate(
        self, group: str, current_client: str, queues: list[MessageQueue], clients: list[str]
    ) -> Iterable[MessageQueue]:
        """The share of ``current_client``; ``queues`` is non-empty, both lists are sorted and
        unique, and ``current_client`` is in ``clients``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _sorted_unique(clients: Sequence[str], what: str) -> list[str]:
    for client in clients:
        if not isinstance(client, str) or not client:
            raise ValueError(f"every {what} must be a non-empty string, got {client!r}")
    return sorted(set(clients))


def _average_share(queues: list[MessageQueue], index: int, count: int) -> list[MessageQueue]:
    """Block ``index`` of ``count`` contiguous blocks; the first ``len % count`` get one more."""
    base, extra = divmod(len(queues), count)
    start = index * base + min(index, extra)
    size = base + (1 if index < extra else 0)
    return queues[start : start + size]


class AllocateAveragely(AllocateStrategy):
    """Contiguous blocks: 8 queues / 3 clients -> [0,1,2] [3,4,5] [6,7].

    RocketMQ's default. A client beyond the queue count gets nothing.
    """

    name = "averagely"

    def _allocate(
        self, group: str, current_client: str, queues: list[MessageQueue], clients: list[str]
    ) -> list[MessageQueue]:
        return _average_share(queues, clients.index(current_client), len(clients))


class AllocateByCircle(AllocateStrategy):
    """Round robin: 8 queues / 3 clients -> [0,3,6] [1,4,7] [2,5].

    Spreads neighbouring queues (often the same broker, when queues sort by broker name) over
    different clients, so losing one broker hurts every client a little rather than one a lot.
    """

    name = "by_circle"

    def _allocate(
        self, group: str, current_client: str, queues: list[MessageQueue], clients: list[str]
    ) -> list[MessageQueue]:
        return queues[clients.index(current_client) :: len(clients)]


def md5_hash(key: str) -> int:
    """The first four bytes of MD5(``key``) as an unsigned big-endian int (RocketMQ's ``MD5Hash``).

    Stable across processes and languages, unlike Python's salted ``hash()``.
    """
    return int.from_bytes(hashlib.md5(key.encode("utf-8"), usedforsecurity=False).digest()[:4], "big")


class AllocateConsistentHash(AllocateStrategy):
    """Each client owns ``virtual_nodes`` points on a hash ring; a queue goes to the owner of the
    first point at or clockwise after ``hash(str(queue))`` (wrapping round).

    When a client joins, only the queues that land just before its points move, and they all
    move to it; when one leaves, only its queues move. That keeps process queues, caches and
    orderly locks in place for everyone else, at the cost of a less even split than averagely.

    Args:
        virtual_nodes: points per client (default 10, RocketMQ's); more means a more even split.
        hash: ``str -> int``, default :func:`md5_hash`; must be the same in every client of the
            group. Virtual node ``i`` of client ``c`` is hashed as ``f"{c}-{i}"`` (RocketMQ's key).
    """

    name = "consistent_hash"

    def __init__(
        self, virtual_nodes: int = DEFAULT_VIRTUAL_NODES, hash: Callable[[str], int] = md5_hash
    ) -> None:
        if isinstance(virtual_nodes, bool) or not isinstance(virtual_nodes, int) or virtual_nodes < 1:
            raise ValueError(f"virtual_nodes must be an int >= 1, got {virtual_nodes!r}")
        self.virtual_nodes = virtual_nodes
        self._hash = hash

    def _allocate(
        self, group: str, current_client: str, queues: list[MessageQueue], clients: list[str]
    ) -> list[MessageQueue]:
        # Sorted by (point, client): two clients colliding on one point resolve the same way everywhere.
        ring = sorted(
            (self._hash(f"{client}-{i}"), client) for client in clients for i in range(self.virtual_nodes)
        )
        points = [point for point, _ in ring]
        mine = []
        for queue in queues:
            slot = bisect.bisect_left(points, self._hash(str(queue))) % len(ring)
            if ring[slot][1] == current_client:
                mine.append(queue)
        return mine

    def __repr__(self) -> str:
        return f"AllocateConsistentHash(virtual_nodes={self.virtual_nodes})"


class AllocateByConfig(AllocateStrategy):
    """A fixed list of queues for this client, whatever the other clients do.

    Only the configured queues offered in ``queues`` are returned: rebalance runs per topic, so
    queues of other topics, or of a broker missing from the route just now, are not this
    topic's to pull. Nothing stops two clients configuring the same queue; that is the
    operator's responsibility.
    """

    name = "by_config"

    def __init__(self, queues: Iterable[MessageQueue]) -> None:
        self.queues = frozenset(queues)
        for queue in self.queues:
            if not isinstance(queue, MessageQueue):
                raise ValueError(f"configured queues must be MessageQueue values, got {queue!r}")

    def _allocate(
        self, group: str, current_client: str, queues: list[MessageQueue], clients: list[str]
    ) -> list[MessageQueue]:
        return [queue for queue in queues if queue in self.queues]

    def __repr__(self) -> str:
        return f"AllocateByConfig({sorted(self.queues)!r})"


def split_broker_name(broker_name: str) -> tuple[str | None, str]:
    """``"room@name"`` -> ``("room", "name")``; a name without a room -> ``(None, name)``."""
    room, separator, name = broker_name.partition(MACHINE_ROOM_SEPARATOR)
    if not separator or not room or not name or MACHINE_ROOM_SEPARATOR in name:
        return None, broker_name
    return room, name


def room_of_broker_name(broker_name: str) -> str:
    """The machine room of ``room@name``; raises ``ValueError`` if the name carries none."""
    room, _ = split_broker_name(broker_name)
    if room is None:
        raise ValueError(
            f"broker name {broker_name!r} names no machine room (expected 'room{MACHINE_ROOM_SEPARATOR}name')"
        )
    return room


class AllocateByMachineRoom(AllocateStrategy):
    """Only queues of brokers in ``consumer_rooms`` (broker names ``room@name``), split averagely.

    For deployments where a consumer must only read from its own zone(s). Every client of the
    group should be configured with the same rooms, or the averaged blocks overlap or leave
    gaps. Brokers whose name carries no room are never allocated.
    """

    name = "by_machine_room"

    def __init__(self, consumer_rooms: Iterable[str]) -> None:
        rooms = frozenset(consumer_rooms)
        if not rooms:
            raise ValueError("consumer_rooms is empty: a consumer in no machine room would consume nothing")
        for room in rooms:
            if not isinstance(room, str) or not room or MACHINE_ROOM_SEPARATOR in room:
                raise ValueError(
                    f"machine room must be a non-empty string without {MACHINE_ROOM_SEPARATOR!r},"
                    f" got {room!r}"
                )
        self.consumer_rooms = rooms

    def _allocate(
        self, group: str, current_client: str, queues: list[MessageQueue], clients: list[str]
    ) -> list[MessageQueue]:
        in_rooms = [q for q in queues if split_broker_name(q.broker_name)[0] in self.consumer_rooms]
        return _average_share(in_rooms, clients.index(current_client), len(clients))

    def __repr__(self) -> str:
        return f"AllocateByMachineRoom({sorted(self.consumer_rooms)!r})"


class AllocateMachineRoomNearby(AllocateStrategy):
    """Prefer queues in the client's own machine room; share the queues of unattended rooms.

    Queues are grouped by the room of their broker and clients by their own room. The queues of
    a room that has clients are allocated among those clients only, with ``inner_strategy``;
    the queues of each room with no client (its consumers all died) are allocated among all
    clients, again with ``inner_strategy``, so they are still consumed, across rooms.

    Args:
        inner_strategy: how to split a room's queues among its clients.
        room_of_client: client id -> machine room; must give every client's room the same way
            in every process (e.g. parse it from a client id that embeds the zone).
        room_of_broker: broker name -> machine room; default :func:`room_of_broker_name`
            (``room@name``).

    Raises ``ValueError`` from :meth:`allocate` if a resolver returns an empty room.
    """

    name = "machine_room_nearby"

    def __init__(
        self,
        inner_strategy: AllocateStrategy,
        room_of_client: Callable[[str], str],
        room_of_broker: Callable[[str], str] = room_of_broker_name,
    ) -> None:
        if not isinstance(inner_strategy, AllocateStrategy):
            raise ValueError(f"inner_strategy must be an AllocateStrategy, got {inner_strategy!r}")
        self.inner_strategy = inner_strategy
        self._room_of_client = room_of_client
        self._room_of_broker = room_of_broker

    def _allocate(
        self, group: str, current_client: str, queues: list[MessageQueue], clients: list[str]
    ) -> list[MessageQueue]:
        queues_by_room: dict[str, list[MessageQueue]] = {}
        for queue in queues:
            room = self._room(self._room_of_broker, queue.broker_name, "broker")
            queues_by_room.setdefault(room, []).append(queue)
        clients_by_room: dict[str, list[str]] = {}
        for client in clients:
            clients_by_room.setdefault(self._room(self._room_of_client, client, "client"), []).append(client)

        my_room = self._room(self._room_of_client, current_client, "client")
        mine = self.inner_strategy.allocate(
            group, current_client, queues_by_room.pop(my_room, []), clients_by_room[my_room]
        )
        for room in sorted(queues_by_room):
            if room not in clients_by_room:
                mine += self.inner_strategy.allocate(group, current_client, queues_by_room[room], clients)
        return mine

    @staticmethod
    def _room(resolve: Callable[[str], str], value: str, what: str) -> str:
        room = resolve(value)
        if not isinstance(room, str) or not room:
            raise ValueError(f"machine room of {what} {value!r} is {room!r}; every {what} needs a room")
        return room

    def __repr__(self) -> str:
        return f"AllocateMachineRoomNearby({self.inner_strategy!r})"


STRATEGIES: dict[str, type[AllocateStrategy]] = {
    strategy.name: strategy
    for strategy in (
        AllocateAveragely,
        AllocateByCircle,
        AllocateConsistentHash,
        AllocateByConfig,
        AllocateByMachineRoom,
        AllocateMachineRoomNearby,
    )
}
"""Strategy classes by configuration name; the last three need constructor arguments."""
