"""The planned switchover decision: only an in-sync slave takes over, under the next epoch."""

from __future__ import annotations

import pytest

from orbitmq.ha import Member, Policy, Role
from orbitmq.ha.switchover import switchover

NOW = 1_700_000_000_000
WINDOW = Policy().detection_window_ms
M, S = Role.MASTER, Role.SLAVE


def member(
    name: str, role: Role, epoch: int, max_offset: int, *, alive: bool = True, unseen_ms: int = 0
) -> Member:
    return Member(name, role, epoch, max_offset, alive, NOW - unseen_ms)


def test_a_caught_up_slave_is_promoted_and_the_master_demoted_under_the_next_epoch() -> None:
    decision = switchover([member("a-0", M, 3, 500), member("a-1", S, 3, 500)], NOW)
    assert (decision.promote, decision.demote, decision.epoch) == ("a-1", ("a-0",), 4)
    assert "a-1" in decision.reason


def test_a_lagging_slave_is_refused_unless_within_the_allowed_lag() -> None:
    members = [member("a-0", M, 0, 500), member("a-1", S, 0, 400)]
    refused = switchover(members, NOW)
    assert refused.nothing and refused.epoch == 0
    assert "'a-1' is 100 bytes behind" in refused.reason
    assert switchover(members, NOW, max_lag_bytes=100).promote == "a-1"


def test_the_longest_in_sync_log_wins_then_the_lowest_name() -> None:
    members = [
        member("a-0", M, 1, 900),
        member("a-3", S, 1, 900),
        member("a-2", S, 1, 850),
        member("a-1", S, 1, 900),
    ]
    assert switchover(members, NOW, max_lag_bytes=100).promote == "a-1"
    members[1] = member("a-3", S, 1, 950)  # observed after the master: a few bytes ahead
    assert switchover(members, NOW, max_lag_bytes=100).promote == "a-3"


@pytest.mark.parametrize(
    ("slave", "why"),
    [
        (member("a-1", S, 2, 500, alive=False, unseen_ms=1), "'a-1' is not live"),
        (member("a-1", S, 2, 500, unseen_ms=WINDOW), "'a-1' is not live"),
        (member("a-1", S, 1, 500), "'a-1' follows epoch 1, not 2"),
    ],
)
def test_a_dead_or_stale_epoch_slave_is_never_chosen(slave: Member, why: str) -> None:
    decision = switchover([member("a-0", M, 2, 500), slave], NOW, max_lag_bytes=10_000)
    assert decision.nothing and why in decision.reason


@pytest.mark.parametrize(
    "master",
    [
        member("a-0", M, 2, 500, alive=False, unseen_ms=10),  # down: that is failover's job
        member("a-0", M, 1, 500),  # an old epoch's master: not the group's master
        member("a-0", S, 2, 500),  # nobody is master
    ],
)
def test_without_one_live_master_of_the_current_epoch_nothing_is_switched(master: Member) -> None:
    decision = switchover([master, member("a-1", S, 2, 500)], NOW)
    assert decision.nothing and "no single live master" in decision.reason


def test_two_masters_of_one_epoch_are_left_to_failover() -> None:
    members = [member("a-0", M, 2, 500), member("a-1", M, 2, 500), member("a-2", S, 2, 500)]
    assert switchover(members, NOW).nothing


def test_a_master_without_slaves_is_refused_and_bad_input_raises() -> None:
    assert "it has no slave" in switchover([member("a-0", M, 0, 0)], NOW).reason
    with pytest.raises(ValueError, match="no members"):
        switchover([], NOW)
    with pytest.raises(ValueError, match="max_lag_bytes"):
        switchover([member("a-0", M, 0, 0)], NOW, max_lag_bytes=-1)


def test_only_a_slave_streaming_from_the_master_is_chosen() -> None:
    members = [member("a-0", M, 1, 500), member("a-1", S, 1, 500), member("a-2", S, 1, 480)]
    assert switchover(members, NOW, max_lag_bytes=50, streaming={"a-2"}).promote == "a-2"
    refused = switchover(members, NOW, streaming=set())
    assert refused.nothing and "'a-1' is not replicating from it" in refused.reason
