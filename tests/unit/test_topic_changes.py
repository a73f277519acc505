"""The rules that keep topic creates and updates from hiding messages (pure code)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from orbitmq.broker.topic_changes import (
    QueueBacklog,
    measure_backlog,
    plan_create,
    plan_update,
)
from orbitmq.broker.topics import check_user_topic_name
from orbitmq.common.rpc import RpcFailure
from orbitmq.store.config_store import Permission, TopicConfig
from orbitmq.v1.broker_pb2 import ErrorReason, TopicChangeOutcome

ORDERS = TopicConfig(topic_name="Orders", read_queue_nums=8, write_queue_nums=8)


def no_backlog(queue_ids: Sequence[int]) -> list[QueueBacklog]:
    return []


def backlog_in(counts: dict[int, int]):  # type: ignore[no-untyped-def]
    def backlog(queue_ids: Sequence[int]) -> list[QueueBacklog]:
        return [QueueBacklog(q, counts[q], ("billing",)) for q in queue_ids if counts.get(q)]

    return backlog


def test_create_of_an_existing_topic_leaves_it_alone() -> None:
    asked = TopicConfig(topic_name="Orders")  # the defaults: 4 queues
    plan = plan_create(asked, ORDERS, no_backlog, update_existing=False, force=False)
    assert plan.outcome == TopicChangeOutcome.TOPIC_EXISTS_DIFFERENT
    assert plan.after == ORDERS and not plan.writes
    same = plan_create(ORDERS, ORDERS, no_backlog, update_existing=False, force=False)
    assert same.outcome == TopicChangeOutcome.TOPIC_UNCHANGED and not same.writes


def test_create_of_a_new_topic() -> None:
    plan = plan_create(ORDERS, None, no_backlog, update_existing=False, force=False)
    assert plan.outcome == TopicChangeOutcome.TOPIC_CREATED and plan.after == ORDERS and plan.writes


def test_update_changes_only_the_fields_given() -> None:
    plan = plan_update(ORDERS, no_backlog, topic="Orders", perm=4)
    assert plan.outcome == TopicChangeOutcome.TOPIC_UPDATED
    assert (plan.after.read_queue_nums, plan.after.write_queue_nums, plan.after.perm) == (
        8,
        8,
        Permission.READ,
    )
    assert plan_update(ORDERS, no_backlog, topic="Orders", read_queue_nums=8).outcome == (
        TopicChangeOutcome.TOPIC_UNCHANGED
    )


def test_update_of_a_missing_topic_is_refused() -> None:
    with pytest.raises(RpcFailure) as raised:
        plan_update(None, no_backlog, topic="Ghost", perm=6)
    assert raised.value.reason == ErrorReason.TOPIC_NOT_EXIST and "'Ghost'" in raised.value.message


def test_cutting_read_queues_that_hold_unconsumed_messages_is_refused_with_queues_and_counts() -> None:
    backlog = backlog_in({5: 12, 7: 3})
    with pytest.raises(RpcFailure) as raised:
        plan_update(ORDERS, backlog, topic="Orders", read_queue_nums=4, write_queue_nums=4)
    message = raised.value.message
    assert raised.value.reason == ErrorReason.WOULD_HIDE_MESSAGES
    assert "from 8 to 4" in message and "15 unconsumed" in message
    assert "queue 5: 12 message(s), not consumed by billing" in message and "queue 7: 3" in message
    forced = plan_update(ORDERS, backlog, topic="Orders", read_queue_nums=4, write_queue_nums=4, force=True)
    assert forced.after.read_queue_nums == 4


def test_drained_queues_may_be_cut() -> None:
    plan = plan_update(ORDERS, backlog_in({1: 5}), topic="Orders", read_queue_nums=4, write_queue_nums=4)
    assert plan.after.read_queue_nums == 4  # queue 1 stays readable; 4..7 are empty


def test_fewer_read_than_write_queues_is_refused() -> None:
    with pytest.raises(RpcFailure) as raised:
        plan_update(ORDERS, no_backlog, topic="Orders", read_queue_nums=6)
    assert "queues 6..7 would never be read" in raised.value.message
    with pytest.raises(RpcFailure):
        plan_create(
            TopicConfig(topic_name="New", read_queue_nums=2, write_queue_nums=4),
            None,
            no_backlog,
            update_existing=False,
            force=False,
        )
    # the safe way down: write queues first
    assert plan_update(ORDERS, no_backlog, topic="Orders", write_queue_nums=4).after.write_queue_nums == 4


@pytest.mark.parametrize(
    "name",
    ["TBW102", "%RETRY%billing", "%DLQ%billing", "RMQ_SYS_TRANS_HALF_TOPIC", "DefaultCluster", "broker-a"],
)
def test_reserved_topic_names(name: str) -> None:
    with pytest.raises(RpcFailure) as raised:
        check_user_topic_name(name, ("DefaultCluster", "broker-a"))
    assert raised.value.reason == ErrorReason.INVALID_NAME and "reserved" in raised.value.message
    check_user_topic_name("Orders", ("DefaultCluster", "broker-a"))


def test_measure_backlog_counts_from_the_slowest_group_and_the_queue_minimum() -> None:
    bounds = {0: (0, 10), 1: (5, 5), 2: (3, 9)}
    committed = {("fast", 0): 10, ("slow", 0): 4, ("fast", 2): 9, ("slow", 2): -1}
    backlog = measure_backlog(
        "Orders",
        min_offset=lambda t, q: bounds[q][0],
        max_offset=lambda t, q: bounds[q][1],
        groups=lambda t: {"fast", "slow"},
        committed=lambda g, t, q: committed.get((g, q), -1),
    )
    assert backlog([0, 1, 2]) == [QueueBacklog(0, 6, ("slow",)), QueueBacklog(2, 6, ("slow",))]
    unconsumed = measure_backlog(
        "Orders",
        min_offset=lambda t, q: bounds[q][0],
        max_offset=lambda t, q: bounds[q][1],
        groups=lambda t: set(),
        committed=lambda g, t, q: -1,
    )
    assert unconsumed([0, 1]) == [QueueBacklog(0, 10, ())]
