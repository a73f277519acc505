"""The operator's wait for its peering object at start (the chart creates it, the operator
never does: two creators made ``helm install`` fail once in four with "already exists")."""

from __future__ import annotations

import logging

import pytest

from orbitmq_operator.peering import (
    WAIT_LOG_INTERVAL_S,
    PeeringMissing,
    describe,
    peering_objects,
    wait_for_peering,
)


class FakeTime:
    """An injected clock whose sleep moves it on."""

    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_peering_objects_per_watch_mode() -> None:
    [cluster] = peering_objects("mq-operator", [])
    assert cluster == {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": "mq-operator"},
    }
    namespaced = peering_objects("mq-operator", ["team-a", "team-b"])
    assert [describe(o) for o in namespaced] == [
        "KopfPeering team-a/mq-operator",
        "KopfPeering team-b/mq-operator",
    ]


def test_waits_until_the_object_appears_and_logs_what_it_waits_for(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeTime()
    appears_at = 75.0

    def missing() -> list[str]:
        return [] if clock.now >= appears_at else ["KopfPeering team-a/mq-operator"]

    with caplog.at_level(logging.INFO, logger="orbitmq_operator.peering"):
        waited = wait_for_peering(missing, timeout_s=120, sleep=clock.sleep, clock=lambda: clock.now)
    assert waited == appears_at
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 + int(appears_at // WAIT_LOG_INTERVAL_S), lines  # not once a second
    assert "KopfPeering team-a/mq-operator" in lines[0]


def test_gives_up_naming_the_objects_and_how_to_make_them() -> None:
    clock = FakeTime()
    with pytest.raises(PeeringMissing) as missing:
        wait_for_peering(
            lambda: ["ClusterKopfPeering mq-operator"],
            timeout_s=10,
            sleep=clock.sleep,
            clock=lambda: clock.now,
        )
    assert clock.now == 10
    assert "ClusterKopfPeering mq-operator still missing after 10 s" in str(missing.value)
    assert "--print-peering" in str(missing.value)


def test_an_object_already_there_costs_no_wait() -> None:
    assert wait_for_peering(lambda: [], sleep=lambda _: pytest.fail("slept")) == pytest.approx(0, abs=0.1)
