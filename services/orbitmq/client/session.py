"""One session stream per broker: what the broker pushes to this client, and our answers.

Each stream starts with a hello naming the client and its groups; events are handed to the
owner's callback. A broken stream is reopened after a short pause, so a restarted broker
reaches its clients again without anyone noticing more than the pause.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from orbitmq.client.channels import Channels
from orbitmq.common.streams import queued_until
from orbitmq.common.tasks import TaskSet
from orbitmq.v1 import broker_pb2

log = logging.getLogger(__name__)

EventHandler = Callable[[str, broker_pb2.ServerEvent], Awaitable[None]]
RECONNECT_PAUSE_S = 1.0


class BrokerSessions:
    def __init__(
        self,
        channels: Channels,
        client_id: str,
        on_event: EventHandler,
        *,
        producer_groups: tuple[str, ...] = (),
        consumer_groups: tuple[str, ...] = (),
    ) -> None:
        self._channels = channels
        self._client_id = client_id
        self._on_event = on_event
        self._hello = broker_pb2.ClientEvent(
            hello=broker_pb2.SessionHello(
                client_id=client_id, producer_groups=producer_groups, consumer_groups=consumer_groups
            )
        )
        self._outgoing: dict[str, asyncio.Queue[broker_pb2.ClientEvent]] = {}
        self._tasks = TaskSet(f"sessions:{client_id}")
        self.connected: dict[str, asyncio.Event] = {}

    def ensure(self, address: str) -> None:
        if address not in self._outgoing:
            self._outgoing[address] = asyncio.Queue()
            self.connected[address] = asyncio.Event()
            self._tasks.spawn(f"session-{address}", self._run(address))

    async def send(self, address: str, event: broker_pb2.ClientEvent) -> None:
        self.ensure(address)
        await self._outgoing[address].put(event)

    async def _run(self, address: str) -> None:
        while True:
            try:
                await self._stream(address)
            except grpc.aio.AioRpcError as error:
                log.info("session with %s ended: %s", address, error.code().name)
            self.connected[address].clear()
            await asyncio.sleep(RECONNECT_PAUSE_S)

    async def _stream(self, address: str) -> None:
        queue = self._outgoing[address]
        ended = asyncio.Event()

        async def requests() -> AsyncIterator[broker_pb2.ClientEvent]:
            """The hello, then the address's queued events while this stream lasts
            (:mod:`orbitmq.common.streams`: the next stream's first event was lost)."""
            yield self._hello
            async for event in queued_until(queue, ended):
                yield event

        call = self._channels.broker(address).Session(requests())
        self.connected[address].set()
        try:
            async for event in call:
                try:
                    await self._on_event(address, event)
                except Exception:
                    log.exception("handling %s from %s failed", event.WhichOneof("event"), address)
        finally:
            ended.set()
            call.cancel()

    async def close(self) -> None:
        await self._tasks.close()
