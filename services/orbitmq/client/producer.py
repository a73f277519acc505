"""Producers (RocketMQ's DefaultMQProducer and TransactionMQProducer), asyncio-native.

A producer learns each topic's write queues from the name servers, picks a queue round-robin
from a random start per topic (skipping brokers that latency-based fault avoidance has set
aside), and retries a retriable failure within the send's time budget, on a route fetched
again each time, preferring another broker (:mod:`orbitmq.client.retry` holds the policy: what
is retried, for how long, how often). So a send rides out a master failover: it keeps trying
until the new master is registered. Ordered messages pick their queue by a hash of a sharding
key instead, and are never moved to another queue (a retry goes to the same queue, wherever its
broker's master now is).
Routes are refreshed every 30 s and after a failure; producers heartbeat their group to the
brokers they use.

Sends that arrive while a call to their destination is in flight leave together in one batch
call, each with its own result, budget and retries (``auto_batch``, on by default:
:mod:`orbitmq.client.accumulator`); a send to an idle destination leaves at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import random
import socket
import time
import zlib
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

import grpc

from orbitmq.client import send_wire
from orbitmq.client.accumulator import (
    DEFAULT_IN_FLIGHT,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_MESSAGES,
    PendingSend,
    SendAccumulator,
)
from orbitmq.client.channels import Channels
from orbitmq.client.faults import LatencyFaults
from orbitmq.client.message import Message, SendResult, SendStatus, UniqueKeys
from orbitmq.client.producer_routes import WriteQueue, WriteRoutes
from orbitmq.client.retry import SendFailed, SendRetryPolicy, classify
from orbitmq.client.session import BrokerSessions
from orbitmq.common.clock import MONOTONIC_CLOCK, Clock
from orbitmq.common.credentials import Credentials
from orbitmq.common.names import validate_group_name, validate_topic_name
from orbitmq.common.rpc import RpcFailure
from orbitmq.common.tasks import TaskSet
from orbitmq.common.tls import ClientTls
from orbitmq.common.topics import Property
from orbitmq.store.record import StoredMessage, decode
from orbitmq.v1 import broker_pb2, broker_pb2_grpc
from orbitmq.v1.broker_pb2 import TransactionResolution

log = logging.getLogger(__name__)

_SEND_METHOD = "/orbitmq.v1.Broker/SendMessage"


def client_id() -> str:
    """``host@pid``: unique per process, stable for its lifetime (RocketMQ's clientId)."""
    return f"{socket.gethostname()}@{os.getpid()}"


def sharding_queue(key: str, count: int) -> int:
    """Queue for an ordered key: hash first (crc32), then modulo, so keys spread evenly."""
    return zlib.crc32(key.encode()) % count


class Producer:
    """Sends messages; see the module docstring.

    Args:
        group: producer group (transaction check-backs go to any member of it).
        namesrv: name servers ``host:port;host:port`` (default: ``ORBITMQ_NAMESRV``, then
            127.0.0.1:9876).
        send_timeout_ms: budget of one send, retries included (default 10 000 ms: longer than a
            master failover, so sends ride one out); a send's ``timeout_ms`` overrides it.
        attempt_timeout_ms: longest wait for one broker's answer (default 5 000 ms).
        retry_backoff_ms: pause before the first retry, doubled on each further one up to
            ``retry_backoff_max_ms`` (defaults 50 ms and 1 000 ms).
        route_refresh_ms, heartbeat_ms: periodic route refresh and broker heartbeat (30 s each).
        probe_interval_ms: how often a broker set aside after a failed send is probed (1 000
            ms); one that answers gets sends again (:mod:`orbitmq.client.faults`).
        default_topic_queue_nums: queues of a topic that the first send auto-creates (4).
        clock: time source of latency fault avoidance (monotonic: a wall-clock step must not
            end or prolong a broker's pause; tests pass a ManualClock).
        auto_batch: coalesce sends that arrive while a call to their destination is in flight
            into one batch call (RocketMQ's ``autoBatch``; default on). Off, every send is a
            call of its own.
        auto_batch_max_messages, auto_batch_max_bytes: most messages (256) and encoded bytes
            (4 MiB) in one coalesced call.
        auto_batch_in_flight: calls in flight at once per topic for round-robin sends (2);
            sends with a sharding key or a named queue have one per queue, to keep their order.
        credentials: what every call is signed with, for clusters with auth on (default:
            ``ORBITMQ_ACCESS_KEY``/``ORBITMQ_SECRET_KEY``, none when unset).
        tls: TLS toward the cluster (default: ``ORBITMQ_TLS_*``, plaintext when unset). A send
            to a broker that refuses the handshake fails at once naming the cause
            (:class:`~orbitmq.common.tls.TlsError` as its failure), not at the end of its budget.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | None = None,
        *,
        send_timeout_ms: int = 10_000,
        attempt_timeout_ms: int = 5_000,
        retry_backoff_ms: int = 50,
        retry_backoff_max_ms: int = 1_000,
        route_refresh_ms: int = 30_000,
        heartbeat_ms: int = 30_000,
        probe_interval_ms: int = 1_000,
        default_topic_queue_nums: int = 4,
        clock: Clock = MONOTONIC_CLOCK,
        auto_batch: bool = True,
        auto_batch_max_messages: int = DEFAULT_MAX_MESSAGES,
        auto_batch_max_bytes: int = DEFAULT_MAX_BYTES,
        auto_batch_in_flight: int = DEFAULT_IN_FLIGHT,
        credentials: Credentials | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        validate_group_name(group)
        self.group = group
        self.client_id = client_id()
        self._channels = Channels(namesrv, tls=tls, credentials=credentials)
        self.retry = SendRetryPolicy(
            send_timeout_ms, attempt_timeout_ms, retry_backoff_ms, retry_backoff_max_ms
        )
        """The retry policy of every send (:mod:`orbitmq.client.retry`)."""
        self._send_timeout_s = send_timeout_ms / 1000
        self._route_refresh_s = route_refresh_ms / 1000
        self._heartbeat_s = heartbeat_ms / 1000
        self._probe_interval_s = probe_interval_ms / 1000
        self._default_queue_nums = default_topic_queue_nums
        self._round_robin: dict[str, int] = {}
        self._brokers: set[str] = set()
        self._faults = LatencyFaults(clock)
        self._routes = WriteRoutes(self._channels, self._faults, default_topic_queue_nums)
        self._keys = UniqueKeys()
        self._tasks = TaskSet(f"producer:{group}")
        self._pending: set[asyncio.Future[Any]] = set()
        self._started = False
        self._accumulator = (
            SendAccumulator(
                self,
                f"producer:{group}",
                max_messages=auto_batch_max_messages,
                max_bytes=auto_batch_max_bytes,
                in_flight=auto_batch_in_flight,
            )
            if auto_batch
            else None
        )
        self._valid_topics: set[str] = set()
        """Topic names already checked: the name rule's regex need not run on every send."""
        self._route_gates: dict[str, asyncio.Lock] = {}
        self._gated: dict[str, int] = {}
        """Ordered sends per topic waiting for its first route: later ones queue behind them."""
        self._send_calls: dict[str, tuple[grpc.aio.Channel, grpc.aio.UnaryUnaryMultiCallable]] = {}

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def start(self) -> None:
        self._started = True
        self._tasks.spawn("route-refresh", self._refresh_loop())
        self._tasks.spawn("heartbeat", self._heartbeat_loop())
        self._tasks.spawn("fault-probe", self._probe_loop())

    async def close(self) -> None:
        """Wait for in-flight async sends, leave the brokers, close channels; idempotent."""
        if not self._started:
            return
        self._started = False
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=self._send_timeout_s)
        if self._accumulator is not None:
            await self._accumulator.close()
        await self._tasks.close()
        for address in list(self._brokers):
            with contextlib.suppress(grpc.aio.AioRpcError):
                await self._channels.broker(address).UnregisterClient(
                    broker_pb2.UnregisterClientRequest(client_id=self.client_id, producer_group=self.group),
                    timeout=2,
                )
        await self._channels.close()

    # -- routes --------------------------------------------------------------------------------

    async def write_queues(self, topic: str, *, refresh: bool = False) -> list[WriteQueue]:
        """The topic's write queues, from the cache unless ``refresh`` (or not cached yet)."""
        return await self._routes.write_queues(topic, refresh=refresh)

    async def _refresh_route(self, topic: str, stale: list[WriteQueue] | None) -> list[WriteQueue]:
        return await self._routes.refresh(topic, stale)

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self._route_refresh_s)
            await self._routes.refresh_all()

    async def _heartbeat_loop(self) -> None:
        while True:
            await self._heartbeat_all()
            await asyncio.sleep(self._heartbeat_s)

    async def _heartbeat_all(self) -> None:
        for address in list(self._brokers):
            await self._heartbeat(address)

    def _heartbeat_request(self) -> broker_pb2.HeartbeatRequest:
        return broker_pb2.HeartbeatRequest(
            client_id=self.client_id, producers=[broker_pb2.ProducerData(group=self.group)]
        )

    async def _heartbeat(self, address: str) -> None:
        try:
            await self._channels.broker(address).Heartbeat(self._heartbeat_request(), timeout=3)
        except grpc.aio.AioRpcError as error:
            log.info("heartbeat to %s failed: %s", address, error.code().name)

    async def _probe_loop(self) -> None:
        """Probe each broker set aside after a failed send (RocketMQ 5's fault detector): one
        that answers is back (a restart, a network blip) and gets sends again at once."""
        while True:
            await asyncio.sleep(self._probe_interval_s)
            await self._probe_failed_brokers()

    async def _probe_failed_brokers(self) -> None:
        addresses = self._routes.addresses()
        for name in self._faults.probe_candidates():
            address = addresses.get(name)
            if address is not None and await self._probe(address):
                log.info("broker %s (%s) answers again; sends go to it", name, address)
                # The producer's channel may still wait out gRPC's reconnect backoff (up to 5 s)
                # and fail sends at once meanwhile: the next send opens a new one.
                self._channels.reconnect(address)
                self._faults.forget(name)

    async def _probe(self, address: str) -> bool:
        """Whether the broker at ``address`` answers a heartbeat on a channel of its own (the
        producer's may still wait out a reconnect backoff, see :meth:`Channels.reconnect`)."""
        async with self._channels.fresh_channel(address) as channel:  # with the client's TLS
            try:
                stub = broker_pb2_grpc.BrokerStub(channel)
                await stub.Heartbeat(self._heartbeat_request(), timeout=self._probe_interval_s)
            except grpc.aio.AioRpcError:
                return False
        return True

    # -- sending -------------------------------------------------------------------------------

    def _choose(self, topic: str, queues: list[WriteQueue], avoid: Collection[str] = ()) -> WriteQueue:
        """The next queue round robin: on a broker not in ``avoid`` (it just failed or refused
        this send) and not set aside by fault avoidance; else one merely not in ``avoid``
        (RocketMQ's fallback: any queue not on the last failed broker); else the next."""
        if topic not in self._round_robin:
            # A random start per producer and topic (RocketMQ's ThreadLocalIndex): starting at
            # queue 0 put every short-lived producer's messages (``produce --count 1``, each
            # Spark writer task) into queue 0.
            self._round_robin[topic] = random.randrange(len(queues)) - 1
        start = self._round_robin[topic] + 1
        for step in range(len(queues)):
            queue = queues[(start + step) % len(queues)]
            if queue.broker_name != avoid and self._faults.available(queue.broker_name):
                self._round_robin[topic] = start + step
                return queue
        for step in range(len(queues)):
            queue = queues[(start + step) % len(queues)]
            if queue.broker_name not in avoid:
                self._round_robin[topic] = start + step
                return queue
        self._round_robin[topic] = start
        return queues[start % len(queues)]

    async def send(
        self,
        message: Message,
        *,
        sharding_key: str | None = None,
        queue: WriteQueue | None = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        """Send one message and wait for the broker's answer.

        ``sharding_key`` picks the queue by hash (ordered messages: same key, same queue, in
        send order); ``queue`` names it outright. Otherwise round robin with fault avoidance and
        retries on another broker.
        """
        if self._accumulator is None or not send_wire.coalescable(message):
            return await self._send([message], sharding_key=sharding_key, queue=queue, timeout_ms=timeout_ms)
        pending = self._pending_send(message, timeout_ms)
        if sharding_key is None and queue is None:
            self._accumulator.submit(message.topic, None, pending)
        else:
            await self._submit_ordered(message.topic, sharding_key, queue, pending)
        return await pending

    def _pending_send(self, message: Message, timeout_ms: int | None) -> PendingSend:
        """``message`` checked and encoded for a lane; raises for bad input as :meth:`_send`."""
        started = time.perf_counter()
        topic = message.topic
        if topic not in self._valid_topics:
            validate_topic_name(topic)
            self._valid_topics.add(topic)
        if not isinstance(message.body, bytes | bytearray):
            raise TypeError(f"message body must be bytes, not {type(message.body).__name__}")
        key = message.system_properties.get(Property.UNIQ_KEY) or self._keys.next()
        framed = send_wire.frame(message, key)
        pending = PendingSend()
        pending.framed = framed
        pending.born_host = message.born_host
        pending.msg_id = key
        pending.policy = self.retry.with_budget(timeout_ms)
        pending.started = started
        pending.attempts = 0
        pending.refused = frozenset()
        pending.alone = False
        return pending

    async def _submit_ordered(
        self, topic: str, sharding_key: str | None, queue: WriteQueue | None, pending: PendingSend
    ) -> None:
        """Queue an ordered send in its queue's lane. Until the topic's route is known, ordered
        sends wait for it one behind the other (and later ones behind them), so they reach
        their lanes in the order they were called."""
        assert self._accumulator is not None
        queues = self._routes.get(topic)
        if queue is None and (queues is None or self._gated.get(topic)):
            self._gated[topic] = self._gated.get(topic, 0) + 1
            try:
                async with self._route_gates.setdefault(topic, asyncio.Lock()):
                    queues = await self._route_within_budget(topic, pending)
                    queue = queues[sharding_queue(sharding_key, len(queues))]  # type: ignore[arg-type]
                    self._accumulator.submit(topic, queue, pending)
                    return
            finally:
                self._gated[topic] -= 1
        if queue is None:
            assert queues is not None and sharding_key is not None
            queue = queues[sharding_queue(sharding_key, len(queues))]
        self._accumulator.submit(topic, queue, pending)

    async def _route_within_budget(self, topic: str, pending: PendingSend) -> list[WriteQueue]:
        """The topic's route, fetched again after a retriable failure while the send's budget
        lasts; raises :class:`SendFailed` as a send would."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self.write_queues(topic)
            except (grpc.aio.AioRpcError, RpcFailure) as error:
                pause_ms = self._pause_after(error, topic, None, pending.policy, attempt, pending.started)
                await asyncio.sleep(pause_ms / 1000)

    async def send_batch(self, messages: Sequence[Message], *, queue: WriteQueue | None = None) -> SendResult:
        """Send messages of one topic as one call, stored contiguously in one queue."""
        if not messages:
            raise ValueError("a batch needs at least one message")
        topics = {m.topic for m in messages}
        if len(topics) != 1:
            raise ValueError(f"a batch must hold one topic, not {sorted(topics)}")
        return await self._send(list(messages), queue=queue)

    def send_async(
        self,
        message: Message,
        callback: Callable[[SendResult | None, BaseException | None], object] | None = None,
    ) -> asyncio.Future[SendResult]:
        """Start a send; returns its future, and calls ``callback(result, error)`` when done."""
        future: asyncio.Future[SendResult] | None = None
        if self._accumulator is not None and send_wire.coalescable(message):
            try:
                future = self._pending_send(message, None)
            except (ValueError, TypeError):
                future = None  # the send below raises it again, into the future
            else:
                self._accumulator.submit(message.topic, None, future)
        if future is None:
            future = asyncio.get_running_loop().create_task(self.send(message))
        self._pending.add(future)

        def finished(done: asyncio.Future[SendResult]) -> None:
            self._pending.discard(done)
            error = None if done.cancelled() else done.exception()
            if callback is not None:
                callback(None if error or done.cancelled() else done.result(), error)
            elif error is not None:
                log.warning("async send to %s failed: %s", message.topic, error)

        future.add_done_callback(finished)
        return future

    def send_oneway(self, message: Message) -> None:
        """Send without waiting for or reporting the result (logs only)."""
        self.send_async(message)

    async def _send(
        self,
        messages: list[Message],
        *,
        sharding_key: str | None = None,
        queue: WriteQueue | None = None,
        timeout_ms: int | None = None,
        sys_flag: int = 0,
        extra: dict[str, str] | None = None,
    ) -> SendResult:
        """Send within the retry policy's budget; raises :class:`SendFailed` (one line naming
        the topic, the broker and the reason) when a failure is not retriable or time is up."""
        topic = messages[0].topic
        validate_topic_name(topic)
        for message in messages:
            if not isinstance(message.body, bytes | bytearray):
                raise TypeError(f"message body must be bytes, not {type(message.body).__name__}")
        protos = [m.to_proto(self._keys.next()) for m in messages]
        if extra:
            for proto in protos:
                proto.properties.update(extra)
        born_host = messages[0].born_host
        if any(m.born_host != born_host for m in messages):  # each says its own (see the proto)
            for proto, message in zip(protos, messages, strict=True):
                proto.born_host = message.born_host or ""
            born_host = None
        request = broker_pb2.SendMessageRequest(
            producer_group=self.group,
            topic=topic,
            messages=protos,
            sys_flag=sys_flag,
            default_topic_queue_nums=self._default_queue_nums,
            born_host=born_host or "",
        )
        policy = self.retry.with_budget(timeout_ms)
        started = time.perf_counter()
        queues = self._routes.get(topic)
        target: WriteQueue | None = None
        refused: set[str] = set()
        """Broker groups that refused this send for a reason of their own (a full disk)."""
        attempt = 0
        while True:
            attempt += 1
            elapsed_ms = (time.perf_counter() - started) * 1000
            try:
                if queues is None:
                    queues = await self.write_queues(topic)
                target = self._target(topic, queues, sharding_key, queue, target, attempt, refused)
                attempt_started = time.perf_counter()
                reply = await self._send_to(target, request, policy.attempt_timeout_s(elapsed_ms))
            except (grpc.aio.AioRpcError, RpcFailure) as error:
                pinned = sharding_key is not None or queue is not None
                if not pinned and self._moves_on(error, topic, target, queues, refused):
                    continue
                pause_ms = self._pause_after(error, topic, target, policy, attempt, started)
                await asyncio.sleep(pause_ms / 1000)
                queues = await self._refresh_quietly(topic, queues)
                continue
            # This attempt's latency: earlier attempts' failures and pauses are not this broker's.
            self._faults.record(target.broker_name, (time.perf_counter() - attempt_started) * 1000)
            return SendResult(
                status=SendStatus.from_wire(reply.status),
                msg_id=protos[0].properties[Property.UNIQ_KEY],
                offset_msg_id=reply.msg_ids[0] if reply.msg_ids else "",
                broker_name=reply.broker_name,
                queue_id=reply.queue_id,
                queue_offset=reply.queue_offset,
                transaction_id=reply.transaction_id,
                commit_log_offset=reply.commit_log_offset,
            )

    def _moves_on(
        self,
        error: grpc.aio.AioRpcError | RpcFailure,
        topic: str,
        target: WriteQueue | None,
        queues: list[WriteQueue] | None,
        refused: set[str],
    ) -> bool:
        """Whether a send ``target``'s broker refused for a reason of its own (``DISK_FULL``)
        goes on to another broker group of the route now (one that has not refused it yet);
        notes the refusal in ``refused`` and sets the broker aside for other sends too."""
        failure = classify(error)
        if not failure.moves or target is None or queues is None:
            return False
        refused.add(target.broker_name)
        self._faults.record(target.broker_name, 0, failed=True)
        if all(q.broker_name in refused for q in queues):
            return False
        log.info(
            "send to topic %s refused by broker %s (%s: %s); trying another broker",
            topic,
            target.broker_name,
            failure.label,
            failure.detail,
        )
        return True

    def _pause_after(
        self,
        error: grpc.aio.AioRpcError | RpcFailure,
        topic: str,
        target: WriteQueue | None,
        policy: SendRetryPolicy,
        attempt: int,
        started: float,
    ) -> float:
        """The pause before retrying the attempt that raised ``error``; raises :class:`SendFailed`
        when the failure is not retriable or the budget is spent."""
        failure = classify(error)
        elapsed_ms = (time.perf_counter() - started) * 1000
        pause_ms = policy.pause_ms(attempt, elapsed_ms, random.random()) if failure.retriable else None
        if target is not None and failure.retriable:
            # Unreachable, timed out, not master: avoid it for a while. A refused message (too
            # big, no permission) says nothing about the broker's health.
            self._faults.record(target.broker_name, 0, failed=True)
        if pause_ms is None:
            name, address = (target.broker_name, target.address) if target else (None, None)
            raise SendFailed(topic, name, address, failure, elapsed_ms / 1000, attempt) from None
        log.info(
            "send to topic %s on broker %s failed (%s: %s); retry %d in %.0f ms",
            topic,
            target.broker_name if target else "-",
            failure.label,
            failure.detail,
            attempt,
            pause_ms,
        )
        return pause_ms

    def _target(
        self,
        topic: str,
        queues: list[WriteQueue],
        sharding_key: str | None,
        queue: WriteQueue | None,
        failed: WriteQueue | None,
        attempt: int,
        refused: Collection[str] = (),
    ) -> WriteQueue:
        """The queue of this attempt: the named queue (on its broker's current master), the
        sharding key's, or round robin avoiding the broker that just failed and those that
        ``refused`` the send."""
        if queue is not None:
            if attempt == 1:
                return queue
            same = (q for q in queues if q.broker_name == queue.broker_name and q.queue_id == queue.queue_id)
            return next(same, queue)
        if sharding_key is not None:
            return queues[sharding_queue(sharding_key, len(queues))]
        return self._choose(topic, queues, {*refused, *([failed.broker_name] if failed else [])})

    async def _send_to(
        self, target: WriteQueue, request: broker_pb2.SendMessageRequest, timeout_s: float
    ) -> broker_pb2.SendMessageResponse:
        if target.address not in self._brokers:  # introduce ourselves before the first send
            self._brokers.add(target.address)
            await self._heartbeat(target.address)
        request.queue_id = target.queue_id
        request.born_timestamp_ms = int(time.time() * 1000)
        try:
            return await self._channels.broker(target.address).SendMessage(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as error:
            await self._channels.raise_tls_failure(target.address, error)  # not retriable: at once
            raise

    # -- what the accumulator's calls need (orbitmq.client.accumulator.Carrier) ----------------

    async def _route(self, topic: str) -> list[WriteQueue]:
        queues = self._routes.get(topic)
        return queues if queues is not None else await self.write_queues(topic)

    def _lane_target(
        self, topic: str, queues: list[WriteQueue], queue: WriteQueue | None, avoid: Collection[str] = ()
    ) -> WriteQueue:
        """Round robin for a topic's lane (not on a broker in ``avoid``: one that refused a
        message of the call); an ordered lane's queue on its broker's current master."""
        if queue is None:
            return self._choose(topic, queues, avoid)
        same = (q for q in queues if q.broker_name == queue.broker_name and q.queue_id == queue.queue_id)
        return next(same, queue)

    def _request_head(self, topic: str, queue_id: int, born_host: str | None = None) -> bytes:
        return send_wire.request_head(
            self.group, topic, queue_id, int(time.time() * 1000), self._default_queue_nums, born_host
        )

    async def _carry(
        self, target: WriteQueue, topic: str, data: bytes, timeout_s: float
    ) -> broker_pb2.SendMessageResponse:
        """One SendMessage call with request bytes built by the caller."""
        address = target.address
        if address not in self._brokers:  # introduce ourselves before the first send
            self._brokers.add(address)
            await self._heartbeat(address)
        channel = self._channels.channel(address)
        cached = self._send_calls.get(address)
        if cached is None or cached[0] is not channel:  # first call, or a new channel (reconnect)
            call = channel.unary_unary(
                _SEND_METHOD,
                request_serializer=None,
                response_deserializer=broker_pb2.SendMessageResponse.FromString,
            )
            cached = self._send_calls[address] = (channel, call)
        try:
            return await cached[1](data, timeout=timeout_s)  # type: ignore[no-any-return]
        except grpc.aio.AioRpcError as error:
            # A refused handshake fails every attempt alike: a TlsError (not retriable) ends the
            # send now, naming the cause, instead of retrying UNAVAILABLE until the budget ends.
            await self._channels.raise_tls_failure(address, error)
            raise

    def _record_latency(self, broker_name: str, latency_ms: float, *, failed: bool = False) -> None:
        self._faults.record(broker_name, latency_ms, failed=failed)

    async def _refresh_quietly(self, topic: str, stale: list[WriteQueue] | None) -> list[WriteQueue] | None:
        """The route after a failed attempt; None when it cannot be fetched now (the next
        attempt tries again, and its failure is the one that counts)."""
        try:
            return await self._refresh_route(topic, stale)
        except (grpc.aio.AioRpcError, RpcFailure):
            return None


LocalTransaction = Callable[[Message, Any], TransactionResolution | Awaitable[TransactionResolution]]
CheckTransaction = Callable[[StoredMessage], TransactionResolution | Awaitable[TransactionResolution]]


async def _call(function: Callable[..., Any], *args: Any) -> Any:
    """User callbacks may be coroutines or plain functions; plain ones run off the event loop."""
    if inspect.iscoroutinefunction(function):
        return await function(*args)
    return await asyncio.to_thread(function, *args)


class TransactionProducer(Producer):
    """Sends half messages, runs the local transaction, then commits or rolls back.

    When the outcome is unknown (UNKNOWN, a crash, a lost EndTransaction) the broker later
    asks through the session stream; ``check`` answers from the application's records.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | None = None,
        *,
        local_transaction: LocalTransaction,
        check: CheckTransaction,
        **options: Any,
    ) -> None:
        super().__init__(group, namesrv, **options)
        self._local_transaction = local_transaction
        self._check = check
        self._sessions = BrokerSessions(
            self._channels, self.client_id, self._on_event, producer_groups=(group,)
        )

    async def close(self) -> None:
        await self._sessions.close()
        await super().close()

    async def send_in_transaction(
        self, message: Message, arg: Any = None
    ) -> tuple[SendResult, TransactionResolution]:
        """Send ``message`` as a half message; when the broker stored it with ``SEND_OK``, run
        the local transaction and end the half with its answer. A half stored without SEND_OK
        (FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE: the master alone has it, a failover may lose
        it) is rolled back without running the local transaction, as RocketMQ's producer does:
        committing it would tie the application's work to a message that may vanish."""
        result = await self._send([message], extra={Property.TRANSACTION_PREPARED: "true"})
        queues = self._routes.get(message.topic) or []
        address = next(q.address for q in queues if q.broker_name == result.broker_name)
        self._sessions.ensure(address)
        if result.status is not SendStatus.SEND_OK:
            resolution = TransactionResolution.ROLLBACK
        else:
            try:
                resolution = await _call(self._local_transaction, message, arg)
            except Exception:
                log.exception(
                    "local transaction of %s failed; its outcome is left to the check", result.msg_id
                )
                resolution = TransactionResolution.UNKNOWN
        request = broker_pb2.EndTransactionRequest(
            producer_group=self.group,
            commit_log_offset=result.commit_log_offset,
            msg_id=result.offset_msg_id,
            transaction_id=result.msg_id,
            resolution=resolution,
        )
        try:
            stub = self._channels.broker(address)
            await stub.EndTransaction(request, timeout=self.retry.attempt_timeout_s(0))
        except grpc.aio.AioRpcError as error:
            # As RocketMQ's one-way end: the half message stays, and the broker's check-back
            # (answered by ``check``) settles it — after a failover, on the new master.
            failure = classify(error)
            log.warning(
                "ending transaction %s on broker %s failed (%s: %s); the broker will check back",
                result.msg_id,
                result.broker_name,
                failure.label,
                failure.detail,
            )
        return result, resolution

    async def _on_event(self, address: str, event: broker_pb2.ServerEvent) -> None:
        if not event.HasField("check_transaction"):
            return
        check = event.check_transaction
        try:
            resolution = await _call(self._check, decode(check.record))
        except Exception:
            log.exception("transaction check of %s failed", check.transaction_id)
            resolution = TransactionResolution.UNKNOWN
        await self._sessions.send(
            address,
            broker_pb2.ClientEvent(
                check_result=broker_pb2.TransactionCheckResult(
                    producer_group=check.producer_group,
                    commit_log_offset=check.commit_log_offset,
                    msg_id=check.msg_id,
                    transaction_id=check.transaction_id,
                    resolution=resolution,
                )
            ),
        )

    async def _heartbeat_all(self) -> None:
        await super()._heartbeat_all()
        for address in list(self._brokers):
            self._sessions.ensure(address)
