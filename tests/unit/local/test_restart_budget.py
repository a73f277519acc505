"""How often a local cluster restarts a dying component: a few times a minute, then it stops."""

from __future__ import annotations

from orbitmq.local.restarts import RestartBudget


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_three_restarts_a_minute_then_no_more() -> None:
    clock = Clock()
    budget = RestartBudget(clock=clock)
    assert [budget.take() for _ in range(4)] == [True, True, True, False]
    assert budget.used == 3


def test_old_restarts_leave_the_window() -> None:
    clock = Clock()
    budget = RestartBudget(max_restarts=2, window_s=60, clock=clock)
    assert budget.take()
    clock.now += 30
    assert budget.take()
    clock.now += 29
    assert not budget.take()
    clock.now += 1  # the first restart is 60 s old, the second stays
    assert budget.take() and budget.used == 2
