"""A name server that keeps failing is logged once, then at most once a minute, and its return
once (before, every failed round logged a line: one a second while a name server was down)."""

from __future__ import annotations

import logging

import pytest

from orbitmq.broker.registration import FAILURE_LOG_INTERVAL_MS, FailureLog
from orbitmq.common.clock import ManualClock


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "orbitmq.broker.registration"]


def test_a_failing_name_server_is_logged_once_then_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    clock = ManualClock()
    failures = FailureLog("10.0.0.1:9876", clock)
    for _ in range(60):  # one attempt a second for a minute
        failures.failed("DEADLINE_EXCEEDED: Deadline Exceeded")
        clock.advance(1000)
    assert len(lines(caplog)) == 1
    assert "10.0.0.1:9876" in lines(caplog)[0] and "DEADLINE_EXCEEDED" in lines(caplog)[0]
    failures.failed("UNAVAILABLE: connection refused")  # a minute after the first line
    assert len(lines(caplog)) == 2
    assert "still failing: 61 attempts over 60 s, last: UNAVAILABLE" in lines(caplog)[1]
    for _ in range(30):
        clock.advance(1000)
        failures.failed("UNAVAILABLE: connection refused")
    assert len(lines(caplog)) == 2
    failures.answered()
    failures.answered()
    assert len(lines(caplog)) == 3
    assert "works again after 91 failed attempts" in lines(caplog)[2]
    failures.failed("DEADLINE_EXCEEDED: Deadline Exceeded")  # a new outage is news again
    assert len(lines(caplog)) == 4


def test_the_interval_is_a_minute() -> None:
    assert FAILURE_LOG_INTERVAL_MS == 60_000
