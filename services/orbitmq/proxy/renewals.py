"""Invisibility renewed by the proxy for messages received with ``auto_renew`` (push consumers).

A push consumer receives with ``auto_renew`` and no invisible duration: the server, not the
client, keeps each message hidden until the client acks it, changes its invisibility (the
backoff of a failed message), forwards it to the dead letters, or goes away. RocketMQ's proxy
does this in its receipt-handle manager, and so does this one: the broker hides such a message
for a slice (``ProxySettings.auto_renew_slice_ms``) and :class:`Renewals` renews it shortly before the slice
runs out with ``ChangeInvisibleTime(renew=true)``, which keeps the receipt handle the client
holds valid (a renewal is the same delivery, not a new one).

Why it matters: the official clients' FIFO push consumer retries a failed message *locally*,
sleeping the settings' backoff between attempts, and only then forwards it to the dead letters
with the handle of its first delivery. Without renewals the message expired meanwhile: the
broker handed it out again (a second copy of the message group running beside the first) and
the client's forward failed on the stale handle, which it retries forever.

When the client is gone (``NotifyClientTermination``, or its last telemetry stream closed) its
messages are released: visible again after ``RELEASE_MS``, so other consumers get them soon.
A message is renewed for at most ``MAX_HOLD_MS`` after its receipt (orbitmq's consume timeout):
a listener stuck longer loses it to a redelivery. Nothing here must survive the proxy: after a
restart of the proxy the messages simply expire and are delivered again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from orbitmq.common.clock import Clock, SystemClock
from orbitmq.common.rpc import RpcFailure
from orbitmq.v1 import broker_pb2

log = logging.getLogger(__name__)

RENEW_AHEAD_MS = 10_000
"""Renew this long before a slice of invisibility runs out (RocketMQ's proxy: 10 s)."""
RELEASE_MS = 1_000
"""A gone client's messages become visible again this soon (RocketMQ's proxy: 1 s)."""
MAX_HOLD_MS = 15 * 60_000
"""Longest a message is kept hidden for its client: orbitmq's consume timeout (15 min)."""
TICK_S = 0.2
"""How often due renewals are looked for."""
RPC_TIMEOUT_S = 5.0
MAX_CONCURRENT = 64
"""Renewal calls in flight at once: a burst of due messages does not flood the brokers."""

BrokerCall = Callable[[str, str, Any, float], Awaitable[Any]]
"""``(broker name, method, request, timeout_s)`` → the reply of that broker group's master."""


@dataclass
class Held:
    """One auto-renewed delivery in a client's hands."""

    client_id: str
    group: str
    topic: str
    broker_name: str
    slice_ms: int
    received_ms: int
    invisible_until_ms: int


class Renewals:
    """Args:
    call: reaches a broker group's master, riding out a change of master
        (:meth:`orbitmq.proxy.consumers.Masters.call_through_failover`): a renewal due during a
        switchover reaches the new master, which holds the same delivery.
    client_alive: whether a client id is still connected (its telemetry stream is open).
    clock: wall-clock milliseconds, the broker's unit for invisibility deadlines.
    counted: told each outcome (``renewed``, ``released``, ``expired``, ``done``), for metrics.
    """

    def __init__(
        self,
        call: BrokerCall,
        client_alive: Callable[[str], bool],
        clock: Clock | None = None,
        counted: Callable[[str], None] = lambda outcome: None,
    ) -> None:
        self._call = call
        self._client_alive = client_alive
        self._clock = clock or SystemClock()
        self._counted = counted
        self._held: dict[str, Held] = {}
        self._slots = asyncio.Semaphore(MAX_CONCURRENT)

    def __len__(self) -> int:
        return len(self._held)

    def track(
        self,
        client_id: str,
        group: str,
        topic: str,
        broker_name: str,
        handle: str,
        slice_ms: int,
        invisible_until_ms: int,
    ) -> None:
        """Keep the delivery ``handle`` hidden while ``client_id`` holds it."""
        now = self._clock.now_ms()
        self._held[handle] = Held(client_id, group, topic, broker_name, slice_ms, now, invisible_until_ms)

    def forget(self, handle: str) -> None:
        """The client is done with ``handle`` (acked, changed, dead-lettered)."""
        self._held.pop(handle, None)

    async def run(self) -> None:
        """Renew and release until cancelled (a guarded task of the proxy)."""
        while True:
            await asyncio.sleep(TICK_S)
            await self.renew_due()

    async def renew_due(self) -> None:
        """One pass: renew what runs out soon, release what a gone client held."""
        now = self._clock.now_ms()
        due: list[tuple[str, Held, bool]] = []
        for handle, held in list(self._held.items()):
            if not self._client_alive(held.client_id):
                due.append((handle, held, True))
            elif now - held.received_ms >= MAX_HOLD_MS:
                log.warning(
                    "message %s of group %s held by %s past %d ms: no longer renewed",
                    handle,
                    held.group,
                    held.client_id,
                    MAX_HOLD_MS,
                )
                self._held.pop(handle, None)
                self._counted("expired")
            elif held.invisible_until_ms - now <= min(RENEW_AHEAD_MS, held.slice_ms // 2):
                due.append((handle, held, False))
        if due:
            await asyncio.gather(*(self._renew(handle, held, release) for handle, held, release in due))

    async def _renew(self, handle: str, held: Held, release: bool) -> None:
        """Hide the message another slice, or (``release``) only ``RELEASE_MS`` more."""
        request = broker_pb2.ChangeInvisibleTimeRequest(
            consumer_group=held.group,
            topic=held.topic,
            receipt_handle=handle,
            invisible_time_ms=RELEASE_MS if release else held.slice_ms,
            renew=True,
        )
        try:
            async with self._slots:
                reply = await self._call(held.broker_name, "ChangeInvisibleTime", request, RPC_TIMEOUT_S)
        except (grpc.aio.AioRpcError, RpcFailure) as error:  # tried again at the next pass
            log.warning("renewing %s of group %s failed: %s", handle, held.group, error)
            return
        if release or reply.result != broker_pb2.ACK_OK:
            self._held.pop(handle, None)  # released, or acked / handed out again meanwhile
            self._counted("released" if release else "done")
            return
        if handle in self._held:
            held.invisible_until_ms = reply.invisible_until_ms
            self._counted("renewed")
