"""The v2 clients connected to this proxy, and the telemetry streams that reach them.

A v2 client opens one ``Telemetry`` stream per endpoint and keeps it open for its lifetime: it
sends its settings there and the server pushes commands back (transaction check-backs, later
others). The registry keeps, per client id (the ``x-mq-client-id`` header), the client's type,
the topics it publishes, the address its telemetry stream came from and a queue of commands
for its stream. A client is known as long as a stream of it is open; ``NotifyClientTermination``
or the end of its last stream forgets it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field

from orbitmq.rocketmq_v2 import definition_pb2 as v2
from orbitmq.rocketmq_v2 import service_pb2

log = logging.getLogger(__name__)

CLIENT_ID_HEADER = "x-mq-client-id"
COMMAND_QUEUE_LIMIT = 1024
"""Commands waiting for one slow stream; more are dropped (a check-back is asked again later)."""


@dataclass(eq=False)
class ClientStream:
    """One open telemetry stream of a client."""

    client_id: str
    commands: asyncio.Queue[service_pb2.TelemetryCommand] = field(
        default_factory=lambda: asyncio.Queue(COMMAND_QUEUE_LIMIT)
    )

    def push(self, command: service_pb2.TelemetryCommand) -> bool:
        """Queue ``command`` for the client; False when its stream is too far behind."""
        try:
            self.commands.put_nowait(command)
        except asyncio.QueueFull:
            log.warning("telemetry stream of client %s is full; command dropped", self.client_id)
            return False
        return True


@dataclass(eq=False)
class ClientInfo:
    client_id: str
    client_type: int = v2.CLIENT_TYPE_UNSPECIFIED
    namespace: str = ""
    topics: set[str] = field(default_factory=set)
    """Topics the client publishes (orbitmq names: the namespace already applied)."""
    streams: list[ClientStream] = field(default_factory=list)
    address: str = ""
    """``host:port`` its latest telemetry stream came from (the born host of its messages)."""


def peer_host(peer: str) -> str | None:
    """gRPC's peer (``ipv4:127.0.0.1:5555``, ``ipv6:[::1]:5555``) as RocketMQ writes a host,
    ``127.0.0.1:5555`` or ``[::1]:5555``; None for a peer without an IP address (a Unix socket)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4" and rest:
        return rest
    if kind == "ipv6":
        address, _, port = rest.rpartition(":")
        if port.isdigit() and address:
            return f"[{address.strip('[]').replace('%25', '%')}]:{port}"
    return None


class ClientRegistry:
    def __init__(self) -> None:
        self._clients: dict[str, ClientInfo] = {}
        self._turn = itertools.count()

    def get(self, client_id: str) -> ClientInfo | None:
        return self._clients.get(client_id)

    def _info(self, client_id: str) -> ClientInfo:
        info = self._clients.get(client_id)
        if info is None:
            info = self._clients[client_id] = ClientInfo(client_id)
        return info

    def open_stream(self, client_id: str, address: str = "") -> ClientStream:
        stream = ClientStream(client_id)
        info = self._info(client_id)
        info.streams.append(stream)
        if address:
            info.address = address
        return stream

    def close_stream(self, stream: ClientStream) -> None:
        info = self._clients.get(stream.client_id)
        if info is None:
            return
        if stream in info.streams:
            info.streams.remove(stream)
        if not info.streams:
            del self._clients[stream.client_id]

    def describe(self, client_id: str, client_type: int, namespace: str, topics: set[str]) -> ClientInfo:
        """Record what a client's settings say about it."""
        info = self._info(client_id)
        info.client_type = client_type
        info.namespace = namespace
        info.topics |= topics
        return info

    def publishes(self, client_id: str, topic: str) -> None:
        """A client sent to ``topic``: it can answer check-backs of it from now on."""
        info = self._clients.get(client_id)
        if info is not None:
            info.topics.add(topic)

    def forget(self, client_id: str) -> None:
        self._clients.pop(client_id, None)

    def publishers(self, topic: str) -> list[ClientStream]:
        """Open streams of producers of ``topic``, starting at a different one each call (check-backs
        spread over the producers, as the brokers spread them over producer group members)."""
        streams = [
            stream
            for info in self._clients.values()
            if info.client_type == v2.PRODUCER and topic in info.topics
            for stream in info.streams
        ]
        if not streams:
            return []
        start = next(self._turn) % len(streams)
        return streams[start:] + streams[:start]

    def client_types(self) -> list[int]:
        """The type of every known client (as its settings said; unspecified until they came)."""
        return [info.client_type for info in self._clients.values()]

    def topics_published(self) -> set[str]:
        return {t for info in self._clients.values() if info.client_type == v2.PRODUCER for t in info.topics}

    def __len__(self) -> int:
        return len(self._clients)

    def stream_count(self) -> int:
        """Open telemetry streams of every client."""
        return sum(len(info.streams) for info in list(self._clients.values()))
