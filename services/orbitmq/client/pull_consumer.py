"""The pull consumer: the application chooses queues and offsets itself (RocketMQ's
DefaultMQPullConsumer).

Nothing runs in the background: no rebalance, no offset timer, no retries. The application
lists a topic's queues, pulls from an offset of its choosing (optionally long-polling), and
stores offsets where it likes — on the broker through :meth:`PullConsumer.commit_offset`, which
is what ``orbitmq admin group progress`` and a later push consumer of the same group read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

import grpc

from orbitmq.client.channels import Channels
from orbitmq.client.queue import MessageQueue
from orbitmq.client.routes import ReadRoute, fetch_read_route
from orbitmq.common.credentials import Credentials
from orbitmq.common.names import validate_group_name, validate_topic_name
from orbitmq.common.rpc import RpcFailure
from orbitmq.common.tls import ClientTls
from orbitmq.store.message_filter import TagFilter
from orbitmq.store.record import StoredMessage, decode_all
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

MAX_PULL_NUMS = 1024


class PullStatus(Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(frozen=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    """Where the next pull of this queue should start."""
    min_offset: int
    max_offset: int
    messages: list[StoredMessage] = field(default_factory=list)
    records: Sequence[bytes] = ()
    """With ``pull(raw=True)``: the whole records, not decoded (``messages`` is then empty)."""


class PullConsumer:
    """Pull messages at explicit offsets; see the module docstring.

    ``async with PullConsumer("group", namesrv) as consumer:`` then :meth:`queues`,
    :meth:`pull`, :meth:`commit_offset` / :meth:`committed_offset`, and the offset look-ups.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | None = None,
        *,
        credentials: Credentials | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        """``credentials``: what calls are signed with (None: ``ORBITMQ_ACCESS_KEY``/``_SECRET_KEY``);
        ``tls``: TLS toward the cluster (None: ``ORBITMQ_TLS_*``, plaintext when unset)."""
        self.group = validate_group_name(group)
        self._channels = Channels(namesrv, tls=tls, credentials=credentials)
        self._routes: dict[str, ReadRoute] = {}

    async def __aenter__(self) -> PullConsumer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Nothing to start (kept for symmetry with the other clients)."""

    async def close(self) -> None:
        await self._channels.close()

    async def queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]:
        """The topic's readable queues (RocketMQ's fetchSubscribeMessageQueues)."""
        return (await self._route(topic, refresh)).queues

    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        *,
        expression: str = "*",
        sql: bool = False,
        max_nums: int = 32,
        wait_ms: int = 0,
        raw: bool = False,
    ) -> PullResult:
        """Up to ``max_nums`` messages of ``mq`` from ``offset`` that match the tag expression
        (or SQL92 condition with ``sql=True``). With ``wait_ms`` > 0 the broker holds the call
        up to that long when nothing is there yet (long polling).

        ``raw=True`` hands back the records undecoded (:attr:`PullResult.records`), for a
        reader that decodes them in bulk (the Spark source turns them into Arrow columns in C).
        The broker matches tags by hash code only and the text check needs decoded tags, so a
        raw pull takes ``*`` or an SQL92 condition, not a tag expression."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        if not 1 <= max_nums <= MAX_PULL_NUMS:
            raise ValueError(f"max_nums must be between 1 and {MAX_PULL_NUMS}, got {max_nums}")
        if wait_ms < 0:
            raise ValueError(f"wait_ms must be >= 0, got {wait_ms}")
        tag_filter = None
        if sql:
            from orbitmq.filter.sql92 import validate_sql92

            validate_sql92(expression)
        else:
            tag_filter = TagFilter(expression)
            if raw and not tag_filter.matches_all:
                raise ValueError(
                    f"a raw pull takes '*' or an SQL92 condition, not the tag expression {expression!r}"
                )
        subscription = common_pb2.Subscription(
            topic=mq.topic, expression=expression, expression_type=common_pb2.SQL92 if sql else common_pb2.TAG
        )
        address = await self._master(mq)
        request = broker_pb2.PullMessageRequest(
            consumer_group=self.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            suspend_timeout_ms=wait_ms,
            commit_offset=-1,
            subscription=subscription,
        )
        try:
            reply = await self._channels.broker(address).PullMessage(request, timeout=wait_ms / 1000 + 10)
        except grpc.aio.AioRpcError as error:  # a refused handshake: TlsError naming the cause
            if not await self._channels.raise_tls_failure(address, error):
                raise
            # the channel was opened again with TLS files changed since (a rotated CA bundle)
            reply = await self._channels.broker(address).PullMessage(request, timeout=wait_ms / 1000 + 10)
        status = PullStatus[broker_pb2.PullStatus.Name(reply.status)]
        if raw:
            records = list(reply.records)
            if status is PullStatus.FOUND and not records:
                status = PullStatus.NO_MATCHED_MSG
            return PullResult(
                status, reply.next_begin_offset, reply.min_offset, reply.max_offset, records=records
            )
        messages = decode_all(reply.records)
        if tag_filter is not None:  # the broker matched tag hash codes; check the text
            messages = [m for m in messages if tag_filter.matches_tag(m.tags)]
        if status is PullStatus.FOUND and not messages:
            status = PullStatus.NO_MATCHED_MSG
        return PullResult(status, reply.next_begin_offset, reply.min_offset, reply.max_offset, messages)

    async def commit_offset(self, mq: MessageQueue, offset: int) -> None:
        """Store ``offset`` (the next one to consume) as the group's offset of ``mq`` on the broker."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        stub = await self._broker(mq)
        await stub.UpdateConsumerOffset(
            broker_pb2.UpdateConsumerOffsetRequest(
                consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, offset=offset
            ),
            timeout=5,
        )

    async def committed_offset(self, mq: MessageQueue) -> int:
        """The group's stored offset of ``mq``; -1 when it never committed one."""
        stub = await self._broker(mq)
        reply = await stub.QueryConsumerOffset(
            broker_pb2.QueryConsumerOffsetRequest(
                consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id
            ),
            timeout=5,
        )
        return int(reply.offset)

    async def min_offset(self, mq: MessageQueue) -> int:
        stub = await self._broker(mq)
        return int((await stub.GetMinOffset(_queue(mq), timeout=5)).offset)

    async def max_offset(self, mq: MessageQueue) -> int:
        """One past the last message of ``mq``."""
        stub = await self._broker(mq)
        return int((await stub.GetMaxOffset(_queue(mq), timeout=5)).offset)

    async def offset_at(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset of ``mq`` stored at or after ``timestamp_ms``."""
        stub = await self._broker(mq)
        reply = await stub.SearchOffset(
            broker_pb2.SearchOffsetRequest(topic=mq.topic, queue_id=mq.queue_id, timestamp_ms=timestamp_ms),
            timeout=5,
        )
        return int(reply.offset)

    async def _route(self, topic: str, refresh: bool) -> ReadRoute:
        validate_topic_name(topic)
        if refresh or topic not in self._routes:
            route = await fetch_read_route(self._channels, topic)
            if route is None or not route.queues:
                raise RpcFailure(ErrorReason.TOPIC_NOT_EXIST, f"topic {topic!r} has no readable queue")
            self._routes[topic] = route
        return self._routes[topic]

    async def _broker(self, mq: MessageQueue) -> broker_pb2_grpc.BrokerStub:
        return self._channels.broker(await self._master(mq))

    async def _master(self, mq: MessageQueue) -> str:
        """The address of ``mq``'s master, from the route (fetched again if it lacks one)."""
        route = await self._route(mq.topic, False)
        if mq.broker_name not in route.masters:
            route = await self._route(mq.topic, True)
        if mq.broker_name not in route.masters:
            raise RpcFailure(
                ErrorReason.SERVICE_NOT_AVAILABLE, f"broker {mq.broker_name!r} of {mq} has no live master"
            )
        return route.masters[mq.broker_name]


def _queue(mq: MessageQueue) -> broker_pb2.QueueRequest:
    return broker_pb2.QueueRequest(topic=mq.topic, queue_id=mq.queue_id)
