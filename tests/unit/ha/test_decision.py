"""The failover decision, rule by rule (docs/architecture.md, "Replication and failover"), then as
a property over random groups."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import pytest

from orbitmq.ha import Decision, Member, Policy, Role, decide

NOW = 1_700_000_000_000
WINDOW = Policy().detection_window_ms
M, S = Role.MASTER, Role.SLAVE


def member(
    name: str, role: Role, epoch: int, max_offset: int, *, alive: bool = True, unseen_ms: int = 0
) -> Member:
    """A member observed at NOW, last seen healthy ``unseen_ms`` before."""
    return Member(name, role, epoch, max_offset, alive, NOW - unseen_ms)


def apply(members: Sequence[Member], decision: Decision) -> list[Member]:
    """The group after a caller carried out ``decision`` (the promoted member answers at once)."""
    result = []
    for m in members:
        if m.name == decision.promote:
            m = dataclasses.replace(m, role=M, epoch=decision.epoch, alive=True, last_heartbeat_ms=NOW)
        elif m.name in decision.demote:
            m = dataclasses.replace(m, role=S, epoch=decision.epoch)
        result.append(m)
    return result


def live_masters(members: Sequence[Member]) -> list[Member]:
    return [m for m in members if m.role is M and m.alive and NOW - m.last_heartbeat_ms < WINDOW]


# ------------------------------------------------------------------------------------ the rules

CASES = [
    pytest.param(
        [member("a", M, 2, 500), member("b", S, 2, 480), member("c", S, 2, 500)],
        None,
        (),
        2,
        "'a' is master under epoch 2",
        id="healthy-group-nothing",
    ),
    pytest.param(
        [member("a", M, 1, 900), member("b", M, 2, 300), member("c", S, 2, 300)],
        None,
        ("a",),
        2,
        "demoting 'a'",
        id="returning-old-master-demoted-under-current-epoch",
    ),
    pytest.param(
        [member("a", M, 3, 300), member("b", M, 3, 400), member("c", S, 3, 300)],
        None,
        ("a",),
        3,
        "'b' is master under epoch 3",
        id="two-masters-one-epoch-keep-longer-log",
    ),
    pytest.param(
        [member("b", M, 3, 400), member("a", M, 3, 400)],
        None,
        ("b",),
        3,
        "'a' is master under epoch 3",
        id="two-masters-one-epoch-same-log-keep-lower-name",
    ),
    pytest.param(
        [member("a", M, 3, 400), member("b", M, 3, 900, alive=False, unseen_ms=WINDOW * 2)],
        None,
        (),
        3,
        "'a' is master",
        id="unreachable-duplicate-master-not-addressed",
    ),
    pytest.param(
        [member("a", M, 1, 500, alive=False, unseen_ms=WINDOW - 1), member("b", S, 1, 500)],
        None,
        (),
        1,
        f"last seen {WINDOW - 1} ms ago, less than the {WINDOW} ms detection window: waiting",
        id="blip-shorter-than-window-nothing",
    ),
    pytest.param(
        [member("a", M, 1, 500, alive=False, unseen_ms=WINDOW), member("b", S, 1, 500)],
        "b",
        (),
        2,
        f"master 'a' (epoch 1) unseen for {WINDOW} ms (detection window {WINDOW} ms): promoting 'b'",
        id="unseen-exactly-the-window-act",
    ),
    pytest.param(
        [member("a", M, 1, 500, alive=False, unseen_ms=WINDOW * 10), member("b", S, 1, 500)],
        "b",
        (),
        2,
        "promoting 'b' (epoch 1, max offset 500) under epoch 2",
        id="master-gone-promote-slave-epoch-plus-one",
    ),
    pytest.param(
        [
            member("a", M, 4, 500, alive=False, unseen_ms=WINDOW),
            member("b", S, 3, 900),
            member("c", S, 4, 450),
            member("d", S, 4, 300),
        ],
        "c",
        (),
        5,
        "promoting 'c'",
        id="candidate-highest-epoch-first",
    ),
    pytest.param(
        [
            member("a", M, 4, 500, alive=False, unseen_ms=WINDOW),
            member("b", S, 4, 300),
            member("c", S, 4, 450),
        ],
        "c",
        (),
        5,
        "promoting 'c'",
        id="candidate-then-highest-offset-never-the-behind-one",
    ),
    pytest.param(
        [
            member("a", M, 4, 500, alive=False, unseen_ms=WINDOW),
            member("c", S, 4, 450),
            member("b", S, 4, 450),
        ],
        "b",
        (),
        5,
        "promoting 'b'",
        id="candidate-then-lowest-name",
    ),
    pytest.param(
        [
            member("a", M, 4, 500, alive=False, unseen_ms=WINDOW),
            member("b", S, 4, 500, alive=False, unseen_ms=WINDOW),
            member("c", S, 4, 499, alive=True, unseen_ms=WINDOW),
            member("d", S, 4, 100),
        ],
        "d",
        (),
        5,
        "promoting 'd'",
        id="only-live-slaves-are-candidates",
    ),
    pytest.param(
        [member("a", M, 2, 500, alive=False, unseen_ms=WINDOW), member("b", S, 2, 500, alive=False)],
        None,
        (),
        2,
        f"unseen for {WINDOW} ms (detection window {WINDOW} ms), but no live slave to promote",
        id="no-live-candidate-nothing",
    ),
    pytest.param(
        [member("a", S, 0, 0), member("b", S, 0, 0)],
        "a",
        (),
        1,
        "no member claims MASTER under the current epoch 0: promoting 'a'",
        id="no-master-at-all-promote-at-once",
    ),
    pytest.param(
        [member("a", M, 2, 500, alive=False, unseen_ms=10), member("b", S, 3, 400), member("c", S, 2, 600)],
        "b",
        (),
        4,
        "no member claims MASTER under the current epoch 3",
        id="slave-at-newer-epoch-than-master-means-master-is-stale",
    ),
    pytest.param(
        [
            member("a", M, 1, 900),
            member("b", M, 2, 400, alive=False, unseen_ms=1_000),
            member("c", S, 2, 400),
        ],
        None,
        ("a",),
        2,
        "waiting; demoting 'a', which also claims MASTER",
        id="returning-old-master-during-blip-demoted-nothing-promoted",
    ),
    pytest.param(
        [
            member("a", M, 1, 900),
            member("b", M, 2, 400, alive=False, unseen_ms=WINDOW),
            member("c", S, 2, 400),
        ],
        "c",
        ("a",),
        3,
        "promoting 'c' (epoch 2, max offset 400) under epoch 3; demoting 'a'",
        id="returning-old-master-not-promoted-though-longest",
    ),
    pytest.param(
        [
            member("a", M, 1, 900),
            member("b", M, 2, 400, alive=False, unseen_ms=WINDOW),
            member("c", S, 2, 400, alive=False),
        ],
        None,
        ("a",),
        2,
        "no live slave to promote; demoting 'a'",
        id="returning-old-master-demoted-even-without-candidate",
    ),
    pytest.param(
        [member("a", M, 1, 900, alive=False), member("b", M, 2, 400), member("c", S, 2, 400)],
        None,
        (),
        2,
        "'b' is master under epoch 2",
        id="unreachable-old-master-not-addressed",
    ),
]


@pytest.mark.parametrize(("members", "promote", "demote", "epoch", "reason"), CASES)
def test_rules(
    members: list[Member], promote: str | None, demote: tuple[str, ...], epoch: int, reason: str
) -> None:
    decision = decide(members, NOW)
    assert (decision.promote, decision.demote, decision.epoch) == (promote, demote, epoch)
    assert reason in decision.reason
    assert decision.nothing == (promote is None and not demote)
    assert len(live_masters(apply(members, decision))) <= 1


@pytest.mark.parametrize(("members", "promote", "demote", "epoch", "reason"), CASES)
def test_member_order_does_not_matter(
    members: list[Member], promote: str | None, demote: tuple[str, ...], epoch: int, reason: str
) -> None:
    assert decide(list(reversed(members)), NOW) == decide(members, NOW)


def test_the_detection_window_is_a_policy() -> None:
    group = [member("a", M, 1, 500, alive=False, unseen_ms=2_000), member("b", S, 1, 500)]
    assert decide(group, NOW).nothing
    assert decide(group, NOW, Policy(detection_window_ms=2_000)).promote == "b"
    assert decide(group, NOW, Policy(detection_window_ms=2_001)).nothing


def test_a_slave_seen_too_long_ago_is_not_a_candidate_even_if_it_answers_now() -> None:
    # 'alive' with a stale heartbeat: the observation is inconsistent, so the member is not trusted.
    group = [member("a", M, 1, 500, alive=False, unseen_ms=WINDOW), member("b", S, 1, 500, unseen_ms=WINDOW)]
    assert decide(group, NOW).promote is None


# ----------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("members", "problem"),
    [
        ([], "no members"),
        ([member("a", M, 0, 0), member("b", S, 0, 0), member("a", S, 0, 0)], "duplicated: ['a']"),
    ],
)
def test_bad_groups_raise_naming_the_problem(members: list[Member], problem: str) -> None:
    with pytest.raises(ValueError) as info:
        decide(members, NOW)
    assert problem in str(info.value)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"epoch": -1}, "member 'a': epoch must be an int >= 0, got -1"),
        ({"max_offset": -5}, "member 'a': max_offset must be an int >= 0, got -5"),
        ({"name": ""}, "member name must be a non-empty string"),
        ({"role": "MASTER"}, "role must be a Role"),
    ],
)
def test_bad_members_raise_naming_the_value(fields: dict[str, object], problem: str) -> None:
    values: dict[str, object] = {
        "name": "a",
        "role": M,
        "epoch": 0,
        "max_offset": 0,
        "alive": True,
        "last_heartbeat_ms": NOW,
    }
    with pytest.raises(ValueError) as info:
        Member(**(values | fields))  # type: ignore[arg-type]
    assert problem in str(info.value)


@pytest.mark.parametrize("window", [0, -1])
def test_a_detection_window_must_be_positive(window: int) -> None:
    with pytest.raises(ValueError, match=f"detection_window_ms must be > 0, got {window}"):
        Policy(detection_window_ms=window)


def test_decisions_are_frozen() -> None:
    decision = decide([member("a", M, 0, 0)], NOW)
    assert decision == Decision(None, (), 0, "'a' is master under epoch 0")
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.promote = "b"  # type: ignore[misc]


# ----------------------------------------------------------------------------------- property


def _random_group(rng: random.Random) -> list[Member]:
    unseen_choices = [0, 1, WINDOW - 1, WINDOW, WINDOW + 1, WINDOW * 5]
    return [
        Member(
            name=f"broker-{i}",
            role=M if rng.random() < 0.4 else S,
            epoch=rng.randint(0, 3),
            max_offset=rng.choice([0, 100, 200, 300, 400]),
            alive=rng.random() < 0.7,
            last_heartbeat_ms=NOW - rng.choice(unseen_choices),
        )
        for i in rng.sample(range(10), rng.randint(1, 6))
    ]


@pytest.mark.parametrize("seed", range(20))
def test_property_one_master_and_never_a_behind_slave(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        group = _random_group(rng)
        decision = decide(group, NOW)
        after = apply(group, decision)

        masters = live_masters(after)
        assert len(masters) <= 1, (group, decision)
        epochs = [m.epoch for m in masters]
        assert len(epochs) == len(set(epochs)), (group, decision)
        assert decision.promote not in decision.demote
        assert set(decision.demote) <= {m.name for m in group if m.role is M and m.alive}

        top_epoch = max(m.epoch for m in group)
        if decision.promote is None:
            assert decision.epoch == top_epoch
            continue
        assert decision.epoch == top_epoch + 1
        promoted = next(m for m in group if m.name == decision.promote)
        live_slaves = [m for m in group if m.role is S and m.alive and NOW - m.last_heartbeat_ms < WINDOW]
        assert promoted in live_slaves, (group, decision)
        assert all((s.epoch, s.max_offset) <= (promoted.epoch, promoted.max_offset) for s in live_slaves)
        reigning = [m for m in group if m.role is M and m.epoch == top_epoch]
        assert all(NOW - m.last_heartbeat_ms >= WINDOW for m in reigning), (group, decision)
        assert not live_masters(group) or all(m.epoch < top_epoch for m in live_masters(group))
        # Carried out, the promotion settles the group: the next look changes nothing.
        assert decide(after, NOW).nothing, (after, decide(after, NOW))
