"""``apache.rocketmq.v2.MessagingService`` served over an orbitmq cluster.

Every RPC answers with a ``Status`` in its response, never a bare gRPC error and never silence:
an orbitmq failure is translated by :mod:`orbitmq.proxy.codes`, a request the protocol forbids
gets the protocol's code and a message naming the value and the rule, and an RPC orbitmq does
not serve yet answers ``NOT_IMPLEMENTED`` at once (a streaming one with one such frame).
Producers are complete: QueryRoute, Heartbeat, Telemetry (settings; check-backs pushed),
SendMessage (normal, FIFO, delayed, transactional), EndTransaction, NotifyClientTermination.
Simple and push consumers: ReceiveMessage, AckMessage, ChangeInvisibleDuration, QueryAssignment,
ForwardMessageToDeadLetterQueue (:mod:`orbitmq.proxy.consumers`, over the brokers' POP).
Offset-based consumers: QueryOffset, GetOffset, UpdateOffset, PullMessage
(:mod:`orbitmq.proxy.offsets`, over the brokers' pulls and committed offsets).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from orbitmq.auth.rpcs import PUB, topic_need
from orbitmq.client.channels import Channels
from orbitmq.client.message import SendResult, SendStatus
from orbitmq.client.producer import Producer
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.common.topics import parse_delay_levels
from orbitmq.proxy import codes, convert, routes
from orbitmq.proxy.auth import ProxyCaller, ProxyGuard, settings_needs
from orbitmq.proxy.clients import CLIENT_ID_HEADER, ClientRegistry, peer_host
from orbitmq.proxy.consumers import Consumers
from orbitmq.proxy.convert import Refused
from orbitmq.proxy.metrics import ProxyMetrics
from orbitmq.proxy.offsets import Offsets
from orbitmq.proxy.settings import ProxySettings
from orbitmq.proxy.transactions import Transactions
from orbitmq.rocketmq_v2 import definition_pb2 as v2
from orbitmq.rocketmq_v2 import service_pb2 as pb
from orbitmq.rocketmq_v2 import service_pb2_grpc
from orbitmq.v1 import broker_pb2, nameserver_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

log = logging.getLogger(__name__)

R = TypeVar("R")
NAMESPACE_HEADER = "x-mq-namespace"
DEADLINE_MARGIN_MS = 200
"""Kept back from the client's deadline so the proxy's answer arrives before the client gives up."""
PRODUCER_MAX_ATTEMPTS = 3
"""What RocketMQ's proxy tells producers: three attempts, 10 ms doubling up to 1 s between them."""
LONG_POLLING_MS = 20_000
"""Consumers' long polling (RocketMQ's proxy default ``grpcClientConsumerMaxLongPollingTimeoutMillis``)."""
RECEIVE_BATCH_SIZE = 32
DEFAULT_RETRY_MAX = 16
"""A group no broker knows yet: orbitmq's (and RocketMQ's) maxReconsumeTimes."""
ORDERLY_SUSPEND_MS = 1_000
"""Pause before a FIFO consumer retries a failed message in place (orbitmq's orderly suspend)."""
CONSUMER_TYPES = frozenset({v2.PUSH_CONSUMER, v2.SIMPLE_CONSUMER, v2.PULL_CONSUMER})


def answers(
    response: Callable[..., R],
) -> Callable[[Callable[..., Awaitable[R]]], Callable[..., Awaitable[R]]]:
    """Turn any failure of a unary RPC into ``response(status=...)`` (see the module docstring),
    check the caller first when auth is on (a refusal is such a failure), and count and time
    every answer by its code."""

    def decorate(handler: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
        rpc = handler.__name__

        @functools.wraps(handler)
        async def run(self: MessagingService, request: Any, context: grpc.aio.ServicerContext) -> R:
            started = time.perf_counter()
            try:
                if self.guard is not None:
                    self.guard.check(rpc, request, context)
                reply = await handler(self, request, context)
            except Exception as error:  # each is answered with a status; bugs are logged
                reply = response(status=_failure_status(handler.__name__, error))
            self.metrics.observe(handler.__name__, reply.status.code, time.perf_counter() - started)  # type: ignore[attr-defined]
            return reply

        return run

    return decorate


def _failure_status(rpc: str, error: BaseException) -> v2.Status:
    try:
        return codes.status_of(error)
    except Exception:
        log.exception("v2 %s failed", rpc)
        return codes.status(v2.INTERNAL_SERVER_ERROR, f"{rpc} failed in the proxy: {error!r}")


def _header(context: grpc.aio.ServicerContext, name: str) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return value if isinstance(value, str) else value.decode()
    return ""


def _client_id(context: grpc.aio.ServicerContext) -> str:
    client_id = _header(context, CLIENT_ID_HEADER)
    if not client_id:
        raise Refused(v2.CLIENT_ID_REQUIRED, f"the request must carry the {CLIENT_ID_HEADER} header")
    return client_id


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    def __init__(
        self,
        settings: ProxySettings,
        channels: Channels,
        producer: Producer,
        transactions: Transactions,
        clients: ClientRegistry,
        advertised: str,
        metrics: ProxyMetrics,
        guard: ProxyGuard | None = None,
    ) -> None:
        """``guard``: authenticates and authorizes every call (None: auth off)."""
        self.guard = guard
        self._settings = settings
        self._producer = producer
        self._channels = channels
        self._transactions = transactions
        self._clients = clients
        self._advertised = routes.endpoints_of(advertised)
        self._delay_levels_ms = parse_delay_levels(settings.delay_levels)
        self.metrics = metrics
        self.consumers = Consumers(
            channels,
            lambda client_id: clients.get(client_id) is not None,
            settings.auto_renew_slice_ms,
            metrics.renewal,
        )
        self._offsets = Offsets(self.consumers.masters)

    # -- routes and clients --------------------------------------------------------------------

    @answers(pb.QueryRouteResponse)
    async def QueryRoute(self, request: pb.QueryRouteRequest, context: grpc.aio.ServicerContext) -> Any:
        topic = convert.topic_of(request.topic)
        endpoints = request.endpoints if request.endpoints.addresses else self._advertised
        try:
            route = await self._channels.namesrv_call(
                "QueryRoute", nameserver_pb2.QueryRouteRequest(topic=topic)
            )
        except grpc.aio.AioRpcError as error:
            failure = failure_of(error)
            if failure is None or failure.reason != ErrorReason.TOPIC_NOT_EXIST or self._is_consumer(context):
                raise
            queues = await self._new_topic_queues(request.topic, endpoints)
        else:
            queues = routes.message_queues(route, request.topic, endpoints, convert.ALL_TYPES)  # type: ignore[arg-type]
        if not queues:
            raise RpcFailure(
                ErrorReason.SERVICE_NOT_AVAILABLE, f"no master of topic {topic}'s brokers is registered"
            )
        return pb.QueryRouteResponse(status=codes.OK, message_queues=queues)

    def _is_consumer(self, context: grpc.aio.ServicerContext) -> bool:
        info = self._clients.get(_header(context, CLIENT_ID_HEADER))
        return info is not None and info.client_type in CONSUMER_TYPES

    async def _new_topic_queues(self, topic: v2.Resource, endpoints: v2.Endpoints) -> list[v2.MessageQueue]:
        """A topic no broker has yet: producers may send, and the first send creates it."""
        info = await self._channels.namesrv_call("GetClusterInfo", nameserver_pb2.GetClusterInfoRequest())
        masters = [n for n, d in info.broker_addr_table.items() if routes.MASTER_ID in d.broker_addrs]  # type: ignore[attr-defined]
        return routes.new_topic_queues(
            masters, self._settings.default_topic_queue_nums, topic, endpoints, convert.ALL_TYPES
        )

    @answers(pb.HeartbeatResponse)
    async def Heartbeat(self, request: pb.HeartbeatRequest, context: grpc.aio.ServicerContext) -> Any:
        _client_id(context)
        if request.client_type not in (v2.PRODUCER, *CONSUMER_TYPES):
            raise Refused(
                v2.UNRECOGNIZED_CLIENT_TYPE, f"client type {request.client_type} is not one orbitmq serves"
            )
        return pb.HeartbeatResponse(status=codes.OK)

    @answers(pb.NotifyClientTerminationResponse)
    async def NotifyClientTermination(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self._clients.forget(_client_id(context))
        return pb.NotifyClientTerminationResponse(status=codes.OK)

    async def Telemetry(
        self, requests: AsyncIterator[pb.TelemetryCommand], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TelemetryCommand]:
        """Answer each settings command with the server's settings; push commands (check-backs)
        queued for this client; stay open until the client closes the stream.

        With auth on, the stream's credentials are checked when it opens (a refusal is its one
        frame) and each settings command's topics and group before it is answered (a refusal
        answers that command; the client's later calls are refused the same way)."""
        client_id = _header(context, CLIENT_ID_HEADER)
        if not client_id:
            yield pb.TelemetryCommand(
                status=codes.status(v2.CLIENT_ID_REQUIRED, f"telemetry needs {CLIENT_ID_HEADER}")
            )
            return
        caller: ProxyCaller | None = None
        if self.guard is not None:
            try:
                caller = self.guard.authenticate("Telemetry", context)
            except Refused as refused:
                yield pb.TelemetryCommand(status=codes.status(refused.code, refused.message))
                return
        stream = self._clients.open_stream(client_id, peer_host(context.peer() or "") or "")
        namespace = _header(context, NAMESPACE_HEADER)

        async def read() -> None:
            async for command in requests:
                if command.HasField("settings"):
                    stream.push(await self._settings_answer(caller, client_id, namespace, command.settings))

        reader = asyncio.get_running_loop().create_task(read(), name=f"telemetry-read:{client_id}")
        getter: asyncio.Future[pb.TelemetryCommand] | None = None
        try:
            while not reader.done():
                getter = asyncio.ensure_future(stream.commands.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
            if reader.exception() is not None and not isinstance(reader.exception(), grpc.aio.AioRpcError):
                log.warning("telemetry stream of %s ended: %r", client_id, reader.exception())
        finally:
            # A client that goes away (a RocketMQ 5 client's shutdown closes its channel)
            # cancels this generator inside the wait: the getter, left pending, stayed in the
            # loop's tasks until a full garbage collection ("Task was destroyed but it is
            # pending!"), one per client that ever left.
            if getter is not None:
                getter.cancel()
            reader.cancel()
            self._clients.close_stream(stream)

    async def _settings_answer(
        self, caller: ProxyCaller | None, client_id: str, namespace: str, settings: v2.Settings
    ) -> pb.TelemetryCommand:
        """The settings reply, or the refusal of what the settings name (auth on)."""
        if caller is not None and self.guard is not None:
            try:
                self.guard.authorize(self.guard.renewed(caller), settings_needs(settings))
            except Refused as refused:
                return pb.TelemetryCommand(status=codes.status(refused.code, refused.message))
        return await self._settings_reply(client_id, namespace, settings)

    async def _settings_reply(
        self, client_id: str, namespace: str, settings: v2.Settings
    ) -> pb.TelemetryCommand:
        kind = settings.client_type
        if kind not in (v2.PRODUCER, *CONSUMER_TYPES):
            return pb.TelemetryCommand(
                status=codes.status(
                    v2.UNRECOGNIZED_CLIENT_TYPE, f"client type {kind} is not one orbitmq serves"
                )
            )
        reply = v2.Settings()
        reply.CopyFrom(settings)
        if kind == v2.PRODUCER:
            topics = {convert.real_name(t) for t in settings.publishing.topics}
            self._clients.describe(client_id, kind, namespace, topics)
            self._transactions.serve(topics)
            reply.publishing.max_body_size = self._settings.max_body_bytes
            reply.publishing.validate_message_type = True
            policy = reply.backoff_policy
            policy.max_attempts = PRODUCER_MAX_ATTEMPTS
            policy.exponential_backoff.initial.FromMilliseconds(10)
            policy.exponential_backoff.max.FromMilliseconds(1_000)
            policy.exponential_backoff.multiplier = 2
        else:
            self._clients.describe(client_id, kind, namespace, set())
            config = None
            if settings.subscription.HasField("group"):
                config = await self._group_config(convert.real_name(settings.subscription.group))
            self._consumer_settings(reply, config)
        return pb.TelemetryCommand(status=codes.OK, settings=reply)

    def _consumer_settings(self, reply: v2.Settings, config: Any) -> None:
        """What a consumer is told: long polling, batch size, FIFO or not, and the backoff.

        ``long_polling_timeout`` must be set: the Python push consumer long-polls exactly that
        long and with 0 it would ask again at once, forever. The attempts are the group's
        (``retry_max_times`` + 1), which is also when the broker dead-letters a POP message.
        A concurrent group's failed message comes back after the broker's delay levels from the
        third on (10 s, 30 s, 1 min, ...), as orbitmq's retry topic would deliver it; a FIFO
        group's client retries in place, holding its message group, after orbitmq's orderly
        suspend (1 s, as ``SUSPEND_CURRENT_QUEUE_A_MOMENT``) each time.
        """
        subscription = reply.subscription
        subscription.long_polling_timeout.FromMilliseconds(LONG_POLLING_MS)
        subscription.receive_batch_size = RECEIVE_BATCH_SIZE
        orderly = bool(config is not None and config.consume_message_orderly)
        subscription.fifo = orderly
        retry_max = config.retry_max_times if config is not None else DEFAULT_RETRY_MAX
        policy = reply.backoff_policy
        policy.max_attempts = retry_max + 1
        if orderly:
            policy.customized_backoff.next.add().FromMilliseconds(ORDERLY_SUSPEND_MS)
        else:
            for level_ms in self._delay_levels_ms[2:]:
                policy.customized_backoff.next.add().FromMilliseconds(level_ms)

    async def _group_config(self, group: str) -> Any:
        """The group's configuration; None while no broker knows it or answers (not FIFO then,
        the default attempts; the client asks again with its next settings sync)."""
        try:
            return await self.consumers.group_config(group)
        except (grpc.aio.AioRpcError, RpcFailure) as error:
            log.warning("could not read the configuration of group %s: %s", group, error)
            return None

    # -- producers -----------------------------------------------------------------------------

    @answers(pb.SendMessageResponse)
    async def SendMessage(self, request: pb.SendMessageRequest, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await self._send(request, context)
        except RpcFailure as failure:
            if failure.reason == ErrorReason.INVALID_NAME:  # the one name a send carries: its topic's
                raise Refused(v2.ILLEGAL_TOPIC, failure.message) from None  # reserved, as the broker says
            raise

    async def _send(self, request: pb.SendMessageRequest, context: grpc.aio.ServicerContext) -> Any:
        if not request.messages:
            raise Refused(v2.BAD_REQUEST, "a send must carry at least one message")
        now_ms = int(time.time() * 1000)
        born_host = peer_host(context.peer() or "")  # each message its own sender's, coalesced or not
        outs = [
            convert.outbound(
                m, now_ms, self._delay_levels_ms, self._settings.max_body_bytes, born_host=born_host
            )
            for m in request.messages
        ]
        budget_ms = self._budget_ms(context)
        if len(outs) > 1:
            return await self._send_batch(outs)
        out = outs[0]
        transaction_id = ""
        if out.message_type == v2.TRANSACTION:
            client_id = _header(context, CLIENT_ID_HEADER)
            self._clients.publishes(client_id, out.message.topic)
            result, ref = await self._transactions.send_half(out, budget_ms)
            transaction_id = ref.encode()
        else:
            # The official clients send one message per call, several in flight: the producer
            # coalesces concurrent NORMAL sends of a topic, and FIFO ones of a queue, of all
            # clients into batch calls, each message with its own receipt and its client's born
            # host (orbitmq.client.accumulator); delayed ones go alone, to the timer.
            result = await self._producer.send(
                out.message, sharding_key=out.sharding_key, timeout_ms=budget_ms
            )
        entry = _entry(result, out.message_id, result.queue_offset, transaction_id)
        return pb.SendMessageResponse(status=entry.status, entries=[entry])

    async def _send_batch(self, outs: list[convert.Outbound]) -> pb.SendMessageResponse:
        topics = {o.message.topic for o in outs}
        if len(topics) > 1 or any(o.message_type != v2.NORMAL for o in outs):
            raise Refused(
                v2.BAD_REQUEST,
                f"a batch may hold only NORMAL messages of one topic (got topics {sorted(topics)})",
            )
        result = await self._producer.send_batch([o.message for o in outs])
        entries = [_entry(result, o.message_id, result.queue_offset + i, "") for i, o in enumerate(outs)]
        return pb.SendMessageResponse(status=entries[0].status, entries=entries)

    def _budget_ms(self, context: grpc.aio.ServicerContext) -> int:
        remaining = context.time_remaining()
        budget = self._settings.send_timeout_ms
        if remaining is not None:
            budget = min(budget, int(remaining * 1000) - DEADLINE_MARGIN_MS)
        return max(budget, 100)

    @answers(pb.EndTransactionResponse)
    async def EndTransaction(
        self, request: pb.EndTransactionRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        topic = convert.topic_of(request.topic)
        from_check = request.source == v2.SOURCE_SERVER_CHECK
        if self.guard is not None:  # Pub on the half message's own topic too (see half_topic)
            half_topic = await self._transactions.half_topic(request.transaction_id)
            if half_topic != topic:
                caller = self.guard.authenticate("EndTransaction", context)
                self.guard.authorize(caller, (topic_need(PUB, half_topic),))
        try:
            await self._transactions.end(topic, request.transaction_id, request.resolution, from_check)
        except grpc.aio.AioRpcError as error:
            failure = failure_of(error)
            if failure is None or failure.reason != ErrorReason.INVALID_OFFSET:
                raise
            raise Refused(
                v2.INVALID_TRANSACTION_ID,
                f"transaction {request.transaction_id!r} of message {request.message_id}: {failure.message}",
            ) from None
        return pb.EndTransactionResponse(status=codes.OK)

    # -- consumers (POP in the brokers, see orbitmq.proxy.consumers) -----------------------------

    @answers(pb.QueryAssignmentResponse)
    async def QueryAssignment(
        self, request: pb.QueryAssignmentRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        endpoints = request.endpoints if request.endpoints.addresses else self._advertised
        return await self.consumers.assignments(request, endpoints)

    async def ReceiveMessage(
        self, request: pb.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        """Server stream: a status frame, then (when messages came) the delivery timestamp
        (the official clients require it) and one frame per message."""
        started = time.perf_counter()
        try:
            if self.guard is not None:
                self.guard.check("ReceiveMessage", request, context)
            frames = await self.consumers.receive(
                request, context.time_remaining(), _header(context, CLIENT_ID_HEADER)
            )
        except Exception as error:  # answered with a status frame, as unary RPCs are
            frames = [pb.ReceiveMessageResponse(status=_failure_status("ReceiveMessage", error))]
        self.metrics.observe("ReceiveMessage", frames[0].status.code, time.perf_counter() - started)
        for frame in frames:
            yield frame

    @answers(pb.AckMessageResponse)
    async def AckMessage(self, request: pb.AckMessageRequest, context: grpc.aio.ServicerContext) -> Any:
        return await self.consumers.ack(request, context.time_remaining())

    @answers(pb.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(
        self, request: pb.ChangeInvisibleDurationRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        reply = await self.consumers.change_invisible(request, context.time_remaining())
        if reply.status.code == v2.OK:
            self.metrics.invisibility_changed(convert.real_name(request.group), request.message_id)
        return reply

    @answers(pb.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(
        self, request: pb.ForwardMessageToDeadLetterQueueRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        reply = await self.consumers.forward_dead_letter(request, context.time_remaining())
        if reply.status.code == v2.OK:
            self.metrics.dead_lettered(convert.real_name(request.group), request.message_id)
        return reply

    # -- offset-based consumers (see orbitmq.proxy.offsets) --------------------------------------

    async def PullMessage(
        self, request: pb.PullMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        """Server stream: a status frame, the messages, then ``next_offset``."""
        started = time.perf_counter()
        try:
            if self.guard is not None:
                self.guard.check("PullMessage", request, context)
            frames = await self._offsets.pull(request, context.time_remaining())
        except Exception as error:  # answered with a status frame, as unary RPCs are
            frames = [pb.PullMessageResponse(status=_failure_status("PullMessage", error))]
        self.metrics.observe("PullMessage", frames[0].status.code, time.perf_counter() - started)
        for frame in frames:
            yield frame

    @answers(pb.UpdateOffsetResponse)
    async def UpdateOffset(self, request: pb.UpdateOffsetRequest, context: grpc.aio.ServicerContext) -> Any:
        return await self._offsets.update(request)

    @answers(pb.GetOffsetResponse)
    async def GetOffset(self, request: pb.GetOffsetRequest, context: grpc.aio.ServicerContext) -> Any:
        return await self._offsets.get(request)

    @answers(pb.QueryOffsetResponse)
    async def QueryOffset(self, request: pb.QueryOffsetRequest, context: grpc.aio.ServicerContext) -> Any:
        return await self._offsets.query(request)

    # -- not served ----------------------------------------------------------------------------

    @answers(pb.RecallMessageResponse)
    async def RecallMessage(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        why = "delayed messages wait in delay levels, which cannot take one message back"
        return pb.RecallMessageResponse(status=codes.not_implemented("RecallMessage", why))

    @answers(pb.SyncLiteSubscriptionResponse)
    async def SyncLiteSubscription(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        why = "lite topics are not part of orbitmq"
        return pb.SyncLiteSubscriptionResponse(status=codes.not_implemented("SyncLiteSubscription", why))


def _entry(result: SendResult, message_id: str, offset: int, transaction_id: str) -> pb.SendResultEntry:
    wire = broker_pb2.SendStatus.Value(result.status.value)
    code = codes.SEND_STATUS_CODES.get(wire, v2.INTERNAL_SERVER_ERROR)
    text = (
        "OK"
        if result.status is SendStatus.SEND_OK
        else f"stored on {result.broker_name}, but {result.status.value}"
    )
    return pb.SendResultEntry(
        status=codes.status(code, text), message_id=message_id, transaction_id=transaction_id, offset=offset
    )
