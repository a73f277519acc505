"""Administration of a cluster (RocketMQ's mqadmin operations) over name servers and brokers.

Every operation finds its brokers through the name servers: cluster-wide changes go to every
master of the cluster, topic-scoped reads go to the brokers in the topic's route. A topic change
returns once the live name servers route it (brokers register changes in the background).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import grpc

from orbitmq.client.admin_auth import AuthAdmin
from orbitmq.client.channels import Channels
from orbitmq.client.routes import await_route
from orbitmq.common.credentials import Credentials
from orbitmq.common.errors import OrbitError
from orbitmq.common.names import validate_group_name, validate_topic_name
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.common.tls import ClientTls
from orbitmq.common.topics import SCHEDULE_TOPIC, Property
from orbitmq.store.message_id import read_msg_id
from orbitmq.store.record import StoredMessage, decode, encode_host
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2, nameserver_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

MASTER_ID = 0
QUERY_TIMEOUT_S = 10
"""Bound on one broker query, so an unreachable master hands over to its slave in time."""
DELAYED = "(delayed)"
"""The pseudo consumer group under which :meth:`Admin.broker_backlog` counts waiting delayed messages."""
_UNREACHABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
T = TypeVar("T")


class MessageNotFound(OrbitError):
    """No broker of the cluster holds a message with the id asked for."""


@dataclass(frozen=True, slots=True)
class TopicChangeReport:
    """What a create or update did on one broker: the outcome, the topic before and after."""

    address: str
    change: broker_pb2.TopicChange

    @property
    def outcome(self) -> str:
        """``created``, ``updated``, ``unchanged`` or ``exists_different``."""
        return broker_pb2.TopicChangeOutcome.Name(self.change.outcome).removeprefix("TOPIC_").lower()


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    cluster: str
    broker_name: str
    broker_id: int
    address: str


class Admin(AuthAdmin):
    def __init__(
        self,
        namesrv: str | list[str],
        *,
        credentials: Credentials | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        """``credentials``: what calls are signed with (None: ``ORBITMQ_ACCESS_KEY``/``_SECRET_KEY``);
        ``tls``: TLS toward the cluster (None: ``ORBITMQ_TLS_*``, plaintext when unset)."""
        self._channels = Channels(namesrv, tls=tls, credentials=credentials)

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channels.close()

    # -- discovery -----------------------------------------------------------------------------

    async def cluster_info(self) -> nameserver_pb2.ClusterInfo:
        return await self._channels.namesrv_call("GetClusterInfo", nameserver_pb2.GetClusterInfoRequest())  # type: ignore[return-value]

    async def brokers(self, cluster: str | None = None) -> list[BrokerInfo]:
        info = await self.cluster_info()
        found = []
        for name, data in sorted(info.broker_addr_table.items()):
            if cluster and data.cluster != cluster:
                continue
            for broker_id, address in sorted(data.broker_addrs.items()):
                found.append(BrokerInfo(data.cluster, name, broker_id, address))
        return found

    async def masters(self, cluster: str | None = None) -> list[BrokerInfo]:
        masters = [b for b in await self.brokers(cluster) if b.broker_id == MASTER_ID]
        if not masters:
            where = f"cluster {cluster!r}" if cluster else "any cluster"
            raise RpcFailure(ErrorReason.SERVICE_NOT_AVAILABLE, f"no master broker is registered in {where}")
        return masters

    async def route(self, topic: str) -> common_pb2.TopicRoute:
        validate_topic_name(topic)
        return await self._channels.namesrv_call("QueryRoute", nameserver_pb2.QueryRouteRequest(topic=topic))  # type: ignore[return-value]

    async def _route_masters(self, topic: str) -> list[tuple[str, str]]:
        route = await self.route(topic)
        return [
            (d.broker_name, d.broker_addrs[MASTER_ID])
            for d in route.broker_datas
            if MASTER_ID in d.broker_addrs
        ]

    async def topic_list(self) -> list[str]:
        reply = await self._channels.namesrv_call("GetTopicList", nameserver_pb2.GetTopicListRequest())
        return sorted(reply.topics)  # type: ignore[attr-defined]

    # -- topics --------------------------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        order: bool = False,
        cluster: str | None = None,
        broker_addr: str | None = None,
        update_existing: bool = False,
        force: bool = False,
    ) -> list[TopicChangeReport]:
        """Create a topic on one broker or every master of a cluster (None: the broker's default
        queue counts and read-write perm). Where it already exists it is left as it is and the
        report says what is there (outcome ``TOPIC_EXISTS_DIFFERENT`` when it differs from what
        was asked), unless ``update_existing``: then it is changed as :meth:`update_topic` would
        change it. ``force`` allows a change that hides unconsumed messages."""
        validate_topic_name(topic)
        config = common_pb2.TopicConfig(
            topic_name=topic,
            read_queue_nums=read_queue_nums or 0,
            write_queue_nums=write_queue_nums or 0,
            perm=perm or 0,
            order=order,
        )
        request = broker_pb2.CreateTopicRequest(topic=config, update_existing=update_existing, force=force)
        reports = [
            TopicChangeReport(address, await self._channels.broker(address).CreateTopic(request, timeout=10))
            for address in await self._topic_targets(cluster, broker_addr)
        ]
        await await_route(self._channels, topic, _routes_as(reports))
        return reports

    async def update_topic(
        self,
        topic: str,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        order: bool | None = None,
        cluster: str | None = None,
        broker_addr: str | None = None,
        force: bool = False,
    ) -> list[TopicChangeReport]:
        """Change only the settings given (None keeps a setting) on the masters that have the
        topic. A topic no target has is refused (``TOPIC_NOT_EXIST``), never created; a change
        that would hide unconsumed messages is refused (``WOULD_HIDE_MESSAGES``, naming the
        queues and counts) unless ``force``."""
        validate_topic_name(topic)
        request = broker_pb2.UpdateTopicRequest(topic=topic, force=force)
        for name, value in (
            ("read_queue_nums", read_queue_nums),
            ("write_queue_nums", write_queue_nums),
            ("perm", perm),
            ("order", order),
        ):
            if value is not None:
                setattr(request, name, value)
        reports, missing = [], []
        for address in await self._topic_targets(cluster, broker_addr):
            try:
                change = await self._channels.broker(address).UpdateTopic(request, timeout=10)
            except grpc.aio.AioRpcError as error:
                if not _is_reason(error, ErrorReason.TOPIC_NOT_EXIST):
                    raise
                missing.append(address)
                continue
            reports.append(TopicChangeReport(address, change))
        if not reports:
            raise RpcFailure(
                ErrorReason.TOPIC_NOT_EXIST,
                f"topic {topic!r} does not exist on {', '.join(missing)}; create it first (topic create)",
            )
        await await_route(self._channels, topic, _routes_as(reports))
        return reports

    async def _topic_targets(self, cluster: str | None, broker_addr: str | None) -> list[str]:
        if broker_addr:
            return [broker_addr]
        targets = [b.address for b in await self.masters(cluster)]
        if not targets:
            where = f"cluster {cluster!r}" if cluster else "the name servers"
            raise RpcFailure(
                ErrorReason.SERVICE_NOT_AVAILABLE, f"no master broker is registered with {where}"
            )
        return targets

    async def delete_topic(self, topic: str, cluster: str | None = None) -> list[str]:
        """Delete a topic from every master (of ``cluster``) and the name servers; returns the
        brokers that had it. A topic no broker and no name server knows is refused, so a typo
        is not reported as done."""
        validate_topic_name(topic)
        deleted, names = [], set()
        for broker in await self.masters(cluster):
            try:
                await self._channels.broker(broker.address).DeleteTopic(
                    broker_pb2.DeleteTopicRequest(topic=topic)
                )
                deleted.append(broker.address)
                names.add(broker.broker_name)
            except grpc.aio.AioRpcError as error:  # a broker without the topic is fine
                if not _is_reason(error, ErrorReason.TOPIC_NOT_EXIST):
                    raise
        if not deleted and not await self._has_route(topic):
            raise RpcFailure(
                ErrorReason.TOPIC_NOT_EXIST, f"topic {topic!r} does not exist (no broker and no route has it)"
            )
        # the brokers' registrations without it first, so none brings it back after the delete
        await await_route(
            self._channels, topic, lambda route: route is None or not names & _route_brokers(route)
        )
        await self._channels.namesrv_call(
            "DeleteTopic", nameserver_pb2.DeleteTopicInNameServerRequest(topic=topic)
        )
        return deleted

    async def _has_route(self, topic: str) -> bool:
        try:
            await self.route(topic)
        except grpc.aio.AioRpcError as error:
            if _is_reason(error, ErrorReason.TOPIC_NOT_EXIST):
                return False
            raise
        return True

    async def topic_status(self, topic: str) -> list[tuple[str, broker_pb2.QueueOffsets]]:
        rows = []
        for name, address in await self._route_masters(topic):
            stats = await self._channels.broker(address).GetTopicStats(
                broker_pb2.GetTopicStatsRequest(topic=topic)
            )
            rows.extend((name, q) for q in stats.queues)
        return rows

    # -- groups --------------------------------------------------------------------------------

    async def create_group(
        self,
        group: str,
        *,
        retry_max_times: int = 16,
        consume_broadcast_enable: bool = True,
        orderly: bool = False,
        cluster: str | None = None,
        consume_enable: bool = True,
        retry_queue_nums: int = 1,
        consume_from_first: bool = True,
    ) -> list[str]:
        """Create (or overwrite) a subscription group on every master (of ``cluster``);
        returns the brokers' addresses. ``orderly``: its members consume orderly (FIFO for
        RocketMQ 5 clients). ``consume_enable`` False: the brokers refuse its pulls and POP
        receives. ``retry_queue_nums``: queues of its ``%RETRY%`` topic when that is created.
        ``consume_from_first`` False: a RocketMQ 5 (POP) consumer of the new group begins each
        queue at the next message sent, not the first kept (``consumeFromMinEnable``)."""
        validate_group_name(group)
        config = broker_pb2.SubscriptionGroupConfig(
            group_name=group,
            consume_enable=consume_enable,
            consume_from_min_enable=consume_from_first,
            consume_broadcast_enable=consume_broadcast_enable,
            retry_queue_nums=retry_queue_nums,
            retry_max_times=retry_max_times,
            consume_message_orderly=orderly,
        )
        targets = [b.address for b in await self.masters(cluster)]
        for address in targets:
            await self._channels.broker(address).CreateSubscriptionGroup(
                broker_pb2.CreateSubscriptionGroupRequest(group=config)
            )
        return targets

    async def delete_group(self, group: str, cluster: str | None = None) -> list[str]:
        """Delete a subscription group and its offsets from every master; returns the brokers
        that had it. A group no master knows is refused, so a typo is not reported as done."""
        validate_group_name(group)
        deleted = []
        for broker in await self.masters(cluster):
            try:
                await self._channels.broker(broker.address).DeleteSubscriptionGroup(
                    broker_pb2.DeleteSubscriptionGroupRequest(group_name=group)
                )
                deleted.append(broker.address)
            except grpc.aio.AioRpcError as error:
                if not _is_reason(error, ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST):
                    raise
        if not deleted:
            raise _unknown_group(group)
        return deleted

    async def groups(self, cluster: str | None = None) -> dict[str, broker_pb2.SubscriptionGroupConfig]:
        found = {}
        for broker in await self.masters(cluster):
            reply = await self._channels.broker(broker.address).ListSubscriptionGroups(
                broker_pb2.ListSubscriptionGroupsRequest()
            )
            found.update({g.group_name: g for g in reply.groups})
        return found

    async def consume_progress(self, group: str, topic: str | None = None) -> list[broker_pb2.QueueProgress]:
        """Broker offset, committed offset and lag of every queue ``group`` consumes (of ``topic``).
        For a POP group (RocketMQ 5 clients through ``orbitmq proxy``) a queue comes with
        ``pop`` set, the POP consume offset as its consumer offset and the in-flight, expired
        and never-delivered figures of the broker's POP state. A group unknown to every broker
        asked is refused rather than shown with no lag."""
        validate_group_name(group)
        if topic:
            targets = [address for _, address in await self._route_masters(topic)]
        else:
            targets = [b.address for b in await self.masters()]
        request = broker_pb2.GetConsumeStatsRequest(consumer_group=group, topic=topic or "")
        replies = await self._each_knowing_group(group, targets, lambda b: b.GetConsumeStats(request))
        return [queue for stats in replies.values() for queue in stats.queues]

    async def reset_offset(
        self, group: str, topic: str, *, timestamp_ms: int | None = None, offset: int | None = None
    ) -> dict[str, dict[int, int]]:
        """Move ``group``'s offsets in ``topic`` to a time or an offset on every broker of the
        topic; online consumers are told at once. The group must exist (a typo is refused)."""
        validate_group_name(group)
        if (timestamp_ms is None) == (offset is None):
            raise ValueError("reset needs exactly one of a timestamp or an offset")
        if timestamp_ms is not None and timestamp_ms < 0:
            raise ValueError(f"timestamp {timestamp_ms} must be milliseconds since the epoch (0 or more)")
        if offset is not None and offset < 0:
            raise ValueError(f"offset {offset} must not be negative")
        request = broker_pb2.ResetOffsetRequest(consumer_group=group, topic=topic)
        if timestamp_ms is not None:
            request.timestamp_ms = timestamp_ms
        else:
            request.offset = offset  # type: ignore[assignment]
        masters = await self._route_masters(topic)
        replies = await self._each_knowing_group(
            group, [address for _, address in masters], lambda b: b.ResetOffset(request)
        )
        names = {address: name for name, address in masters}
        return {names[address]: dict(reply.offsets) for address, reply in replies.items()}

    async def _each_knowing_group(
        self,
        group: str,
        addresses: list[str],
        call: Callable[[broker_pb2_grpc.BrokerStub], Awaitable[T]],
    ) -> dict[str, T]:
        """``call`` on each broker, skipping those that do not know ``group``; refused when none does."""
        replies: dict[str, T] = {}
        for address in addresses:
            try:
                replies[address] = await call(self._channels.broker(address))
            except grpc.aio.AioRpcError as error:
                if not _is_reason(error, ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST):
                    raise
        if not replies:
            raise _unknown_group(group)
        return replies

    # -- draining a broker group ---------------------------------------------------------------

    async def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        """Stop producers sending to broker group ``broker_name`` (RocketMQ's wipeWritePerm):
        every name server routes its topics without WRITE, consumers keep reading them. Returns
        per name-server address how many topics it made read-only (0 where already wiped)."""
        request = nameserver_pb2.WipeWritePermRequest(broker_name=broker_name)
        replies = await self._channels.namesrv_call_each("WipeWritePerm", request)
        return {address: reply.wipe_topic_count for address, reply in replies.items()}  # type: ignore[attr-defined]

    async def add_write_perm(self, broker_name: str) -> dict[str, int]:
        """Undo :meth:`wipe_write_perm` on every name server; topics writable again by address."""
        request = nameserver_pb2.AddWritePermRequest(broker_name=broker_name)
        replies = await self._channels.namesrv_call_each("AddWritePerm", request)
        return {address: reply.add_topic_count for address, reply in replies.items()}  # type: ignore[attr-defined]

    async def broker_backlog(self, broker_name: str) -> dict[tuple[str, str], int]:
        """Messages on broker group ``broker_name`` not yet consumed, by (consumer group, topic),
        only where some are left: empty means every consumer group has drained it.

        Asked of the group's master: each subscription group it knows, over every topic that
        group has consumed there (retry topics included). A topic a group never consumed on
        this broker has no offset to measure and is not counted (as in RocketMQ's consumeStats).

        Delayed messages still waiting there count too, under (:data:`DELAYED`,
        ``SCHEDULE_TOPIC_XXXX``): they reach their topic on this broker only when due, so a
        group removed before then would take them with it.
        """
        broker = await self._master_stub(broker_name, "its backlog cannot be read")
        listed = await broker.ListSubscriptionGroups(
            broker_pb2.ListSubscriptionGroupsRequest(), timeout=QUERY_TIMEOUT_S
        )
        backlog: dict[tuple[str, str], int] = {}
        for group in sorted({g.group_name for g in listed.groups}):
            stats = await _consume_stats(broker, group)
            if stats is None:
                continue
            for queue in stats.queues:
                if queue.lag > 0:
                    backlog[group, queue.topic] = backlog.get((group, queue.topic), 0) + queue.lag
        runtime = await broker.GetRuntimeInfo(broker_pb2.GetRuntimeInfoRequest(), timeout=QUERY_TIMEOUT_S)
        if runtime.delayed_messages_waiting > 0:
            backlog[DELAYED, SCHEDULE_TOPIC] = runtime.delayed_messages_waiting
        return backlog

    async def online_groups(self, broker_name: str, groups: Iterable[str]) -> set[str]:
        """Of ``groups``, those with a consumer online on broker group ``broker_name``'s master:
        a client heartbeating the group there (push and pull consumers, the sidecar), or POP
        messages of the group in flight there (RocketMQ 5 clients through the proxy, which do
        not heartbeat the brokers; one with a backlog keeps receiving, so it has some). The
        pseudo group :data:`DELAYED` has no consumers and is never online."""
        broker = await self._master_stub(broker_name, "its consumers cannot be listed")
        online = set()
        for group in sorted(set(groups) - {DELAYED}):
            listed = await broker.GetConsumerList(
                broker_pb2.GetConsumerListRequest(consumer_group=group), timeout=QUERY_TIMEOUT_S
            )
            if listed.client_ids:
                online.add(group)
                continue
            stats = await _consume_stats(broker, group)
            if stats is None:
                continue
            if any(queue.pop_in_flight > 0 for queue in stats.queues):
                online.add(group)
        return online

    async def _master_stub(self, broker_name: str, consequence: str) -> broker_pb2_grpc.BrokerStub:
        info = await self.cluster_info()
        data = info.broker_addr_table.get(broker_name)
        if data is None or MASTER_ID not in data.broker_addrs:
            raise RpcFailure(
                ErrorReason.SERVICE_NOT_AVAILABLE,
                f"broker group {broker_name!r} has no registered master: {consequence}",
                broker_name=broker_name,
            )
        return self._channels.broker(data.broker_addrs[MASTER_ID])

    # -- brokers and messages ------------------------------------------------------------------

    async def broker_status(self, address: str) -> dict[str, str | int]:
        """A broker's runtime figures by name, typed, in the order the proto declares them."""
        reply = await self._channels.broker(address).GetRuntimeInfo(
            broker_pb2.GetRuntimeInfoRequest(), timeout=QUERY_TIMEOUT_S
        )
        return {field.name: getattr(reply, field.name) for field in reply.DESCRIPTOR.fields}

    async def messages_by_key(self, topic: str, key: str, max_num: int = 32) -> list[StoredMessage]:
        """Messages of ``topic`` whose key or unique key is ``key``, oldest first, from every group."""
        found: list[StoredMessage] = []
        for addresses in await self._broker_groups(topic):
            found.extend(await self._ask_group(addresses, lambda b: _query_key(b, topic, key, max_num)))
        return sorted(found, key=lambda m: m.store_timestamp_ms)

    async def message_by_id(self, msg_id: str, topic: str | None = None) -> StoredMessage:
        """The message with this offset id or unique key (RocketMQ's ``queryMsgById``).

        An id that decodes to the address of a registered broker is read there by commit-log
        offset. Otherwise (or when that broker does not hold it) a 32-character id, or a RocketMQ
        5 client's 34-character one (which names no broker), is looked up as a unique key in the
        index of every broker group: in ``topic`` when given, else in every topic each broker
        has (one index query per topic, so give the topic on big clusters).
        Copies of one message (retry, dead-letter, schedule topics) share the unique key; the
        one in a user topic, stored first, is returned.
        """
        reading = read_msg_id(msg_id)
        if reading.offset is not None:
            found = await self._message_at_offset(msg_id, reading.offset[0])
            if found is not None:
                return found
        if reading.offset is not None and reading.unique_key is None:
            raise MessageNotFound(
                f"offset id {msg_id!r} names broker {reading.offset[0]}, which is not registered "
                "with the name servers or does not hold it"
            )
        if topic is not None:
            validate_topic_name(topic)
        matches = await self._messages_by_unique_key(msg_id, topic)
        if not matches:
            where = f"topic {topic!r}" if topic else "any topic"
            raise MessageNotFound(
                f"no message has id {msg_id!r}: it is not the offset id of a registered broker's "
                f"message, and no broker indexes it as a unique key in {where}"
            )
        return min(matches, key=lambda m: (_is_internal(m.topic), m.store_timestamp_ms))

    async def _message_at_offset(self, msg_id: str, host: str) -> StoredMessage | None:
        """The message an offset id names, or None when its host is no broker of the cluster."""
        address = next((b.address for b in await self.brokers() if _same_host(b.address, host)), None)
        if address is None:
            return None
        try:
            reply = await self._channels.broker(address).ViewMessage(
                broker_pb2.ViewMessageRequest(msg_id=msg_id), timeout=QUERY_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as error:
            if _is_reason(error, ErrorReason.INVALID_OFFSET) or error.code() in _UNREACHABLE:
                return None
            raise
        return decode(reply.records[0]) if reply.records else None

    async def _messages_by_unique_key(self, key: str, topic: str | None) -> list[StoredMessage]:
        found: list[StoredMessage] = []
        for addresses in await self._broker_groups(topic):
            if topic is not None:
                messages = await self._ask_group(addresses, lambda b: _query_key(b, topic, key, 32))
            else:
                messages = await self._ask_group(addresses, lambda b: _query_key_everywhere(b, key))
            found.extend(m for m in messages if m.properties.get(Property.UNIQ_KEY) == key)
        return found

    async def _broker_groups(self, topic: str | None) -> list[dict[int, str]]:
        """Addresses by broker id of each broker group serving ``topic`` (every group without)."""
        if topic is not None:
            route = await self.route(topic)
            return [dict(d.broker_addrs) for d in route.broker_datas]
        info = await self.cluster_info()
        return [dict(d.broker_addrs) for _, d in sorted(info.broker_addr_table.items())]

    async def _ask_group(
        self, addresses: Mapping[int, str], ask: Callable[[broker_pb2_grpc.BrokerStub], Awaitable[T]]
    ) -> T:
        """Ask the master; when it is unreachable, its slaves in id order (they serve reads too)."""
        last: grpc.aio.AioRpcError | None = None
        for _, address in sorted(addresses.items()):
            try:
                return await ask(self._channels.broker(address))
            except grpc.aio.AioRpcError as error:
                if error.code() not in _UNREACHABLE:
                    raise
                last = error
        if last is not None:
            raise last
        raise RpcFailure(ErrorReason.SERVICE_NOT_AVAILABLE, "a broker group has no registered broker")

    async def dead_letters(self, group: str, max_num: int = 100) -> list[StoredMessage]:
        """Messages in the group's dead-letter queue, oldest first."""
        validate_group_name(group)
        topic = f"%DLQ%{group}"
        messages: list[StoredMessage] = []
        try:
            masters = await self._route_masters(topic)
        except Exception as error:
            if _is_reason(error, ErrorReason.TOPIC_NOT_EXIST):
                return []
            raise
        for _, address in masters:
            stub = self._channels.broker(address)
            offset = (await stub.GetMinOffset(broker_pb2.QueueRequest(topic=topic, queue_id=0))).offset
            while len(messages) < max_num:
                reply = await stub.PullMessage(
                    broker_pb2.PullMessageRequest(
                        consumer_group=f"{group}-dlq-viewer",
                        topic=topic,
                        queue_id=0,
                        queue_offset=offset,
                        max_msg_nums=min(32, max_num - len(messages)),
                        commit_offset=-1,
                    )
                )
                if not reply.records:
                    break
                messages.extend(decode(r) for r in reply.records)
                offset = reply.next_begin_offset
        return messages


async def _consume_stats(broker: broker_pb2_grpc.BrokerStub, group: str) -> broker_pb2.ConsumeStats | None:
    """A group's consume stats on one broker, or None where the broker does not know the group
    (deleted, or never recorded there): no backlog and nobody in flight, not an error."""
    request = broker_pb2.GetConsumeStatsRequest(consumer_group=group)
    try:
        return await broker.GetConsumeStats(request, timeout=QUERY_TIMEOUT_S)
    except grpc.aio.AioRpcError as error:
        if not _is_reason(error, ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST):
            raise
        return None


async def _query_key(
    broker: broker_pb2_grpc.BrokerStub, topic: str, key: str, max_num: int
) -> list[StoredMessage]:
    reply = await broker.QueryMessageByKey(
        broker_pb2.QueryMessageByKeyRequest(topic=topic, key=key, max_num=max_num),
        timeout=QUERY_TIMEOUT_S,
    )
    return [decode(r) for r in reply.records]


async def _query_key_everywhere(broker: broker_pb2_grpc.BrokerStub, key: str) -> list[StoredMessage]:
    """The index is keyed by topic and key, so a key without a topic is asked of every topic."""
    topics = (await broker.ListTopics(broker_pb2.ListTopicsRequest(), timeout=QUERY_TIMEOUT_S)).topics

    async def one(topic: str) -> list[StoredMessage]:
        try:
            return await _query_key(broker, topic, key, 32)
        except grpc.aio.AioRpcError as error:  # deleted since it was listed
            if _is_reason(error, ErrorReason.TOPIC_NOT_EXIST):
                return []
            raise

    found = await asyncio.gather(*(one(t.topic_name) for t in topics))
    return [m for messages in found for m in messages]


def _routes_as(reports: list[TopicChangeReport]) -> Callable[[common_pb2.TopicRoute | None], bool]:
    """Whether a route shows each broker's queue counts as the reports left them."""
    wanted = {
        (r.change.broker_name, r.change.after.read_queue_nums, r.change.after.write_queue_nums)
        for r in reports
    }

    def shows(route: common_pb2.TopicRoute | None) -> bool:
        have = (
            {(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas}
            if route
            else set()
        )
        return wanted <= have

    return shows


def _route_brokers(route: common_pb2.TopicRoute) -> set[str]:
    return {q.broker_name for q in route.queue_datas}


def _is_internal(topic: str) -> bool:
    """Topics that hold a message's waiting copies (delayed, transaction half), not the message."""
    return topic == SCHEDULE_TOPIC or topic.startswith("RMQ_SYS_")


def _same_host(address: str, host: str) -> bool:
    """Registered addresses may be spelled differently (``[::ffff:…]``) or be host names."""
    try:
        return encode_host(address) == encode_host(host)
    except ValueError:
        return address == host


def _unknown_group(group: str) -> RpcFailure:
    return RpcFailure(
        ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST,
        f"consumer group {group!r} does not exist on any broker; 'orbitmq admin group list' shows the groups",
    )


def _is_reason(error: Exception, reason: int) -> bool:
    if isinstance(error, RpcFailure):
        return error.reason == reason
    failure = failure_of(error) if isinstance(error, grpc.aio.AioRpcError) else None
    return failure is not None and failure.reason == reason
