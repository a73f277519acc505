"""The fault schedule: seeded, and never a name-server kill local up would not restart."""

from __future__ import annotations

import random

from orbitmq.chaos.faults import FAULTS, choose
from orbitmq.local.restarts import MAX_RESTARTS


def test_the_same_seed_draws_the_same_faults() -> None:
    def draws(seed: int) -> list[str]:
        rng = random.Random(seed)
        return [fault.name for _ in range(20) if (fault := choose(rng, sorted(FAULTS), [], 0.0))]

    assert draws(5) == draws(5)
    assert draws(5) != draws(6)
    assert set(draws(5)) <= set(FAULTS)


def test_a_name_server_kill_beyond_local_ups_restart_budget_is_not_drawn() -> None:
    rng = random.Random(0)
    names = ["kill-namesrv", "pause-slave"]
    recent = [10.0 + n for n in range(MAX_RESTARTS)]
    assert {getattr(choose(rng, names, recent, 30.0), "name", None) for _ in range(50)} == {"pause-slave"}
    drawn = {getattr(choose(rng, names, recent, 80.0), "name", None) for _ in range(50)}
    assert "kill-namesrv" in drawn  # the window has passed
    assert choose(rng, ["kill-namesrv"], recent, 30.0) is None  # nothing else asked for: wait
