"""v2 consumers over the brokers' POP RPCs (``orbitmq.v1`` PopMessage, AckMessage,
ChangeInvisibleTime): receive, ack, change of invisibility, assignments.

The proxy keeps no consumer state (see :mod:`orbitmq.proxy`): in-flight messages, attempts and
leases live in the broker (:mod:`orbitmq.broker.pop`). A receipt handle names its broker group
(``<broker name>:<queue>:<offset>:<lease>``), so an ack reaches the broker that handed the
message out, at whichever address is its master now. Acks, changes of invisibility,
dead-letterings and renewals ride out a switchover or failover of that group as orbitmq's sends
do (:mod:`orbitmq.client.retry`): the POP state is replicated, so the new master accepts the
same handle, and until it answers the call is tried again on the master looked up again, within
``FAILOVER_BUDGET_MS`` and the client's own deadline. As RocketMQ's proxy does, a receive pops
from *every* queue of the named broker (the queue id a client picked only chooses the broker):
a simple consumer then never waits on an empty queue while another holds messages.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from orbitmq.broker.pop.handles import MAX_ACKS_PER_CALL, InvalidReceiptHandle, ReceiptHandle
from orbitmq.client.channels import Channels
from orbitmq.client.retry import SendRetryPolicy
from orbitmq.common.names import InvalidNameError, validate_group_name
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.common.topics import Property
from orbitmq.proxy import codes, convert, routes
from orbitmq.proxy.coalesce import Coalescer
from orbitmq.proxy.convert import Refused
from orbitmq.proxy.renewals import Renewals
from orbitmq.rocketmq_v2 import definition_pb2 as v2
from orbitmq.rocketmq_v2 import service_pb2 as pb
from orbitmq.store.record import StoredMessage, decode
from orbitmq.v1 import broker_pb2, common_pb2, nameserver_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

log = logging.getLogger(__name__)

MAX_BATCH = 32
"""RocketMQ's proxy limit on one receive's batch size."""
MAX_INVISIBLE_MS = 12 * 3_600_000
"""RocketMQ's longest invisible duration (12 h)."""
DEFAULT_INVISIBLE_MS = 30_000
"""A receive without an invisible duration (auto-renewing push consumers): hidden this long."""
POLL_MARGIN_MS = 500
"""Kept back from the client's deadline: the last answer must reach it before it gives up."""
RPC_SLACK_S = 5.0
"""A broker call's deadline beyond the long poll it was asked to hold."""
_ACK_STATUS = {
    broker_pb2.ACK_OK: codes.OK,
    broker_pb2.ACK_ALREADY_DONE: codes.OK,
    broker_pb2.ACK_STALE_HANDLE: codes.status(
        v2.INVALID_RECEIPT_HANDLE,
        "receipt handle is stale: the message became visible and was delivered again since",
    ),
    broker_pb2.ACK_UNKNOWN_HANDLE: codes.status(
        v2.INVALID_RECEIPT_HANDLE, "receipt handle names no delivery of this group and topic"
    ),
}
_MASTER_MOVED = (ErrorReason.SLAVE_READ_ONLY, ErrorReason.SERVICE_NOT_AVAILABLE)
FAILOVER_BUDGET_MS = 10_000
"""How long an ack, a change of invisibility, a dead-lettering or a renewal keeps trying a broker
group whose master is changing: a send's budget (``SendRetryPolicy.send_timeout_ms``), longer
than a switchover (about a second) and a failover (the supervisor's 3 s). A client's earlier
deadline cuts it short."""
DEADLINE_MARGIN_S = 0.3
"""Kept back from the client's deadline: the answer must reach the client before it gives up."""


def master_moved(error: BaseException) -> bool:
    """Whether a call failed because the broker group has no reachable master just now, and
    nothing was done: the broker called is a slave now (``SLAVE_READ_ONLY``), none is
    registered or it is shutting down (``SERVICE_NOT_AVAILABLE``), or it cannot be reached
    (``UNAVAILABLE``). A ``DEADLINE_EXCEEDED`` is not among them: the broker may have applied
    the call, and a change of invisibility applied twice would find its own new lease stale."""
    if isinstance(error, RpcFailure):
        return error.reason in _MASTER_MOVED
    if isinstance(error, grpc.aio.AioRpcError):
        failure = failure_of(error)
        if failure is not None:
            return failure.reason in _MASTER_MOVED
        return error.code() is grpc.StatusCode.UNAVAILABLE
    return False


def failover_budget_s(time_remaining_s: float | None) -> float:
    """The time an ack-like call may spend riding out a change of master: the budget, or less
    when the client's deadline (``time_remaining_s``, None: none) comes sooner."""
    budget = FAILOVER_BUDGET_MS / 1000
    if time_remaining_s is not None:
        budget = min(budget, time_remaining_s - DEADLINE_MARGIN_S)
    return max(0.0, budget)


def group_of(resource: v2.Resource) -> str:
    name = convert.real_name(resource)
    try:
        return validate_group_name(name)
    except InvalidNameError as error:
        raise Refused(v2.ILLEGAL_CONSUMER_GROUP, str(error)) from None


def receipt_of(text: str) -> ReceiptHandle:
    try:
        return ReceiptHandle.decode(text)
    except InvalidReceiptHandle as error:
        raise Refused(v2.INVALID_RECEIPT_HANDLE, str(error)) from None


def duration_ms(duration: Any, what: str, code: int, maximum_ms: int) -> int:
    ms = duration.seconds * 1000 + duration.nanos // 1_000_000
    if not 0 < ms <= maximum_ms:
        raise Refused(code, f"{what} of {ms} ms must be above 0 and at most {maximum_ms} ms")
    return ms


class Masters:
    """Broker name → its master's address, from the name servers; looked up again when a call
    fails because the broker there is no longer master (a failover)."""

    def __init__(self, channels: Channels, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._channels = channels
        self._masters: dict[str, str] = {}
        self._sleep = sleep

    @property
    def names(self) -> list[str]:
        """The broker groups with a master, as last looked up."""
        return list(self._masters)

    async def refresh(self) -> None:
        info = await self._channels.namesrv_call("GetClusterInfo", nameserver_pb2.GetClusterInfoRequest())
        self._masters = {
            name: data.broker_addrs[routes.MASTER_ID]
            for name, data in info.broker_addr_table.items()  # type: ignore[attr-defined]
            if routes.MASTER_ID in data.broker_addrs
        }

    async def call(self, broker_name: str, method: str, request: Any, timeout_s: float) -> Any:
        """``Broker.<method>(request)`` on the master of ``broker_name``, once more after a
        refresh when that address is gone or is a slave now."""
        for attempt in (1, 2):
            if attempt == 2 or broker_name not in self._masters:
                await self.refresh()
            address = self._masters.get(broker_name)
            if address is None:
                raise RpcFailure(
                    ErrorReason.SERVICE_NOT_AVAILABLE,
                    f"broker {broker_name} has no registered master; retry once it has one",
                )
            stub = self._channels.broker(address)
            try:
                return await getattr(stub, method)(request, timeout=timeout_s)
            except grpc.aio.AioRpcError as error:
                failure = failure_of(error)
                moved = error.code() is grpc.StatusCode.UNAVAILABLE or (
                    failure is not None and failure.reason in _MASTER_MOVED
                )
                if attempt == 2 or not moved:
                    raise
        raise AssertionError("unreachable")

    async def call_through_failover(
        self, broker_name: str, method: str, request: Any, timeout_s: float, budget_s: float | None = None
    ) -> Any:
        """``Broker.<method>(request)`` on the master of ``broker_name``, tried again on the
        master looked up again while :func:`master_moved` says the group is changing masters,
        for at most ``budget_s`` (default ``FAILOVER_BUDGET_MS``), paced as a send's retries;
        one attempt waits at most ``timeout_s``. Raises the last failure when the budget is
        spent or the failure is of another kind."""
        budget_ms = max(1, int(1000 * (FAILOVER_BUDGET_MS / 1000 if budget_s is None else budget_s)))
        policy = SendRetryPolicy(send_timeout_ms=budget_ms, attempt_timeout_ms=max(1, int(timeout_s * 1000)))
        started = time.monotonic()
        retry = 0
        while True:
            try:
                return await self.call(
                    broker_name,
                    method,
                    request,
                    policy.attempt_timeout_s(1000 * (time.monotonic() - started)),
                )
            except (grpc.aio.AioRpcError, RpcFailure) as error:
                if not master_moved(error):
                    raise
                retry += 1
                pause_ms = policy.pause_ms(retry, 1000 * (time.monotonic() - started), random.random())
                if pause_ms is None:
                    raise
                log.info(
                    "%s on broker %s: no master answers (%s); retry %d in %.0f ms",
                    method,
                    broker_name,
                    error,
                    retry,
                    pause_ms,
                )
                await self._sleep(pause_ms / 1000)
                self._masters.pop(broker_name, None)  # looked up again by the next attempt


class Consumers:
    """Args:
    channels: the proxy's channels to name servers and brokers.
    client_alive: whether a v2 client id is still connected; auto-renewed messages of a gone
        client are released (:mod:`orbitmq.proxy.renewals`).
    default_invisible_ms: the slice an auto-renewed receive is hidden for at a time.
    counted: told each renewal's outcome (:class:`Renewals`).
    """

    def __init__(
        self,
        channels: Channels,
        client_alive: Callable[[str], bool] = lambda _: True,
        default_invisible_ms: int = DEFAULT_INVISIBLE_MS,
        counted: Callable[[str], None] = lambda outcome: None,
    ) -> None:
        self.masters = Masters(channels)
        self.renewals = Renewals(self.masters.call_through_failover, client_alive, counted=counted)
        self.acks: Coalescer[tuple[str, str, str], tuple[str, float], int] = Coalescer(
            self._ack_batch, max_items=MAX_ACKS_PER_CALL
        )
        """Acks of one (broker, group, topic) arriving while one is on its way go as one broker
        call (see :mod:`orbitmq.proxy.coalesce`): the official clients ack one message per call."""
        self._channels = channels
        self._default_invisible_ms = default_invisible_ms

    async def receive(
        self, request: pb.ReceiveMessageRequest, time_remaining_s: float | None, client_id: str = ""
    ) -> list[pb.ReceiveMessageResponse]:
        """The frames of one receive: a status, then (when messages came) the delivery
        timestamp and the messages; raises :class:`Refused` for a request the protocol forbids.
        With ``auto_renew`` the messages stay hidden while ``client_id`` holds them."""
        group = group_of(request.group)
        topic = convert.topic_of(request.message_queue.topic)
        broker_name = request.message_queue.broker.name
        if not broker_name:
            raise Refused(
                v2.BAD_REQUEST, "the receive's message_queue names no broker (take it from QueryRoute)"
            )
        if not 0 < request.batch_size <= MAX_BATCH:
            raise Refused(
                v2.BAD_REQUEST, f"batch_size {request.batch_size} must be between 1 and {MAX_BATCH}"
            )
        if request.HasField("invisible_duration"):
            invisible_ms = duration_ms(
                request.invisible_duration, "invisible_duration", v2.ILLEGAL_INVISIBLE_TIME, MAX_INVISIBLE_MS
            )
        elif request.auto_renew:
            invisible_ms = self._default_invisible_ms
        else:
            raise Refused(
                v2.ILLEGAL_INVISIBLE_TIME, "a receive without auto_renew needs an invisible_duration"
            )
        poll_ms = 0
        if request.HasField("long_polling_timeout"):
            lp = request.long_polling_timeout
            poll_ms = lp.seconds * 1000 + lp.nanos // 1_000_000
            if poll_ms < 0:
                raise Refused(v2.ILLEGAL_POLLING_TIME, f"long_polling_timeout of {poll_ms} ms is negative")
        if time_remaining_s is not None:
            poll_ms = max(0, min(poll_ms, int(time_remaining_s * 1000) - POLL_MARGIN_MS))
        # The broker evaluates the filter, SQL92 as tags, and refuses an invalid one naming it
        # (ILLEGAL_FILTER_EXPRESSION to the client): an empty SQL92 condition stays empty, so
        # the refusal says so rather than quoting a "*" the client never wrote.
        expression = request.filter_expression
        sql = expression.type == v2.SQL
        subscription = common_pb2.Subscription(
            topic=topic,
            expression=expression.expression or ("" if sql else "*"),
            expression_type=common_pb2.SQL92 if sql else common_pb2.TAG,
        )
        reply = await self.masters.call(
            broker_name,
            "PopMessage",
            broker_pb2.PopMessageRequest(
                consumer_group=group,
                topic=topic,
                queue_id=-1,
                max_msg_nums=request.batch_size,
                invisible_time_ms=invisible_ms,
                poll_time_ms=poll_ms,
                subscription=subscription,
                fifo=False,
            ),
            poll_ms / 1000 + RPC_SLACK_S,
        )
        if not reply.messages:
            return [pb.ReceiveMessageResponse(status=codes.status(v2.MESSAGE_NOT_FOUND, "no new message"))]
        namespace = request.group.resource_namespace
        frames = [pb.ReceiveMessageResponse(status=codes.OK)]
        delivered = pb.ReceiveMessageResponse()
        delivered.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
        frames.append(delivered)
        for popped in reply.messages:
            frames.append(pb.ReceiveMessageResponse(message=_message(popped, invisible_ms, namespace)))
            if request.auto_renew and client_id:
                self.renewals.track(
                    client_id,
                    group,
                    topic,
                    broker_name,
                    popped.receipt_handle,
                    invisible_ms,
                    popped.invisible_until_ms,
                )
        return frames

    async def ack(
        self, request: pb.AckMessageRequest, time_remaining_s: float | None = None
    ) -> pb.AckMessageResponse:
        """Ack every entry on its broker group's master (riding out a change of master within
        the client's deadline, ``time_remaining_s``); each entry has its own status."""
        deadline = time.monotonic() + failover_budget_s(time_remaining_s)
        group = group_of(request.group)
        topic = convert.topic_of(request.topic)
        if not request.entries:
            raise Refused(v2.BAD_REQUEST, "an ack must carry at least one entry")

        async def one(entry: pb.AckMessageEntry) -> pb.AckMessageResultEntry:
            self.renewals.forget(entry.receipt_handle)
            try:
                receipt = receipt_of(entry.receipt_handle)
                result = await self.acks.submit(
                    (receipt.broker_name, group, topic), (entry.receipt_handle, deadline)
                )
                status = _ACK_STATUS.get(result, codes.status(v2.INTERNAL_SERVER_ERROR))
            except Exception as error:  # one entry's failure is its own status, not the call's
                status = codes.status_of(error)
            return pb.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=status
            )

        entries = await asyncio.gather(*(one(entry) for entry in request.entries))
        failed = [e.status for e in entries if e.status.code != v2.OK]
        if not failed:
            overall = codes.OK
        elif len(entries) == 1:
            overall = failed[0]
        else:
            overall = codes.status(v2.MULTIPLE_RESULTS, f"{len(failed)} of {len(entries)} acks failed")
        return pb.AckMessageResponse(status=overall, entries=entries)

    async def _ack_batch(self, key: tuple[str, str, str], items: list[tuple[str, float]]) -> list[int]:
        """One broker call acking ``items`` (receipt handle, deadline), riding out a change of
        master until the earliest deadline; a result per handle."""
        broker_name, group, topic = key
        handles = [handle for handle, _ in items]
        budget = max(0.0, min(deadline for _, deadline in items) - time.monotonic())
        if len(handles) == 1:
            request = broker_pb2.AckMessageRequest(
                consumer_group=group, topic=topic, receipt_handle=handles[0]
            )
        else:
            request = broker_pb2.AckMessageRequest(consumer_group=group, topic=topic, receipt_handles=handles)
        reply = await self.masters.call_through_failover(
            broker_name, "AckMessage", request, RPC_SLACK_S, budget
        )
        if len(handles) == 1:
            return [reply.result]
        if len(reply.results) != len(handles):
            raise RuntimeError(
                f"broker {broker_name} answered {len(reply.results)} results for {len(handles)} acks"
            )
        return list(reply.results)

    async def change_invisible(
        self, request: pb.ChangeInvisibleDurationRequest, time_remaining_s: float | None = None
    ) -> pb.ChangeInvisibleDurationResponse:
        """On the handle's broker group's master, riding out a change of master (see :meth:`ack`)."""
        group = group_of(request.group)
        topic = convert.topic_of(request.topic)
        receipt = receipt_of(request.receipt_handle)
        self.renewals.forget(request.receipt_handle)  # the client chose when it comes back
        invisible_ms = duration_ms(
            request.invisible_duration, "invisible_duration", v2.ILLEGAL_INVISIBLE_TIME, MAX_INVISIBLE_MS
        )
        reply = await self.masters.call_through_failover(
            receipt.broker_name,
            "ChangeInvisibleTime",
            broker_pb2.ChangeInvisibleTimeRequest(
                consumer_group=group,
                topic=topic,
                receipt_handle=request.receipt_handle,
                invisible_time_ms=invisible_ms,
            ),
            RPC_SLACK_S,
            failover_budget_s(time_remaining_s),
        )
        status = _ACK_STATUS.get(reply.result, codes.status(v2.INTERNAL_SERVER_ERROR))
        return pb.ChangeInvisibleDurationResponse(status=status, receipt_handle=reply.receipt_handle)

    async def group_config(self, group: str) -> broker_pb2.SubscriptionGroupConfig | None:
        """``group``'s configuration on the first master that has it (None: no broker knows it
        yet): what a v2 consumer's settings are made of (``subscription.fifo`` from
        ``consume_message_orderly``, the backoff policy's attempts from ``retry_max_times``)."""
        await self.masters.refresh()
        for name in sorted(self.masters.names):
            reply = await self.masters.call(
                name, "ListSubscriptionGroups", broker_pb2.ListSubscriptionGroupsRequest(), RPC_SLACK_S
            )
            for config in reply.groups:
                if config.group_name == group:
                    return config
        return None

    async def forward_dead_letter(
        self, request: pb.ForwardMessageToDeadLetterQueueRequest, time_remaining_s: float | None = None
    ) -> pb.ForwardMessageToDeadLetterQueueResponse:
        """The client gave up on a message (a push consumer past its maximum attempts): the
        broker moves it to the group's dead-letter topic, ``%DLQ%<group>``, now."""
        group = group_of(request.group)
        topic = convert.topic_of(request.topic)
        receipt = receipt_of(request.receipt_handle)
        self.renewals.forget(request.receipt_handle)
        reply = await self.masters.call_through_failover(
            receipt.broker_name,
            "ForwardToDeadLetter",
            broker_pb2.ForwardToDeadLetterRequest(
                consumer_group=group, topic=topic, receipt_handle=request.receipt_handle
            ),
            RPC_SLACK_S,
            failover_budget_s(time_remaining_s),
        )
        status = _ACK_STATUS.get(reply.result, codes.status(v2.INTERNAL_SERVER_ERROR))
        return pb.ForwardMessageToDeadLetterQueueResponse(status=status)

    async def assignments(
        self, request: pb.QueryAssignmentRequest, endpoints: v2.Endpoints
    ) -> pb.QueryAssignmentResponse:
        """One assignment per broker group with a master: a push consumer receives from each
        (queue id -1: the broker pops from all its queues, see the module docstring)."""
        group_of(request.group)
        topic = convert.topic_of(request.topic)
        route = await self._channels.namesrv_call("QueryRoute", nameserver_pb2.QueryRouteRequest(topic=topic))
        masters = {d.broker_name for d in route.broker_datas if routes.MASTER_ID in d.broker_addrs}  # type: ignore[attr-defined]
        assignments = [
            v2.Assignment(
                message_queue=v2.MessageQueue(
                    topic=request.topic,
                    id=-1,
                    permission=v2.READ_WRITE,
                    broker=v2.Broker(name=data.broker_name, id=routes.MASTER_ID, endpoints=endpoints),
                    accept_message_types=convert.ALL_TYPES,
                )
            )
            for data in sorted(route.queue_datas, key=lambda d: d.broker_name)  # type: ignore[attr-defined]
            if data.broker_name in masters and data.perm & routes.PERM_READ and data.read_queue_nums
        ]
        return pb.QueryAssignmentResponse(status=codes.OK, assignments=assignments)


def _message(popped: broker_pb2.PoppedMessage, invisible_ms: int, namespace: str) -> v2.Message:
    message = stored_message(decode(popped.record), popped.queue_id, popped.queue_offset, namespace)
    system = message.system_properties
    system.receipt_handle = popped.receipt_handle
    system.delivery_attempt = popped.delivery_attempt
    system.invisible_duration.FromMilliseconds(invisible_ms)
    return message


def stored_message(stored: StoredMessage, queue_id: int, queue_offset: int, namespace: str) -> v2.Message:
    """A stored message as v2 clients get it (receive and pull alike): the type from its
    properties, ids, hosts, timestamps and the queue place."""
    properties = stored.properties
    if convert.SHARDING_KEY in properties:
        kind = v2.FIFO
    elif convert.TIMER_DELIVER_MS in properties or Property.DELAY in properties:
        kind = v2.DELAY
    elif Property.TRANSACTION_PREPARED in properties:
        kind = v2.TRANSACTION
    else:
        kind = v2.NORMAL
    message = convert.inbound(
        stored.topic,
        stored.body,
        properties,
        born_timestamp_ms=stored.born_timestamp_ms,
        born_host=stored.born_host,
        store_timestamp_ms=stored.store_timestamp_ms,
        queue_id=queue_id,
        queue_offset=queue_offset,
        message_type=kind,
        namespace=namespace,
    )
    system = message.system_properties
    if not system.message_id:  # stored by an orbitmq client without a unique key
        system.message_id = stored.msg_id
    system.store_host = stored.store_host
    return message
