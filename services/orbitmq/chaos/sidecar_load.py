"""An application behind ``orbitmq sidecar``: it sends through the sidecar and consumes from it.

It uses :class:`~orbitmq.sidecar.client.SidecarClient` as a user's app does: ``send`` (the
sidecar's producer retries through a failover) and ``deliveries`` with an ack per message. When
the sidecar goes away (killed; restarted by the harness on its address) the stream ends or
fails and the app opens it again; a paused sidecar holds the stream until it wakes. Deliveries
left unanswered when a stream ends are delivered again: re-deliveries, not loss.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import grpc

from orbitmq.chaos.gateways import SIDECAR_GROUP
from orbitmq.chaos.history import Delivery, History, Outcome
from orbitmq.client import SendResult, SendStatus
from orbitmq.sidecar.client import SidecarClient

RETRY_PAUSE_S = 0.2
SEND_PAUSE_S = 0.02
SEND_TIMEOUT_S = 15.0
"""Longer than the sidecar's own send budget (10 s): its answer, not ours, ends a send."""

Parse = Callable[[bytes], tuple[str, str | None, int | None]]
Record = Callable[..., Awaitable[Outcome]]


@dataclass
class SidecarApp:
    address: str
    topic: str
    history: History
    clock: Callable[[], float]
    parse: Parse
    body: Callable[[str], bytes]
    stream_restarts: int = 0
    _client: SidecarClient | None = None
    _consumer: asyncio.Task[None] | None = field(default=None, repr=False)

    def start(self) -> None:
        self._client = SidecarClient(self.address)
        self._consumer = asyncio.create_task(self._consume())

    async def close(self) -> None:
        if self._consumer is not None:
            self._consumer.cancel()
            await asyncio.gather(self._consumer, return_exceptions=True)
        if self._client is not None:
            await self._client.close()

    async def _consume(self) -> None:
        assert self._client is not None
        while True:
            try:
                async with contextlib.aclosing(self._client.deliveries(app_id="chaos-app")) as stream:
                    async for delivery in stream:
                        message_id, key, seq = self.parse(delivery.body)
                        self.history.add_delivery(
                            Delivery(
                                message_id,
                                SIDECAR_GROUP,
                                self.clock(),
                                delivery.queue_id,
                                delivery.queue_offset,
                                key,
                                seq,
                            )
                        )
                        await delivery.ack()
            except grpc.aio.AioRpcError:
                pass
            self.stream_restarts += 1
            await asyncio.sleep(RETRY_PAUSE_S)

    async def produce(self, sending: Callable[[], bool], record: Record) -> None:
        """Sends through the sidecar, one at a time, until ``sending()`` is False."""
        i = 0
        while sending():
            message_id = f"c{i}"
            await record([message_id], "sidecar", self._send(message_id))
            i += 1
            await asyncio.sleep(SEND_PAUSE_S)

    async def _send(self, message_id: str) -> SendResult:
        """The sidecar's answer as the client library's :class:`SendResult` (what ``record``
        judges); an unreachable or stopped sidecar raises (an unknown outcome)."""
        assert self._client is not None
        async with asyncio.timeout(SEND_TIMEOUT_S):
            reply = await self._client.send(self.topic, self.body(message_id))
        return SendResult(
            status=SendStatus.from_wire(reply.status),
            msg_id=reply.msg_id,
            offset_msg_id="",
            broker_name=reply.broker_name,
            queue_id=reply.queue_id,
            queue_offset=reply.queue_offset,
        )
