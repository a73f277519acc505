"""The sidecar process: a push consumer for the configured group, served to local applications.

``run`` starts the consumer and the local gRPC server (health, reflection, ``/metrics``), and on
SIGTERM drains: stop fetching and handing out, wait (up to ``drain_timeout_ms``) for the
acknowledgements of deliveries in flight, withdraw the rest unacknowledged, then close the
consumer (offsets persisted, queue locks released, group left) — a rolling restart neither
loses nor duplicates messages.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_metrics import ConsumerMetrics
from orbitmq.client.consumer_types import (
    ConsumeFromWhere,
    ConsumerSettings,
    ConsumeStatus,
    MessageModel,
    MessageVerdicts,
    OrderlyStatus,
)
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.common.auth_sync import SyncedTables
from orbitmq.common.credentials import Credentials
from orbitmq.common.guard import sidecar_guard
from orbitmq.common.heap import freeze_startup_heap
from orbitmq.common.rpc import RpcFailure
from orbitmq.common.server import GrpcServer
from orbitmq.common.tls import ClientTls
from orbitmq.common.topics import Property, split_keys
from orbitmq.sidecar.hub import SUCCESS, AppStream, DeliveryHub, StreamDetached, to_deliveries, to_records
from orbitmq.sidecar.settings import SidecarSettings
from orbitmq.store.record import StoredMessage
from orbitmq.v1 import broker_pb2, common_pb2, sidecar_pb2, sidecar_pb2_grpc
from orbitmq.v1.broker_pb2 import ErrorReason
from orbitmq.v1.sidecar_pb2 import AckStatus

log = logging.getLogger(__name__)

SERVICE = "orbitmq.v1.Sidecar"
BATCH = 64
"""Most deliveries sent to an application in one stream message."""
FROM = {
    "first": ConsumeFromWhere.FIRST_OFFSET,
    "last": ConsumeFromWhere.LAST_OFFSET,
    "timestamp": ConsumeFromWhere.TIMESTAMP,
}


_CONSUME_STATUS = {AckStatus.SUCCESS: ConsumeStatus.CONSUME_SUCCESS, None: None}
"""Application verdicts as the consumer takes them: None (withdrawn) stays uncommitted."""


def listener_shape(max_in_flight: int, orderly: bool) -> tuple[int, int]:
    """(listener calls at once, messages per call) for the sidecar's consumer.

    The hub enforces ``max_in_flight``; the consumer offers more so it never starves: as many
    calls as that (a call may hold a single message: pulls split by queue), each of a batch in
    concurrent mode — up to half of ``max_in_flight`` (at most a pull's 32), so a call's
    bookkeeping is shared by many messages while a slow one holds back only its own call.
    Orderly mode hands over one message at a time.
    """
    if orderly:
        return max_in_flight, 1
    return max_in_flight, max(1, min(32, max_in_flight // 2))


def sidecar_auth_sync(settings: SidecarSettings) -> SyncedTables | None:
    """What keeps a sidecar with auth on in step with the brokers' users: fetched as the
    sidecar's own cluster credentials (``ORBITMQ_ACCESS_KEY``/``_SECRET_KEY``, a super user)."""
    if not settings.auth_enabled:
        return None
    credentials = Credentials.from_env()
    if credentials is None:
        log.warning(
            "sidecar auth is on but it has no ORBITMQ_ACCESS_KEY/ORBITMQ_SECRET_KEY: its applications "
            "are checked against --auth-users-file and the bootstrap super user only, not the users "
            "stored on the brokers"
        )
        return None
    return SyncedTables(
        settings.namesrv, ClientTls.from_env(), credentials, settings.auth_sync_interval_ms / 1000
    )


class Sidecar:
    def __init__(self, settings: SidecarSettings) -> None:
        self.settings = settings
        self.hub = DeliveryHub(settings.max_in_flight)
        self.auth_sync = sidecar_auth_sync(settings)
        """The brokers' users and ACLs, fetched from the name servers (auth on and the sidecar
        signs toward the cluster); None: the users file and the bootstrap super user only."""
        self.grpc = GrpcServer(
            "sidecar",
            settings.listen,
            metrics_listen=settings.metrics_listen,
            tls=settings,
            guard=sidecar_guard(settings, self.auth_sync),
        )
        self.metrics = ConsumerMetrics(settings.group, settings.instance_name, registry=self.grpc.registry)
        threads, batch = listener_shape(settings.max_in_flight, settings.orderly)
        self.grpc.registry.register(_SidecarCollector(self))
        self.grpc.runtime.table("sidecar_app_streams", lambda: self.hub.streams)
        self.consumer = PushConsumer(
            settings.group,
            settings.namesrv,
            listener=self._listen_orderly if settings.orderly else self._listen,
            orderly=settings.orderly,
            message_model=MessageModel(settings.message_model),
            consume_from=FROM[settings.consume_from],
            consume_timestamp_ms=settings.consume_timestamp_ms,
            settings=ConsumerSettings(
                consume_threads=threads,
                consume_batch=batch,
                rebalance_ms=settings.rebalance_ms,
                persist_ms=settings.persist_ms,
                heartbeat_ms=settings.heartbeat_ms,
                lock_renew_ms=settings.lock_renew_ms,
                route_refresh_ms=settings.route_refresh_ms,
                shutdown_timeout_ms=1_000,
            ),
            instance_name=settings.instance_name,
            metrics=self.metrics,
        )
        for spec in settings.specs:
            self.consumer.subscribe(spec.topic, spec.expression, sql=spec.sql)
        self.producer = Producer(
            f"{settings.group}-sidecar",
            settings.namesrv,
            send_timeout_ms=settings.send_timeout_ms,
            heartbeat_ms=settings.heartbeat_ms,
        )
        self.address = ""

    # -- listeners (the push consumer calls these) -----------------------------------------------

    async def _listen(self, messages: list[StoredMessage]) -> ConsumeStatus | MessageVerdicts:
        """A batch at once; each message gets the application's own verdict."""
        verdicts = await self.hub.deliver(messages)
        if verdicts.count(SUCCESS) == len(verdicts):
            return ConsumeStatus.CONSUME_SUCCESS
        return MessageVerdicts([_CONSUME_STATUS.get(v, ConsumeStatus.RECONSUME_LATER) for v in verdicts])

    async def _listen_orderly(self, messages: list[StoredMessage]) -> OrderlyStatus:
        """One message at a time: the next is handed out only after this one succeeded."""
        for message in messages:
            if await self.hub.deliver([message]) != [AckStatus.SUCCESS]:
                return OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return OrderlyStatus.SUCCESS

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self.grpc.add_service(
            SERVICE, lambda s: sidecar_pb2_grpc.add_SidecarServicer_to_server(_Servicer(self), s)
        )
        self.grpc.bind()
        self.address = self.grpc.address
        if self.auth_sync is not None:
            await self.auth_sync.start()  # the brokers' users known before applications connect
        await self.producer.start()
        await self.consumer.start()
        await self.grpc.start()

    async def drain(self) -> None:
        """Stop fetching, collect in-flight acknowledgements (bounded), leave the group."""
        started = time.monotonic()
        await self.grpc.set_serving(False)
        self.consumer.suspend()
        await self.hub.set_paused(True)
        withdrawn = self.hub.cancel_waiting()
        deadline = started + self.settings.drain_timeout_ms / 1000
        while self.hub.in_flight and time.monotonic() < deadline:  # noqa: ASYNC110 - bounded poll
            await asyncio.sleep(0.02)
        unanswered = self.hub.cancel_all()
        await self.consumer.close()
        await self.producer.close()
        if self.auth_sync is not None:
            await self.auth_sync.stop()
        log.info(
            "sidecar drained in %.2f s: %d delivery(ies) withdrawn before hand-out, %d unanswered",
            time.monotonic() - started,
            withdrawn,
            unanswered,
        )
        await self.grpc.stop(1.0)


class _Servicer(sidecar_pb2_grpc.SidecarServicer):
    def __init__(self, sidecar: Sidecar) -> None:
        self.s = sidecar

    async def Consume(self, request_iterator, context) -> AsyncIterator[sidecar_pb2.Deliveries]:  # type: ignore[no-untyped-def,override]
        hub = self.s.hub
        first = await anext(aiter(request_iterator))
        if first.WhichOneof("kind") != "hello":
            raise RpcFailure(ErrorReason.INVALID_ARGUMENT, "a Consume stream starts with a hello")
        if first.hello.max_in_flight < 0:
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT, f"max_in_flight must be >= 0, got {first.hello.max_in_flight}"
            )
        stream = AppStream(
            first.hello.app_id or context.peer(),
            first.hello.max_in_flight or self.s.settings.max_in_flight,
            first.hello.records,
        )
        await hub.attach(stream)
        log.info("application %s connected (max in flight %d)", stream.app_id, stream.max_in_flight)

        async def read_acks() -> None:
            async for request in request_iterator:
                if request.WhichOneof("kind") == "acks":
                    acks = request.acks
                    if acks.succeeded:
                        await hub.ack_succeeded(stream, acks.succeeded)
                    if acks.acks:
                        await hub.ack_many(stream, [(_number(a.delivery_id), a.status) for a in acks.acks])

        reader = asyncio.get_running_loop().create_task(read_acks())
        # The application closed its side (or sent what does not parse): a take waiting ends.
        reader.add_done_callback(lambda _: hub.end(stream))
        deliveries = to_records if stream.records else to_deliveries
        try:
            while True:
                try:
                    taken = await hub.next_for(stream, BATCH)
                except StreamDetached:
                    return  # the application is gone; what it held (even just taken) is re-queued
                yield deliveries(taken)
        finally:
            # gRPC cancels this handler (and a take waiting in it) when the application goes.
            reader.cancel()
            await hub.detach(stream)
            log.info("application %s disconnected", stream.app_id)

    async def Send(self, request, context):  # type: ignore[no-untyped-def]
        """The library producer's send (it rides out a failover); a send that fails for good
        reaches the application as one status whose reason and one-line message name the
        topic and the broker (``SendFailed``, mapped like any ``RpcFailure``)."""
        return await self._send_one(request)

    async def SendBatch(self, request, context):  # type: ignore[no-untyped-def]
        async def one(send: sidecar_pb2.SidecarSendRequest) -> sidecar_pb2.SidecarSendOutcome:
            try:
                return sidecar_pb2.SidecarSendOutcome(result=await self._send_one(send))
            except RpcFailure as failure:
                return sidecar_pb2.SidecarSendOutcome(reason=failure.reason, error=failure.message)

        outcomes = await asyncio.gather(*(one(send) for send in request.sends))
        return sidecar_pb2.SidecarSendBatchResponse(outcomes=outcomes)

    async def _send_one(self, request: sidecar_pb2.SidecarSendRequest) -> sidecar_pb2.SidecarSendResponse:
        try:
            message = message_of(request.message)
            result = await self.s.producer.send(message, sharding_key=request.sharding_key or None)
        except (ValueError, TypeError) as error:  # a bad message (names are mapped already)
            raise RpcFailure(ErrorReason.MESSAGE_ILLEGAL, str(error)) from None
        return sidecar_pb2.SidecarSendResponse(
            status=broker_pb2.SendStatus.Value(result.status.value),
            msg_id=result.msg_id,
            broker_name=result.broker_name,
            queue_id=result.queue_id,
            queue_offset=result.queue_offset,
        )

    async def Pause(self, request, context):  # type: ignore[no-untyped-def]
        self.s.consumer.suspend()
        await self.s.hub.set_paused(True)
        return sidecar_pb2.PauseResponse()

    async def Resume(self, request, context):  # type: ignore[no-untyped-def]
        await self.s.hub.set_paused(False)
        self.s.consumer.resume()
        return sidecar_pb2.ResumeResponse()


def _number(delivery_id: str) -> int:
    """A delivery id as the hub keys it; 0 (no delivery's) for one that is not a number."""
    return int(delivery_id) if delivery_id.isdecimal() else 0


def message_of(wire: common_pb2.Message) -> Message:
    """The library message for a sidecar send: the wire carries tags, keys and timing as their
    system properties (``TAGS``, ``KEYS``, ``DELAY``, ``TIMER_DELIVER_MS``, ``TIMER_DELAY_MS``,
    ``TIMER_DELAY_SEC``), which become the message's fields; any other system name (``UNIQ_KEY``,
    ``REAL_TOPIC``, ...) is refused by the message, naming it (``ValueError``)."""
    properties = dict(wire.properties)
    fields: dict[str, Any] = {}
    if Property.TAGS in properties:
        fields["tags"] = properties.pop(Property.TAGS)
    if Property.KEYS in properties:
        fields["keys"] = list(split_keys(properties.pop(Property.KEYS)))
    for name, field, unit in _TIMING:
        if name in properties:
            text = properties.pop(name)
            if not text.isdigit():
                raise ValueError(f"property {name} {text!r} must be a non-negative whole number")
            if field in fields:
                raise ValueError(f"set one of {', '.join(n for n, _, _ in _TIMING)}, not several")
            fields[field] = int(text) * unit
    return Message(wire.topic, wire.body, properties=properties, flag=wire.flag, **fields)


_TIMING = (
    (Property.DELAY, "delay_level", 1),
    (Property.TIMER_DELIVER_MS, "deliver_at_ms", 1),
    (Property.TIMER_DELAY_MS, "delay_ms", 1),
    (Property.TIMER_DELAY_SEC, "delay_ms", 1000),
)
"""Timing properties of the sidecar's wire and the message field each sets (times its unit)."""


class _SidecarCollector(Collector):
    def __init__(self, sidecar: Sidecar) -> None:
        self._s = sidecar

    def collect(self):  # type: ignore[no-untyped-def]
        hub, group = self._s.hub, self._s.settings.group
        yield _gauge(
            "orbitmq_sidecar_in_flight", "Deliveries handed out, not yet acknowledged", group, hub.in_flight
        )
        yield _gauge("orbitmq_sidecar_waiting", "Deliveries waiting for an application", group, hub.waiting)
        deliveries = CounterMetricFamily(
            "orbitmq_sidecar_deliveries",
            "Deliveries handed to applications (redelivered: after a disconnect)",
            labels=["group", "kind"],
        )
        deliveries.add_metric([group, "all"], hub.delivered)
        deliveries.add_metric([group, "redelivered"], hub.redelivered)
        yield deliveries
        acks = CounterMetricFamily(
            "orbitmq_sidecar_acks", "Acknowledgements by status", labels=["group", "status"]
        )
        for status in ("SUCCESS", "LATER", "SUSPEND"):
            acks.add_metric([group, status], hub.acks.get(status, 0))
        yield acks


def _gauge(name: str, documentation: str, group: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=["group"])
    family.add_metric([group], value)
    return family


async def run(settings: SidecarSettings) -> None:
    """Run a sidecar until SIGTERM or SIGINT, then drain."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    sidecar = Sidecar(settings)
    try:
        await sidecar.start()
    except (grpc.aio.AioRpcError, OSError, RpcFailure) as error:
        print(f"orbitmq sidecar: cannot start: {error}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    freeze_startup_heap()  # GC passes walk only what consuming builds, as in the broker
    print(
        f"sidecar {settings.group} listening on {sidecar.address} metrics {sidecar.grpc.metrics_url}",
        flush=True,
    )
    await stop.wait()
    await sidecar.drain()
