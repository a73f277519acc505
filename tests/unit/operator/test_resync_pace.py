"""The cluster timer's pace: every resync period when idle, every tick during a roll or a
drain, and its ticks kept out of the log."""

from __future__ import annotations

import logging

import pytest

from orbitmq_operator.handlers import clusters
from orbitmq_operator.handlers.clusters import resync_due
from orbitmq_operator.handlers.startup import _quiet_ticks

RESYNC_S, BUSY_RESYNC_S = 15.0, 2.0


@pytest.fixture(autouse=True)
def default_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defaults (the e2e tests' operatorkit sets a 2 s resync before this module imports)."""
    monkeypatch.setattr(clusters, "RESYNC_S", RESYNC_S)
    monkeypatch.setattr(clusters, "BUSY_RESYNC_S", BUSY_RESYNC_S)


def test_an_idle_cluster_is_reconciled_once_per_resync_period() -> None:
    assert resync_due({}, None), "the first tick after start"
    assert not resync_due({"conditions": []}, BUSY_RESYNC_S)
    assert not resync_due(None, RESYNC_S - BUSY_RESYNC_S)
    assert resync_due({}, RESYNC_S)


@pytest.mark.parametrize(
    "status",
    [
        {"rollingUpdates": [{"name": "c-broker-0", "step": "Delete", "pod": "c-broker-0-1"}]},
        {"drains": [{"name": "c-broker-1", "startedAt": "2026-11-24T00:00:00Z"}]},
    ],
)
def test_a_roll_or_a_drain_is_stepped_on_every_tick(status: dict[str, object]) -> None:
    assert resync_due(status, BUSY_RESYNC_S)


def test_timer_ticks_are_not_logged_but_everything_else_is(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.kopf.objects")
    _quiet_ticks(logger)
    _quiet_ticks(logger)  # a second start adds no second filter
    assert len(logger.filters) == 1
    with caplog.at_level(logging.INFO, logger="test.kopf.objects"):
        logger.info("Timer 'cluster_resync' succeeded.")
        logger.info("Handler 'cluster_changed' succeeded.")
    assert [r.getMessage() for r in caplog.records] == ["Handler 'cluster_changed' succeeded."]
