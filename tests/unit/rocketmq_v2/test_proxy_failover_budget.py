"""Which broker failures the proxy's acks ride out (the group is changing masters and nothing
was done) and how long they may (the budget, cut to the client's deadline)."""

from __future__ import annotations

import pytest

from orbitmq.common.rpc import RpcFailure
from orbitmq.proxy.consumers import DEADLINE_MARGIN_S, FAILOVER_BUDGET_MS, failover_budget_s, master_moved
from orbitmq.v1.broker_pb2 import ErrorReason


@pytest.mark.parametrize(
    ("reason", "moved"),
    [
        (ErrorReason.SLAVE_READ_ONLY, True),
        (ErrorReason.SERVICE_NOT_AVAILABLE, True),
        (ErrorReason.INVALID_ARGUMENT, False),  # a bad handle fails the same way on any master
        (ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST, False),
    ],
)
def test_only_a_missing_master_is_ridden_out(reason: int, moved: bool) -> None:
    assert master_moved(RpcFailure(reason, "x")) is moved


def test_a_bug_is_not_ridden_out() -> None:
    assert master_moved(ValueError("bug")) is False


def test_budget_is_cut_to_the_clients_deadline() -> None:
    assert failover_budget_s(None) == FAILOVER_BUDGET_MS / 1000
    assert failover_budget_s(3.0) == pytest.approx(3.0 - DEADLINE_MARGIN_S)
    assert failover_budget_s(60.0) == FAILOVER_BUDGET_MS / 1000
    assert failover_budget_s(0.1) == 0.0  # already too late: one attempt, no retry
