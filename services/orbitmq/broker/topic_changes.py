"""Creating and changing a topic without hiding messages: the rules, as pure code.

RocketMQ's ``updateTopic`` replaces a topic's whole config, so re-running a "create" with the
default 4 queues on an 8-queue topic silently cuts it to 4, and messages in queues 4..7 are never
read again (a consumer rebalances over the read queues only). Here a create leaves an existing
topic alone unless told otherwise, an update changes only the fields it names, and a change that
would leave messages where no consumer reads them is refused with the queues and counts named:

* read queues below write queues: messages sent to the queues in between are never read;
* read queues cut below a queue that still holds messages some group has not consumed (or, when
  no group has consumed the topic, any messages at all).

The safe way down is RocketMQ's: cut the write queues first, let consumers drain the queues
above the new count, then cut the read queues. ``force`` allows the change anyway. The broker
calls :func:`plan_create` / :func:`plan_update` with the backlog it measures; nothing here does
I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orbitmq.common.rpc import RpcFailure
from orbitmq.store.config_store import Permission, TopicConfig
from orbitmq.v1.broker_pb2 import ErrorReason, TopicChangeOutcome


@dataclass(frozen=True)
class QueueBacklog:
    """Messages of one queue that some consumer group has not consumed yet."""

    queue_id: int
    unconsumed: int
    groups: tuple[str, ...]
    """The groups behind; empty when no group has consumed the topic at all."""

    def describe(self) -> str:
        behind = f"not consumed by {', '.join(self.groups)}" if self.groups else "no group has consumed it"
        return f"queue {self.queue_id}: {self.unconsumed} message(s), {behind}"


Backlog = Callable[[Sequence[int]], list[QueueBacklog]]
"""The unconsumed messages of the given queue ids (only the queues that have some)."""


@dataclass(frozen=True)
class TopicChangePlan:
    outcome: int
    before: TopicConfig | None
    after: TopicConfig

    @property
    def writes(self) -> bool:
        return self.outcome in (TopicChangeOutcome.TOPIC_CREATED, TopicChangeOutcome.TOPIC_UPDATED)


def plan_create(
    requested: TopicConfig,
    existing: TopicConfig | None,
    backlog: Backlog,
    *,
    update_existing: bool,
    force: bool,
) -> TopicChangePlan:
    """A create: new topics are made as asked; an existing one is kept unless ``update_existing``."""
    if existing is None:
        _check_readable(requested, force)
        return TopicChangePlan(TopicChangeOutcome.TOPIC_CREATED, None, requested)
    if _same(existing, requested):
        return TopicChangePlan(TopicChangeOutcome.TOPIC_UNCHANGED, existing, existing)
    if not update_existing:
        return TopicChangePlan(TopicChangeOutcome.TOPIC_EXISTS_DIFFERENT, existing, existing)
    return _checked_update(existing, requested, backlog, force)


def plan_update(
    existing: TopicConfig | None,
    backlog: Backlog,
    *,
    topic: str,
    read_queue_nums: int | None = None,
    write_queue_nums: int | None = None,
    perm: int | None = None,
    order: bool | None = None,
    force: bool = False,
) -> TopicChangePlan:
    """An update: only the fields given change; a missing topic is refused, never created."""
    if existing is None:
        raise RpcFailure(
            ErrorReason.TOPIC_NOT_EXIST,
            f"topic {topic!r} does not exist on this broker; create it first (topic create)",
            topic=topic,
        )
    changes: dict[str, object] = {
        name: value
        for name, value in (
            ("read_queue_nums", read_queue_nums),
            ("write_queue_nums", write_queue_nums),
            ("perm", None if perm is None else Permission(perm)),
            ("order", order),
        )
        if value is not None
    }
    try:
        after = TopicConfig.model_validate({**existing.model_dump(), **changes})
    except ValueError as error:
        raise RpcFailure(ErrorReason.INVALID_ARGUMENT, " ".join(str(error).split()), topic=topic) from None
    if _same(existing, after):
        return TopicChangePlan(TopicChangeOutcome.TOPIC_UNCHANGED, existing, existing)
    return _checked_update(existing, after, backlog, force)


def _checked_update(
    existing: TopicConfig, after: TopicConfig, backlog: Backlog, force: bool
) -> TopicChangePlan:
    _check_readable(after, force)
    if after.read_queue_nums < existing.read_queue_nums and not force:
        hidden = backlog(range(after.read_queue_nums, existing.read_queue_nums))
        if hidden:
            total = sum(q.unconsumed for q in hidden)
            raise RpcFailure(
                ErrorReason.WOULD_HIDE_MESSAGES,
                f"cutting the read queues of topic {after.topic_name!r} from {existing.read_queue_nums} "
                f"to {after.read_queue_nums} would hide {total} unconsumed message(s) ("
                + "; ".join(q.describe() for q in hidden)
                + "): cut the write queues first and let consumers drain those queues, or force it (--force)",
                topic=after.topic_name,
            )
    return TopicChangePlan(TopicChangeOutcome.TOPIC_UPDATED, existing, after)


def _check_readable(config: TopicConfig, force: bool) -> None:
    if config.read_queue_nums < config.write_queue_nums and not force:
        raise RpcFailure(
            ErrorReason.WOULD_HIDE_MESSAGES,
            f"topic {config.topic_name!r} would have {config.read_queue_nums} read queue(s) but "
            f"{config.write_queue_nums} write queues: messages sent to queues "
            f"{config.read_queue_nums}..{config.write_queue_nums - 1} would never be read; "
            "give at least as many read queues as write queues, or force it (--force)",
            topic=config.topic_name,
        )


def _same(a: TopicConfig, b: TopicConfig) -> bool:
    return (a.read_queue_nums, a.write_queue_nums, int(a.perm), a.order) == (
        b.read_queue_nums,
        b.write_queue_nums,
        int(b.perm),
        b.order,
    )


def measure_backlog(
    topic: str,
    *,
    min_offset: Callable[[str, int], int],
    max_offset: Callable[[str, int], int],
    groups: Callable[[str], set[str]],
    committed: Callable[[str, str, int], int],
) -> Backlog:
    """A :data:`Backlog` over a broker's queue bounds and committed offsets (passed in, so this
    module stays free of I/O). A queue counts as unconsumed by a group from the greater of the
    group's committed offset and the queue's minimum (messages below it are gone anyway)."""

    def backlog(queue_ids: Sequence[int]) -> list[QueueBacklog]:
        consumers = sorted(groups(topic))
        found = []
        for queue_id in queue_ids:
            low, high = min_offset(topic, queue_id), max_offset(topic, queue_id)
            if high <= low:
                continue
            if not consumers:
                found.append(QueueBacklog(queue_id, high - low, ()))
                continue
            behind = {g: high - max(committed(g, topic, queue_id), low) for g in consumers}
            lagging = tuple(g for g, count in behind.items() if count > 0)
            if lagging:
                found.append(QueueBacklog(queue_id, max(behind[g] for g in lagging), lagging))
        return found

    return backlog
