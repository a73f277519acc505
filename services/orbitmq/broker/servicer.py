"""The Broker gRPC service: producers, consumers, queries and administration.

Handlers validate, translate protos to store calls and back, and leave the rules to the
modules they call (topics, consumers, locks, long polling, schedule, transactions).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Iterable
from operator import attrgetter
from typing import TYPE_CHECKING, TypeVar

import grpc

from orbitmq.auth.rpcs import GET, PUB
from orbitmq.broker.auth_admin import AuthAdminServicer
from orbitmq.broker.durable_config import persist_now
from orbitmq.broker.ha import HaServicer
from orbitmq.broker.pop.handles import MAX_ACKS_PER_CALL, InvalidReceiptHandle
from orbitmq.broker.pop.service import PopPersistError
from orbitmq.broker.pop.state import AckOutcome, PopKey
from orbitmq.broker.reput import detour
from orbitmq.broker.timer.routing import TIMER_KEYS, timed
from orbitmq.broker.topic_changes import (
    Backlog,
    TopicChangePlan,
    measure_backlog,
    plan_create,
    plan_update,
)
from orbitmq.broker.topics import retry_topic, topic_to_proto
from orbitmq.common.guard import auth_active, authorize_topic_deferred
from orbitmq.common.names import validate_group_name, validate_topic_name
from orbitmq.common.properties import BROKER_PROPERTIES, SystemPropertyError, check_sent_properties
from orbitmq.common.rpc import RpcFailure, parse_request, returns_reply_bytes, takes_request_bytes
from orbitmq.common.topics import SCHEDULE_TOPIC, TRANS_HALF_TOPIC, Property
from orbitmq.native import NATIVE, SendHeader, scan_send
from orbitmq.store.commitlog import AppendedBatch
from orbitmq.store.config_store import SubscriptionGroupConfig
from orbitmq.store.message_filter import MessageFilter
from orbitmq.store.message_id import msg_id_prefix
from orbitmq.store.record import InboundMessage, MessageBatch, ScannedBatch, SysFlag, transaction_type
from orbitmq.store.results import GetResult, GetStatus, PutResult, PutStatus
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2
from orbitmq.v1.broker_pb2 import ErrorReason, PullStatus, SendStatus

if TYPE_CHECKING:
    from orbitmq.broker.server import Broker

log = logging.getLogger(__name__)

# Protobuf enum values as plain ints: reading ``SendStatus.SEND_OK`` goes through the enum
# wrapper's Python-level __getattr__, microseconds that every send and pull would pay.
_SEND_OK = SendStatus.SEND_OK
_FOUND, _NO_MATCHED_MSG, _NO_NEW_MSG, _OFFSET_ILLEGAL = (
    PullStatus.FOUND,
    PullStatus.NO_MATCHED_MSG,
    PullStatus.NO_NEW_MSG,
    PullStatus.OFFSET_ILLEGAL,
)
_SEND_STATUS = {
    PutStatus.PUT_OK: SendStatus.SEND_OK,
    PutStatus.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
# Store read statuses → what the client does next (RocketMQ's PullMessageProcessor mapping).
_NO_NEW = (GetStatus.OFFSET_FOUND_NULL, GetStatus.OFFSET_OVERFLOW_ONE)
_MOVED = (GetStatus.OFFSET_OVERFLOW_BADLY, GetStatus.OFFSET_TOO_SMALL)
_EMPTY_QUEUE = (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE)
MAX_PULL_BATCH = 1024
_T = TypeVar("_T")
_ACK_RESULT = {
    AckOutcome.ACKED: broker_pb2.ACK_OK,
    AckOutcome.ALREADY_DONE: broker_pb2.ACK_ALREADY_DONE,
    AckOutcome.STALE: broker_pb2.ACK_STALE_HANDLE,
    AckOutcome.UNKNOWN: broker_pb2.ACK_UNKNOWN_HANDLE,
}
_DETOUR_KEYS = frozenset({Property.DELAY, Property.TRANSACTION_PREPARED, *TIMER_KEYS})
_DETOUR_NAMES = tuple(name.encode() for name in sorted(_DETOUR_KEYS | BROKER_PROPERTIES))
"""What sends the C path leaves to the Python path: detours, and system properties only the
broker writes (refused there, :func:`_check_sent_properties`)."""
_TOPIC_FIELDS = ("read_queue_nums", "write_queue_nums", "perm", "order")
"""UpdateTopicRequest's optional fields: only those present change."""
_TOPIC_OF = attrgetter("topic")
_BODY_OF = attrgetter("body")
_FLAG_OF = attrgetter("flag")
_PROPERTIES_OF = attrgetter("properties")
_BORN_HOST_OF = attrgetter("born_host")


def _parse_send(data: bytes) -> broker_pb2.SendMessageRequest:
    return parse_request(broker_pb2.SendMessageRequest, data, "SendMessage")


def _properties(protos: Iterable[common_pb2.Message]) -> list[dict[str, str]]:
    # A comprehension over the upb map's own iterator: dict(map) goes through the
    # pure-Python Mapping.keys() view and costs twice as much per message.
    return [{k: p[k] for k in p} for p in map(_PROPERTIES_OF, protos)]


def _check_sent_properties(properties: list[dict[str, str]]) -> None:
    """No message of a send carries a property only the broker writes (``REAL_TOPIC``,
    ``RETRY_TOPIC``, ``PGROUP``, ...): a raw request cannot pass one off as the system's."""
    for props in properties:
        if not BROKER_PROPERTIES.isdisjoint(props):
            try:
                check_sent_properties(props)
            except SystemPropertyError as error:
                raise RpcFailure(ErrorReason.MESSAGE_ILLEGAL, str(error)) from None


def _check_topics(topic: str, protos: list[common_pb2.Message]) -> None:
    """Every message of a send is for the request's topic (or names none)."""
    topics = set(map(_TOPIC_OF, protos))
    topics.discard("")
    if topics and topics != {topic}:
        other = next(m.topic for m in protos if m.topic and m.topic != topic)
        raise RpcFailure(
            ErrorReason.MESSAGE_ILLEGAL,
            f"message topic {other!r} differs from the request's topic {topic!r}",
        )


def _send_reply(
    status: int, appended: AppendedBatch, queue_id: int, broker_name: str, transaction_id: str
) -> bytes:
    """A SendMessageResponse's wire bytes: encoded in C when the extension is loaded (building
    the message and its ids in Python costs a send several microseconds), else by protobuf."""
    first = appended.first_physical_offset
    queue_offset = appended.queue_offsets[0]
    if NATIVE is not None:
        prefix = msg_id_prefix(appended.store_host)
        return NATIVE.send_reply(
            status, prefix, first, appended.sizes, queue_id, queue_offset, broker_name, transaction_id
        )  # type: ignore[no-any-return]
    return broker_pb2.SendMessageResponse(
        status=status,
        msg_ids=appended.msg_ids(),
        queue_id=queue_id,
        queue_offset=queue_offset,
        broker_name=broker_name,
        transaction_id=transaction_id,
        commit_log_offset=first,
    ).SerializeToString()


def _pull_reply(status: int, result: GetResult, suggest: int) -> bytes:
    """A PullMessageResponse's wire bytes: in C when the extension is loaded, each record copied
    once (protobuf copies a pull's records into the message, then again to serialize it)."""
    if NATIVE is not None:
        return NATIVE.pull_reply(  # type: ignore[no-any-return]
            status, result.next_begin_offset, result.min_offset, result.max_offset, suggest, result.records
        )
    return broker_pb2.PullMessageResponse(
        status=status,
        next_begin_offset=result.next_begin_offset,
        min_offset=result.min_offset,
        max_offset=result.max_offset,
        suggest_which_broker_id=suggest,
        records=result.records,
    ).SerializeToString()


def put_failure(result: PutResult) -> RpcFailure:
    if result.status in (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED):
        return RpcFailure(ErrorReason.MESSAGE_ILLEGAL, result.reason or result.status.value)
    if result.status is PutStatus.DISK_FULL:
        return RpcFailure(ErrorReason.DISK_FULL, result.reason or "the store's disk is full")
    return RpcFailure(
        ErrorReason.SERVICE_NOT_AVAILABLE, f"{result.status.value}: {result.reason or 'store failure'}"
    )


class BrokerServicer(HaServicer, AuthAdminServicer, broker_pb2_grpc.BrokerServicer):
    def __init__(self, broker: Broker) -> None:
        self.b = broker
        self.python_path_sends = 0
        """Sends the C scanner left to the Python path (delays, transactions, what it does not
        read): a producer's everyday sends must not add to it, or each costs the broker several
        times the CPU without any other sign."""

    # -- producers -----------------------------------------------------------------------------

    @takes_request_bytes
    @returns_reply_bytes
    async def SendMessage(self, data: bytes, context: grpc.aio.ServicerContext):
        b = self.b
        started = time.perf_counter()
        self._writable()
        scanned = scan_send(data, _DETOUR_NAMES)
        if scanned is not None and not scanned.header.sys_flag:
            # The usual send, on the C path: no protobuf object, no Python object per message.
            head = scanned.header
            authorize_topic_deferred(PUB, head.topic)
            queue_id, born = self._destination(head, context)
            await b.save_created_config()  # this send created its topic: on disk before the message
            batch = ScannedBatch(
                head.topic,
                queue_id,
                data,
                scanned.columns,
                unpacked=lambda: self._columns(_parse_send(data), queue_id, born),
                born_host=born[0],
                born_timestamp_ms=born[1],
                reconsume_times=head.reconsume_times,
            )
            result = b.service.append_batch(batch)
            if b.waits_after_append and result.ok:  # SYNC_FLUSH or SYNC_MASTER
                result = await b.acknowledged(result)
            count, transaction_id = scanned.columns.count, batch.first_unique_key
        else:
            self.python_path_sends += 1
            request = head = _parse_send(data)
            authorize_topic_deferred(PUB, request.topic)
            if not request.messages:
                raise RpcFailure(ErrorReason.MESSAGE_ILLEGAL, "a send must carry at least one message")
            queue_id, born = self._destination(request, context)
            await b.save_created_config()
            protos = list(request.messages)  # one wrapper per message, reused by the column maps below
            _check_topics(request.topic, protos)
            properties = _properties(protos)
            _check_sent_properties(properties)
            count, transaction_id = len(protos), properties[0].get(Property.UNIQ_KEY)
            if (
                not request.sys_flag
                and all(map(_DETOUR_KEYS.isdisjoint, properties))
                and not any(map(_BORN_HOST_OF, protos))
            ):
                # No message detours or has a born host of its own (a MessageBatch has one for
                # all), so the batch is stored column by column.
                result = await b.put_batch(self._columns(request, queue_id, born, properties, protos))
            else:
                result = await b.put(self._inbound(request, queue_id, born, properties, protos))
        if result.status is PutStatus.PUT_OK:  # the usual answer, without hashing an Enum
            status = _SEND_OK
        elif result.status in _SEND_STATUS:
            status = _SEND_STATUS[result.status]
        else:
            raise put_failure(result)
        b.metrics.observe_send(head.topic, count, time.perf_counter() - started)
        return _send_reply(status, result.messages, queue_id, b.settings.broker_name, transaction_id or "")  # type: ignore[arg-type]

    def _destination(
        self, head: broker_pb2.SendMessageRequest | SendHeader, context: grpc.aio.ServicerContext
    ) -> tuple[int, tuple[str, int]]:
        """The queue a send goes to (its topic created if allowed) and its (born host, born time).

        The born host is the connection's peer unless the send names one: the RocketMQ 5 proxy
        names its client's, as RocketMQ's proxy does (a born host is what the sender says, as
        its born time is; nothing trusts it, and the store refuses one that is not an IP address
        and a port as MESSAGE_ILLEGAL)."""
        b = self.b
        born_host = head.born_host or _peer_host(context)
        config = b.topics.for_send(head.topic, head.default_topic_queue_nums)
        queue_id = b.topics.pick_queue(config, head.queue_id)
        return queue_id, (born_host, head.born_timestamp_ms or b.clock.now_ms())

    @staticmethod
    def _columns(
        request: broker_pb2.SendMessageRequest,
        queue_id: int,
        born: tuple[str, int],
        properties: list[dict[str, str]] | None = None,
        protos: list[common_pb2.Message] | None = None,
    ) -> MessageBatch:
        """The messages of a send as a :class:`MessageBatch` (the Python path)."""
        protos = protos if protos is not None else list(request.messages)
        properties = properties if properties is not None else _properties(protos)
        return MessageBatch(
            request.topic,
            queue_id,
            list(map(_BODY_OF, protos)),
            properties,
            list(map(_FLAG_OF, protos)),
            request.sys_flag,
            born[1],
            born[0],
            request.reconsume_times,
        )

    def _inbound(
        self,
        request: broker_pb2.SendMessageRequest,
        queue_id: int,
        born: tuple[str, int],
        properties: list[dict[str, str]],
        protos: list[common_pb2.Message],
    ) -> list[InboundMessage]:
        """The messages of a send one by one, delayed and prepared ones routed to their detours,
        each born at its own born host if it names one (the proxy's coalesced sends of several
        clients), else at the send's."""
        messages = []
        for message, props in zip(protos, properties, strict=True):
            inbound = InboundMessage(
                request.topic,
                message.body,
                queue_id,
                props,
                message.flag,
                request.sys_flag,
                born[1],
                message.born_host or born[0],
                request.reconsume_times,
            )
            if request.sys_flag or not _DETOUR_KEYS.isdisjoint(props):
                inbound = self._route(inbound, request.producer_group)
            messages.append(inbound)
        return messages

    def _route(self, message: InboundMessage, producer_group: str) -> InboundMessage:
        """Delayed and prepared messages detour through their system topics."""
        properties = message.properties
        prepared = properties.get(Property.TRANSACTION_PREPARED, "").lower() == "true" or (
            transaction_type(message.sys_flag) == SysFlag.TRANSACTION_PREPARED
        )
        if prepared:
            message.properties[Property.PRODUCER_GROUP] = producer_group
            message.sys_flag &= ~int(SysFlag.TRANSACTION_ROLLBACK)  # half topic gets a normal unit
            return detour(message, TRANS_HALF_TOPIC, 0)
        if not TIMER_KEYS.isdisjoint(properties):
            return timed(message, self.b.clock.now_ms(), self.b.settings.timer_limit_ms)
        level_text = properties.get(Property.DELAY, "")
        if level_text:
            if not level_text.isdigit():
                raise RpcFailure(
                    ErrorReason.MESSAGE_ILLEGAL, f"delay level {level_text!r} must be a whole number"
                )
            level = min(int(level_text), self.b.delay_levels)
            if level > 0:
                message.properties[Property.DELAY] = str(level)
                return detour(message, SCHEDULE_TOPIC, level - 1)
        return message

    async def EndTransaction(self, request, context):
        self._writable()
        if auth_active():  # Pub on the half message's own topic (the request names none)
            half = self.b.store.message_at(request.commit_log_offset)
            if half is not None and half.topic == TRANS_HALF_TOPIC:
                authorize_topic_deferred(PUB, half.properties.get(Property.REAL_TOPIC, half.topic))
        await self.b.transactions.end(request.producer_group, request.commit_log_offset, request.resolution)
        return broker_pb2.EndTransactionResponse()

    # -- consumers -----------------------------------------------------------------------------

    @returns_reply_bytes
    async def PullMessage(self, request: broker_pb2.PullMessageRequest, context: grpc.aio.ServicerContext):
        b = self.b
        started = time.perf_counter()
        # A pull that commits nothing records no group: readers keeping no offsets leave none.
        group = b.topics.group(request.consumer_group, record=request.commit_offset >= 0)
        await b.save_created_config()  # the group's first pull created it
        if not group.consume_enable:
            raise RpcFailure(
                ErrorReason.NO_PERMISSION, f"consumer group {group.group_name!r} may not consume now"
            )
        if not group.consume_broadcast_enable and self._broadcasting(group.group_name):
            raise RpcFailure(
                ErrorReason.NO_PERMISSION,
                f"consumer group {group.group_name!r} may not consume by broadcasting "
                "(consume_broadcast_enable is off: `orbitmq admin group create --broadcast` allows it)",
            )
        b.topics.for_read(request.topic, request.queue_id)
        if request.queue_offset < 0:
            raise RpcFailure(
                ErrorReason.INVALID_OFFSET, f"queue offset {request.queue_offset} must not be negative"
            )
        max_count = min(max(request.max_msg_nums, 1), MAX_PULL_BATCH)
        message_filter = self._filter(request.subscription)
        if request.commit_offset >= 0 and not b.is_slave:  # the pull carries the committed offset
            b.offsets.commit(request.consumer_group, request.topic, request.queue_id, request.commit_offset)
        status, result = self._read(request, max_count, message_filter)
        suspend_ms = min(request.suspend_timeout_ms, b.settings.max_suspend_ms)
        if status == _NO_NEW_MSG and suspend_ms > 0:
            status, result = await self._hold(request, max_count, message_filter, suspend_ms, context)
        b.metrics.observe_pull(
            request.consumer_group, request.topic, len(result.records), time.perf_counter() - started
        )
        # Only a master sends readers elsewhere; a slave always points back to the master.
        suggest = 1 if result.suggest_pull_from_slave and not b.is_slave else 0
        return _pull_reply(status, result, suggest)

    def _read(
        self, request: broker_pb2.PullMessageRequest, max_count: int, message_filter: MessageFilter | None
    ) -> tuple[int, GetResult]:
        """The store's answer to a pull, and the PullStatus it means to the client."""
        result = self.b.store.get_message(
            request.consumer_group,
            request.topic,
            request.queue_id,
            request.queue_offset,
            max_count,
            message_filter,
        )
        status = result.status
        if status is GetStatus.FOUND:
            return _FOUND, result
        if status is GetStatus.NO_MATCHED_MESSAGE:
            return _NO_MATCHED_MSG, result
        if status in _NO_NEW or (status in _EMPTY_QUEUE and request.queue_offset == 0):
            return _NO_NEW_MSG, result
        return _OFFSET_ILLEGAL, result

    async def _hold(
        self,
        request: broker_pb2.PullMessageRequest,
        max_count: int,
        message_filter: MessageFilter | None,
        suspend_ms: int,
        context: grpc.aio.ServicerContext,
    ) -> tuple[int, GetResult]:
        """Wait until the queue grows past the offset (or the timeout), then read again."""
        b = self.b
        if not b.settings.long_polling_enable:
            await asyncio.sleep(min(suspend_ms, b.settings.short_polling_ms) / 1000)
            return self._read(request, max_count, message_filter)
        deadline = asyncio.get_running_loop().time() + suspend_ms / 1000
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0 or b.closing:
                return self._read(request, max_count, message_filter)
            future = b.holds.hold(request.topic, request.queue_id, request.queue_offset)
            try:
                await asyncio.wait_for(future, remaining)
            except TimeoutError:
                pass
            finally:
                b.holds.release(request.topic, request.queue_id, future)
            status, result = self._read(request, max_count, message_filter)
            if status != _NO_MATCHED_MSG or b.closing:
                return status, result
            # Only filtered-out messages arrived: keep waiting from past them.
            request.queue_offset = result.next_begin_offset

    def _filter(self, subscription: common_pb2.Subscription) -> MessageFilter | None:
        expression = subscription.expression.strip()
        if subscription.expression_type == common_pb2.SQL92:
            from orbitmq.filter.sql92 import Sql92Error, compile_sql92

            try:
                return compile_sql92(expression)
            except Sql92Error as error:
                raise RpcFailure(ErrorReason.INVALID_EXPRESSION, str(error)) from None
        if not expression or expression == "*":
            return None
        try:
            return self.b.tag_filter(expression)
        except ValueError as error:
            raise RpcFailure(ErrorReason.INVALID_EXPRESSION, str(error)) from None

    async def QueryConsumerOffset(self, request, context):
        validate_group_name(request.consumer_group)
        self.b.topics.for_read(request.topic, request.queue_id)
        offset = self.b.offsets.query(request.consumer_group, request.topic, request.queue_id)
        return broker_pb2.QueryConsumerOffsetResponse(offset=offset)

    async def UpdateConsumerOffset(self, request, context):
        validate_group_name(request.consumer_group)
        self.b.topics.for_read(request.topic, request.queue_id)
        if request.offset < 0:
            raise RpcFailure(ErrorReason.INVALID_OFFSET, f"offset {request.offset} must not be negative")
        self.b.topics.group(request.consumer_group)  # a group that commits is recorded (listed, with its lag)
        await self.b.save_created_config()
        self.b.offsets.commit(request.consumer_group, request.topic, request.queue_id, request.offset)
        return broker_pb2.UpdateConsumerOffsetResponse()

    def _broadcasting(self, group: str) -> bool:
        """Whether the group's members consume by broadcasting, as their newest heartbeat says
        (RocketMQ checks the same at each pull when a group turns broadcasting off)."""
        data = self.b.clients.consumer_data(group)
        return data is not None and data.message_model == common_pb2.BROADCASTING

    async def Heartbeat(self, request: broker_pb2.HeartbeatRequest, context):
        if not request.client_id:
            raise RpcFailure(ErrorReason.INVALID_ARGUMENT, "heartbeat needs a client id")
        created = False
        for consumer in request.consumers:
            group = self.b.topics.group(consumer.group)
            for subscription in consumer.subscriptions:
                self._filter(subscription)
            retry = retry_topic(group.group_name)
            if (
                consumer.message_model == common_pb2.CLUSTERING
                and not self.b.is_slave
                and self.b.topics.get(retry) is None
            ):
                # As RocketMQ does on registration: the group's retry topic exists, and is
                # routable, before its first send-back, so consumers subscribe to it at start.
                self.b.topics.ensure(retry, max(1, group.retry_queue_nums))
                created = True
        await self.b.save_created_config()  # a new group or retry topic: durable before the answer
        if created:
            self.b.registration_changed()
        for producer in request.producers:
            validate_group_name(producer.group)
        changed = self.b.clients.heartbeat(
            request.client_id, context.peer(), [p.group for p in request.producers], request.consumers
        )
        self.b.membership_changed(changed)
        return broker_pb2.HeartbeatResponse()

    async def UnregisterClient(self, request, context):
        changed = self.b.clients.unregister(request.client_id, request.producer_group, request.consumer_group)
        self.b.membership_changed(changed)
        return broker_pb2.UnregisterClientResponse()

    async def GetConsumerList(self, request, context):
        validate_group_name(request.consumer_group)
        return broker_pb2.GetConsumerListResponse(
            client_ids=self.b.clients.consumer_ids(request.consumer_group)
        )

    async def LockBatch(self, request, context):
        self._master_only("queue locks")
        validate_group_name(request.consumer_group)
        keys = [(q.topic, q.broker_name, q.queue_id) for q in request.queues]
        held = self.b.locks.lock_batch(request.consumer_group, request.client_id, keys)
        return broker_pb2.LockBatchResponse(
            locked=[common_pb2.MessageQueue(topic=t, broker_name=n, queue_id=q) for t, n, q in held]
        )

    async def UnlockBatch(self, request, context):
        self._master_only("queue locks")
        keys = [(q.topic, q.broker_name, q.queue_id) for q in request.queues]
        self.b.locks.unlock_batch(request.consumer_group, request.client_id, keys)
        return broker_pb2.UnlockBatchResponse()

    async def SendBack(self, request: broker_pb2.SendBackRequest, context):
        self._writable()
        await self.b.send_back(request)
        return broker_pb2.SendBackResponse()

    async def PopMessage(self, request: broker_pb2.PopMessageRequest, context):
        b = self.b
        self._writable()  # a pop stores its records: a master's work
        group = b.topics.group(request.consumer_group)
        if not group.consume_enable:
            raise RpcFailure(
                ErrorReason.NO_PERMISSION, f"consumer group {group.group_name!r} may not consume now"
            )
        if request.queue_id < 0:
            queue_ids = list(range(b.topics.for_read(request.topic, 0).read_queue_nums))
        else:
            b.topics.for_read(request.topic, request.queue_id)
            queue_ids = [request.queue_id]
        if request.invisible_time_ms <= 0:
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT,
                f"invisible_time_ms {request.invisible_time_ms} must be > 0 (how long pops hide)",
            )
        if request.max_delivery_attempts < 0:
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT,
                f"max_delivery_attempts {request.max_delivery_attempts} must be >= 0 (0: the group's)",
            )
        message_filter = self._filter(request.subscription)  # a pull's filter: tags or SQL92
        started = time.perf_counter()
        popped = await self._pop_call(  # a demotion while it waited: its records refused
            b.pop.pop_any(
                request.consumer_group,
                request.topic,
                queue_ids,
                min(max(request.max_msg_nums, 1), MAX_PULL_BATCH),
                request.invisible_time_ms,
                fifo=request.fifo or group.consume_message_orderly,  # the group config decides too
                max_attempts=request.max_delivery_attempts or group.retry_max_times + 1,
                message_filter=message_filter,
                wait_ms=max(0, min(request.poll_time_ms, b.settings.max_suspend_ms)),
                from_first=group.consume_from_min_enable,
            )
        )
        b.metrics.observe_pull(
            request.consumer_group, request.topic, len(popped), time.perf_counter() - started
        )
        messages = []
        for p in popped:
            record = b.store.commitlog.read_record(p.message.physical_offset)
            if record is None:  # deleted by retention since it was read: delivered again later
                continue
            messages.append(
                broker_pb2.PoppedMessage(
                    record=record,
                    receipt_handle=p.handle.encode(),
                    delivery_attempt=p.attempt,
                    invisible_until_ms=p.invisible_until_ms,
                    queue_id=p.message.queue_id,
                    queue_offset=p.message.queue_offset,
                )
            )
        return broker_pb2.PopMessageResponse(messages=messages)

    async def AckMessage(self, request: broker_pb2.AckMessageRequest, context):
        self._writable()
        validate_group_name(request.consumer_group)
        if not request.receipt_handles:
            outcome = await self._pop_call(
                self.b.pop.ack(request.consumer_group, request.topic, request.receipt_handle)
            )
            return broker_pb2.AckMessageResponse(result=_ACK_RESULT[outcome])
        handles = [*([request.receipt_handle] if request.receipt_handle else []), *request.receipt_handles]
        if len(handles) > MAX_ACKS_PER_CALL:
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT,
                f"an ack names {len(handles)} receipt handles; at most {MAX_ACKS_PER_CALL} per call",
            )
        outcomes = await self._pop_call(self.b.pop.ack_many(request.consumer_group, request.topic, handles))
        results = [_ACK_RESULT[o] for o in outcomes]
        return broker_pb2.AckMessageResponse(result=results[0], results=results)

    async def ChangeInvisibleTime(self, request: broker_pb2.ChangeInvisibleTimeRequest, context):
        self._writable()
        validate_group_name(request.consumer_group)
        if request.invisible_time_ms <= 0:
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT, f"invisible_time_ms {request.invisible_time_ms} must be > 0"
            )
        outcome, handle = await self._pop_call(
            self.b.pop.change_invisible(
                request.consumer_group,
                request.topic,
                request.receipt_handle,
                request.invisible_time_ms,
                renew=request.renew,
            )
        )
        if handle is None:
            return broker_pb2.ChangeInvisibleTimeResponse(result=_ACK_RESULT[outcome])
        return broker_pb2.ChangeInvisibleTimeResponse(
            result=_ACK_RESULT[outcome],
            receipt_handle=handle.encode(),
            invisible_until_ms=self.b.clock.now_ms() + request.invisible_time_ms,
        )

    async def ForwardToDeadLetter(self, request: broker_pb2.ForwardToDeadLetterRequest, context):
        self._writable()
        validate_group_name(request.consumer_group)
        outcome = await self._pop_call(
            self.b.pop.forward_dead_letter(request.consumer_group, request.topic, request.receipt_handle)
        )
        return broker_pb2.AckMessageResponse(result=_ACK_RESULT[outcome])

    @staticmethod
    async def _pop_call(call: Awaitable[_T]) -> _T:
        """A POP, or a POP ack or change, with a malformed or foreign receipt handle and a
        record the store refused (a full disk; a broker demoted meanwhile) turned into the
        protocol's errors."""
        try:
            return await call
        except InvalidReceiptHandle as error:
            raise RpcFailure(ErrorReason.INVALID_ARGUMENT, str(error)) from None
        except PopPersistError as error:
            raise RpcFailure(ErrorReason.SERVICE_NOT_AVAILABLE, str(error)) from None

    async def Session(
        self, request_iterator: AsyncIterator[broker_pb2.ClientEvent], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[broker_pb2.ServerEvent]:
        first = await anext(aiter(request_iterator), None)
        if first is None or not first.HasField("hello") or not first.hello.client_id:
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT, "a session must start with a hello naming the client id"
            )
        hello = first.hello
        session = self.b.clients.open_session(
            hello.client_id, [*hello.producer_groups, *hello.consumer_groups]
        )
        reader = asyncio.get_running_loop().create_task(
            self._read_session(session.client_id, request_iterator)
        )
        getter: asyncio.Future[broker_pb2.ServerEvent] | None = None
        try:
            while not reader.done():
                getter = asyncio.ensure_future(session.events.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
        finally:
            # A client that goes away cancels this generator inside the wait: a getter left
            # pending would be destroyed pending ("Task was destroyed but it is pending").
            if getter is not None:
                getter.cancel()
            reader.cancel()
            if self.b.clients.close_session(session):
                self.b.client_gone(session.client_id)

    async def _read_session(self, client_id: str, events: AsyncIterator[broker_pb2.ClientEvent]) -> None:
        async for event in events:
            if event.HasField("check_result"):
                result = event.check_result
                try:
                    await self.b.transactions.end(
                        result.producer_group, result.commit_log_offset, result.resolution
                    )
                except RpcFailure as failure:
                    log.warning("check result from %s rejected: %s", client_id, failure.message)

    # -- queries -------------------------------------------------------------------------------

    async def QueryMessageByKey(self, request, context):
        self.b.topics.require(request.topic)
        end = request.end_timestamp_ms or (1 << 62)
        if request.begin_timestamp_ms < 0 or end < request.begin_timestamp_ms or request.max_num < 0:
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT,
                f"time range [{request.begin_timestamp_ms}, {request.end_timestamp_ms}] and max "
                f"{request.max_num} must be non-negative with begin <= end",
            )
        if not request.key:
            raise RpcFailure(ErrorReason.INVALID_ARGUMENT, "a key query needs a key")
        found = self.b.store.query_by_key(
            request.topic,
            request.key,
            max(1, min(request.max_num or 32, 256)),
            request.begin_timestamp_ms,
            end,
        )
        return broker_pb2.QueryMessageResponse(
            records=[self._record(m.physical_offset, m.size) for m in found]
        )

    async def ViewMessage(self, request, context):
        try:
            message = self.b.store.message_by_id(request.msg_id)
        except ValueError as error:
            raise RpcFailure(ErrorReason.INVALID_ARGUMENT, str(error)) from None
        if message is None:
            raise RpcFailure(
                ErrorReason.INVALID_OFFSET, f"message {request.msg_id!r} is not stored on this broker"
            )
        authorize_topic_deferred(GET, message.topic)
        return broker_pb2.QueryMessageResponse(records=[self._record(message.physical_offset, message.size)])

    def _record(self, offset: int, size: int) -> bytes:
        return self.b.store.commitlog.read(offset, size) or b""

    async def SearchOffset(self, request, context):
        self.b.topics.for_read(request.topic, request.queue_id)
        offset = self.b.store.offset_by_timestamp(request.topic, request.queue_id, request.timestamp_ms)
        return broker_pb2.OffsetResponse(offset=offset)

    async def GetMinOffset(self, request, context):
        self.b.topics.for_read(request.topic, request.queue_id)
        return broker_pb2.OffsetResponse(
            offset=self.b.store.min_offset_in_queue(request.topic, request.queue_id)
        )

    async def GetMaxOffset(self, request, context):
        self.b.topics.for_read(request.topic, request.queue_id)
        return broker_pb2.OffsetResponse(
            offset=self.b.store.max_offset_in_queue(request.topic, request.queue_id)
        )

    def _require_known_group(self, group: str) -> None:
        """A group this broker has never heard of (no subscription group, no offsets) is a typo
        more often than not: answering "lag 0" for it would tell a monitoring script all is well."""
        validate_group_name(group)
        known = self.b.topics.tables.subscription_groups.contains(group)
        popped = self.b.pop.state.topics_of(group)
        if not known and not self.b.offsets.topics_of_group(group) and not popped:
            raise RpcFailure(
                ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"consumer group {group!r} does not exist on broker {self.b.settings.broker_name} "
                "(no subscription group and no offsets); 'orbitmq admin group list' shows the groups",
            )

    async def GetConsumeStats(self, request, context):
        self._require_known_group(request.consumer_group)
        group = request.consumer_group
        topics = (
            [request.topic]
            if request.topic
            else sorted(self.b.offsets.topics_of_group(group) | self.b.pop.state.topics_of(group))
        )
        stats = broker_pb2.ConsumeStats()
        now_ms = self.b.clock.now_ms()
        for topic in topics:
            config = self.b.topics.require(topic)
            for queue_id in range(config.read_queue_nums):
                progress = self.b.queue_progress(group, topic, queue_id)
                pop = self.b.pop.state.summary(PopKey(group, topic, queue_id), now_ms)
                if pop is not None:  # a POP group: its place is the POP state's, not an offset
                    progress.pop = True
                    progress.consumer_offset = pop.consume_offset
                    progress.lag = max(0, progress.broker_offset - pop.consume_offset)
                    progress.pop_in_flight = pop.in_flight
                    progress.pop_expired = pop.expired
                    progress.pop_delivered_offset = pop.delivered_offset
                    progress.pop_done_above = pop.done_above
                stats.queues.append(progress)
                stats.total_lag += progress.lag
        return stats

    async def GetTopicStats(self, request, context):
        config = self.b.topics.require(request.topic)
        stats = broker_pb2.TopicStats(broker_name=self.b.settings.broker_name)
        store = self.b.store
        for queue_id in range(config.read_queue_nums):
            high = store.max_offset_in_queue(request.topic, queue_id)
            last = self.b.last_store_time(request.topic, queue_id)
            stats.queues.append(
                broker_pb2.QueueOffsets(
                    queue_id=queue_id,
                    min_offset=store.min_offset_in_queue(request.topic, queue_id),
                    max_offset=high,
                    last_update_timestamp_ms=last,
                )
            )
        return stats

    # -- administration ------------------------------------------------------------------------

    async def CreateTopic(self, request, context):
        name = request.topic.topic_name
        self.b.topics.check_new_topic(name)
        plan = plan_create(
            self.b.topics.from_proto(request.topic),
            self.b.topics.get(name),
            self._backlog(name),
            update_existing=request.update_existing,
            force=request.force,
        )
        return await self._apply_topic_change(plan)

    async def UpdateTopic(self, request, context):
        validate_topic_name(request.topic)
        given = {f: getattr(request, f) for f in _TOPIC_FIELDS if request.HasField(f)}
        plan = plan_update(
            self.b.topics.get(request.topic),
            self._backlog(request.topic),
            topic=request.topic,
            force=request.force,
            **given,
        )
        return await self._apply_topic_change(plan)

    def _backlog(self, topic: str) -> Backlog:
        store, offsets = self.b.store, self.b.offsets
        return measure_backlog(
            topic,
            min_offset=store.min_offset_in_queue,
            max_offset=store.max_offset_in_queue,
            groups=offsets.groups_of_topic,
            committed=offsets.query,
        )

    async def _apply_topic_change(self, plan: TopicChangePlan) -> broker_pb2.TopicChange:
        if plan.writes:
            self.b.topics.tables.topics.put(plan.after)
            await self.b.save_config()  # durable before the answer, as RocketMQ's updateTopic
            self.b.registration_changed()
        return broker_pb2.TopicChange(
            outcome=plan.outcome,
            broker_name=self.b.settings.broker_name,
            before=topic_to_proto(plan.before) if plan.before is not None else None,
            after=topic_to_proto(plan.after),
        )

    async def DeleteTopic(self, request, context):
        if not self.b.topics.delete(request.topic):
            raise RpcFailure(
                ErrorReason.TOPIC_NOT_EXIST, f"topic {request.topic!r} does not exist on this broker"
            )
        await self.b.save_config()  # the config first: queues without one would be adopted again
        self.b.store.delete_topic(request.topic)
        self.b.registration_changed()
        return broker_pb2.AdminResponse(message=f"topic {request.topic!r} deleted")

    async def ListTopics(self, request, context):
        return broker_pb2.ListTopicsResponse(
            topics=[topic_to_proto(t) for t in self.b.topics.tables.topics.list()]
        )

    async def CreateSubscriptionGroup(self, request, context):
        g = request.group
        try:
            config = SubscriptionGroupConfig(
                group_name=g.group_name,
                consume_enable=g.consume_enable,
                consume_from_min_enable=(
                    g.consume_from_min_enable if g.HasField("consume_from_min_enable") else True
                ),
                consume_broadcast_enable=g.consume_broadcast_enable,
                retry_queue_nums=g.retry_queue_nums or 1,
                retry_max_times=g.retry_max_times if g.HasField("retry_max_times") else 16,
                broker_id=g.broker_id,
                consume_message_orderly=g.consume_message_orderly,
            )
        except ValueError as error:
            raise RpcFailure(ErrorReason.INVALID_ARGUMENT, " ".join(str(error).split())) from None
        self.b.topics.create_or_update_group(config)
        await self.b.save_config()
        return broker_pb2.AdminResponse(
            message=f"subscription group {config.group_name!r} created or updated"
        )

    async def DeleteSubscriptionGroup(self, request, context):
        if not self.b.topics.delete_group(request.group_name):
            raise RpcFailure(
                ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group {request.group_name!r} does not exist",
            )
        self.b.offsets.remove_group(request.group_name)
        await self.b.save_config()
        await persist_now(self.b.offsets)
        return broker_pb2.AdminResponse(message=f"subscription group {request.group_name!r} deleted")

    async def ListSubscriptionGroups(self, request, context):
        return broker_pb2.ListSubscriptionGroupsResponse(
            groups=[
                broker_pb2.SubscriptionGroupConfig(
                    group_name=g.group_name,
                    consume_enable=g.consume_enable,
                    consume_from_min_enable=g.consume_from_min_enable,
                    consume_broadcast_enable=g.consume_broadcast_enable,
                    retry_queue_nums=g.retry_queue_nums,
                    retry_max_times=g.retry_max_times,
                    broker_id=g.broker_id,
                    consume_message_orderly=g.consume_message_orderly,
                )
                for g in self.b.topics.tables.subscription_groups.list()
            ]
        )

    async def ResetOffset(self, request: broker_pb2.ResetOffsetRequest, context):
        self._master_only("offset resets")
        self._require_known_group(request.consumer_group)
        config = self.b.topics.require(request.topic)
        target = request.WhichOneof("target")
        if target is None:
            raise RpcFailure(ErrorReason.INVALID_ARGUMENT, "an offset reset needs a timestamp or an offset")
        if target == "offset" and request.offset < 0:
            raise RpcFailure(ErrorReason.INVALID_OFFSET, f"offset {request.offset} must not be negative")
        if target == "timestamp_ms" and request.timestamp_ms < 0:
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT,
                f"timestamp {request.timestamp_ms} must be milliseconds since the epoch (0 or more)",
            )
        offsets = {}
        store = self.b.store
        for queue_id in range(config.read_queue_nums):
            low, high = (
                store.min_offset_in_queue(request.topic, queue_id),
                store.max_offset_in_queue(request.topic, queue_id),
            )
            if target == "timestamp_ms":
                offset = store.offset_by_timestamp(request.topic, queue_id, request.timestamp_ms)
            else:
                offset = request.offset
            offsets[queue_id] = min(max(offset, low), high)
        self.b.offsets.reset(request.consumer_group, request.topic, offsets)
        await persist_now(self.b.offsets)  # an operator's decision, unlike a consumer's commits
        notice = broker_pb2.ResetOffsetNotice(
            consumer_group=request.consumer_group, topic=request.topic, offsets=offsets
        )
        self.b.clients.push_to_group(request.consumer_group, broker_pb2.ServerEvent(reset_offset=notice))
        return broker_pb2.ResetOffsetResponse(offsets=offsets)

    async def GetRuntimeInfo(self, request, context):
        return self.b.runtime_info()

    async def GetConsumerConnections(self, request, context):
        validate_group_name(request.consumer_group)
        clients = self.b.clients
        data = clients.consumer_data(request.consumer_group)
        wall_minus_lease = self.b.clock.now_ms() - self.b.lease_clock.now_ms()  # heartbeats: lease clock
        reply = broker_pb2.ConsumerConnections(
            connections=[
                broker_pb2.ConsumerConnection(
                    client_id=c.client_id,
                    address=c.address,
                    last_heartbeat_ms=c.last_heartbeat_ms + wall_minus_lease,
                )
                for c in clients.connections(request.consumer_group)
            ]
        )
        if data is not None:
            reply.subscriptions.extend(data.subscriptions)
            reply.message_model = data.message_model
            reply.consume_type = data.consume_type
            reply.consume_from_where = data.consume_from_where
        return reply

    # -- guards --------------------------------------------------------------------------------

    def _writable(self) -> None:
        if self.b.is_slave:
            raise RpcFailure(
                ErrorReason.SLAVE_READ_ONLY, f"broker {self.b.address} is a slave and refuses writes"
            )
        if self.b.closing:
            raise RpcFailure(ErrorReason.SERVICE_NOT_AVAILABLE, "the broker is shutting down")

    def _master_only(self, what: str) -> None:
        if self.b.is_slave:
            raise RpcFailure(
                ErrorReason.SLAVE_READ_ONLY, f"only a master grants {what}; {self.b.address} is a slave"
            )


def _peer_host(context: grpc.aio.ServicerContext) -> str:
    """``ipv4:127.0.0.1:5555`` → ``127.0.0.1:5555`` (born host when the producer gives none)."""
    peer = context.peer() or ""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest
    if kind == "ipv6":
        address, _, port = rest.rpartition(":")
        return f"[{address.strip('[]').replace('%25', '%')}]:{port}" if port.isdigit() else "127.0.0.1:0"
    return "127.0.0.1:0"
