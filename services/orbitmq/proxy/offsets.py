"""Offset-based v2 consumption: ``QueryOffset``, ``GetOffset``, ``UpdateOffset``, ``PullMessage``.

These RPCs are for consumers that keep their own place in a queue (RocketMQ 5's pull / lite pull
consumers), unlike POP: the client names a queue (broker name + queue id, from ``QueryRoute``)
and an offset, and the proxy maps each call onto the brokers' own pull and offset RPCs, the
ones orbitmq's pull consumer uses: ``PullMessage`` (long polling included), ``QueryConsumerOffset``
/ ``UpdateConsumerOffset`` (the group's committed offsets, the same table orbitmq's push and
pull consumers and ``orbitmq admin group progress`` read), ``GetMinOffset`` / ``GetMaxOffset`` /
``SearchOffset`` (offset by store time). Calls go to the broker group's master, as the
receive calls do (:class:`orbitmq.proxy.consumers.Masters`).

A pull answers as RocketMQ's proxy does, in one stream: a status frame, the messages (converted
as ``ReceiveMessage`` converts them, without receipt handles: nothing is invisible here), and the
offset to pull from next. ``MESSAGE_NOT_FOUND`` means nothing new (after the long poll) and
``ILLEGAL_OFFSET`` an offset outside the queue; both still carry ``next_offset``, where the
client should go on.
"""

from __future__ import annotations

from orbitmq.proxy import codes, convert
from orbitmq.proxy.consumers import MAX_BATCH, POLL_MARGIN_MS, RPC_SLACK_S, Masters, group_of, stored_message
from orbitmq.proxy.convert import Refused
from orbitmq.rocketmq_v2 import definition_pb2 as v2
from orbitmq.rocketmq_v2 import service_pb2 as pb
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, common_pb2

_PULL_CODES = {
    broker_pb2.FOUND: v2.OK,
    broker_pb2.NO_NEW_MSG: v2.MESSAGE_NOT_FOUND,
    broker_pb2.NO_MATCHED_MSG: v2.MESSAGE_NOT_FOUND,
    broker_pb2.OFFSET_ILLEGAL: v2.ILLEGAL_OFFSET,
}


def _place(queue: v2.MessageQueue) -> tuple[str, str, int]:
    """(broker name, orbitmq topic, queue id) of a request's message queue."""
    topic = convert.topic_of(queue.topic)
    if not queue.broker.name:
        raise Refused(v2.BAD_REQUEST, "the message_queue names no broker (take it from QueryRoute)")
    if queue.id < 0:
        raise Refused(v2.BAD_REQUEST, f"message_queue id {queue.id} must be a queue id (0 or more)")
    return queue.broker.name, topic, queue.id


class Offsets:
    def __init__(self, masters: Masters) -> None:
        self._masters = masters

    async def query(self, request: pb.QueryOffsetRequest) -> pb.QueryOffsetResponse:
        """The queue's first offset (``BEGINNING``), its end (``END``: where the next message
        will be), or the first offset stored at or after ``timestamp`` (``TIMESTAMP``)."""
        broker, topic, queue_id = _place(request.message_queue)
        queue = broker_pb2.QueueRequest(topic=topic, queue_id=queue_id)
        policy = request.query_offset_policy
        if policy == v2.BEGINNING:
            reply = await self._masters.call(broker, "GetMinOffset", queue, RPC_SLACK_S)
        elif policy == v2.END:
            reply = await self._masters.call(broker, "GetMaxOffset", queue, RPC_SLACK_S)
        elif policy == v2.TIMESTAMP:
            if not request.HasField("timestamp"):
                raise Refused(v2.BAD_REQUEST, "query_offset_policy TIMESTAMP needs a timestamp")
            at_ms = convert.time_ms(request.timestamp, "timestamp", v2.BAD_REQUEST)
            if at_ms < 0:
                raise Refused(v2.BAD_REQUEST, f"timestamp {at_ms} ms must not be before the epoch")
            search = broker_pb2.SearchOffsetRequest(topic=topic, queue_id=queue_id, timestamp_ms=at_ms)
            reply = await self._masters.call(broker, "SearchOffset", search, RPC_SLACK_S)
        else:
            raise Refused(
                v2.BAD_REQUEST, f"query_offset_policy {policy} is not BEGINNING (0), END (1) or TIMESTAMP (2)"
            )
        return pb.QueryOffsetResponse(status=codes.OK, offset=reply.offset)

    async def get(self, request: pb.GetOffsetRequest) -> pb.GetOffsetResponse:
        """The group's committed offset of the queue; ``OFFSET_NOT_FOUND`` when it committed
        none there, ``CONSUMER_GROUP_NOT_FOUND`` when the broker does not know the group at all."""
        group = group_of(request.group)
        broker, topic, queue_id = _place(request.message_queue)
        reply = await self._masters.call(
            broker,
            "QueryConsumerOffset",
            broker_pb2.QueryConsumerOffsetRequest(consumer_group=group, topic=topic, queue_id=queue_id),
            RPC_SLACK_S,
        )
        if reply.offset >= 0:
            return pb.GetOffsetResponse(status=codes.OK, offset=reply.offset)
        groups = await self._masters.call(
            broker, "ListSubscriptionGroups", broker_pb2.ListSubscriptionGroupsRequest(), RPC_SLACK_S
        )
        if not any(g.group_name == group for g in groups.groups):
            raise Refused(
                v2.CONSUMER_GROUP_NOT_FOUND,
                f"consumer group {group!r} does not exist on broker {broker} (no subscription group)",
            )
        raise Refused(
            v2.OFFSET_NOT_FOUND,
            f"group {group!r} has committed no offset for queue {queue_id} of topic {topic!r} on {broker}",
        )

    async def update(self, request: pb.UpdateOffsetRequest) -> pb.UpdateOffsetResponse:
        """Commit the group's offset of the queue: at least 0 and at most the queue's end (an
        offset past it would skip messages not yet written)."""
        group = group_of(request.group)
        broker, topic, queue_id = _place(request.message_queue)
        if request.offset < 0:
            raise Refused(v2.ILLEGAL_OFFSET, f"offset {request.offset} must not be negative")
        queue = broker_pb2.QueueRequest(topic=topic, queue_id=queue_id)
        end = (await self._masters.call(broker, "GetMaxOffset", queue, RPC_SLACK_S)).offset
        if request.offset > end:
            raise Refused(
                v2.ILLEGAL_OFFSET,
                f"offset {request.offset} is past the end ({end}) of queue {queue_id} of topic {topic!r}",
            )
        await self._masters.call(
            broker,
            "UpdateConsumerOffset",
            broker_pb2.UpdateConsumerOffsetRequest(
                consumer_group=group, topic=topic, queue_id=queue_id, offset=request.offset
            ),
            RPC_SLACK_S,
        )
        return pb.UpdateOffsetResponse(status=codes.OK)

    async def pull(
        self, request: pb.PullMessageRequest, time_remaining_s: float | None
    ) -> list[pb.PullMessageResponse]:
        """The frames of one pull: status, messages, next offset (see the module docstring)."""
        group = group_of(request.group)
        broker, topic, queue_id = _place(request.message_queue)
        if request.offset < 0:
            raise Refused(v2.ILLEGAL_OFFSET, f"offset {request.offset} must not be negative")
        if not 0 < request.batch_size <= MAX_BATCH:
            raise Refused(
                v2.BAD_REQUEST, f"batch_size {request.batch_size} must be between 1 and {MAX_BATCH}"
            )
        poll_ms = 0
        if request.HasField("long_polling_timeout"):
            poll_ms = convert.time_ms(
                request.long_polling_timeout, "long_polling_timeout", v2.ILLEGAL_POLLING_TIME
            )
            if poll_ms < 0:
                raise Refused(v2.ILLEGAL_POLLING_TIME, f"long_polling_timeout of {poll_ms} ms is negative")
        if time_remaining_s is not None:
            poll_ms = max(0, min(poll_ms, int(time_remaining_s * 1000) - POLL_MARGIN_MS))
        expression = request.filter_expression
        reply = await self._masters.call(
            broker,
            "PullMessage",
            broker_pb2.PullMessageRequest(
                consumer_group=group,
                topic=topic,
                queue_id=queue_id,
                queue_offset=request.offset,
                max_msg_nums=request.batch_size,
                suspend_timeout_ms=poll_ms,
                commit_offset=-1,  # a v2 pull consumer commits with UpdateOffset
                subscription=common_pb2.Subscription(
                    topic=topic,
                    expression=expression.expression or "*",
                    expression_type=common_pb2.SQL92 if expression.type == v2.SQL else common_pb2.TAG,
                ),
            ),
            poll_ms / 1000 + RPC_SLACK_S,
        )
        code = _PULL_CODES.get(reply.status, v2.INTERNAL_SERVER_ERROR)
        if code == v2.OK:
            text = "OK"
        elif code == v2.ILLEGAL_OFFSET:
            text = (
                f"offset {request.offset} is outside queue {queue_id} of topic {topic!r} "
                f"[{reply.min_offset}, {reply.max_offset}]; pull from {reply.next_begin_offset}"
            )
        else:
            text = "no new message"
        frames = [pb.PullMessageResponse(status=codes.status(code, text))]
        namespace = request.group.resource_namespace
        for record in reply.records:
            stored = decode(record)
            frames.append(
                pb.PullMessageResponse(
                    message=stored_message(stored, stored.queue_id, stored.queue_offset, namespace)
                )
            )
        frames.append(pb.PullMessageResponse(next_offset=reply.next_begin_offset))
        return frames
