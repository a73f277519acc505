"""Latency fault avoidance: how long a failing or slow broker is set aside (pure, manual clock)."""

from __future__ import annotations

from orbitmq.client.faults import FAILURE_ISOLATION_MS, LatencyFaults
from orbitmq.common.clock import ManualClock


def _isolated_for_ms(faults: LatencyFaults, clock: ManualClock, broker: str) -> int:
    """How long ``broker`` stays unavailable from now, to the next 100 ms (0 = available)."""
    start = clock.now_ms()
    while not faults.available(broker):
        clock.advance(100)
    waited = clock.now_ms() - start
    clock.set(start)
    return waited


def test_one_failure_sets_a_broker_aside_for_about_a_second_not_ten_minutes() -> None:
    clock = ManualClock()
    faults = LatencyFaults(clock)
    faults.record("broker-a", 0, failed=True)
    assert not faults.available("broker-a")
    assert _isolated_for_ms(faults, clock, "broker-a") == 1_000
    assert faults.available("broker-b")


def test_isolation_grows_with_consecutive_failures_up_to_its_cap_and_a_success_resets_it() -> None:
    clock = ManualClock()
    faults = LatencyFaults(clock)
    seen = []
    for _ in range(len(FAILURE_ISOLATION_MS) + 2):
        faults.record("broker-a", 0, failed=True)
        seen.append(_isolated_for_ms(faults, clock, "broker-a"))
    assert seen == [1_000, 2_000, 5_000, 10_000, 30_000, 30_000, 30_000]
    assert seen[:5] == list(FAILURE_ISOLATION_MS)
    faults.record("broker-a", 20)  # a send that succeeded quickly
    assert faults.available("broker-a") and faults.probe_candidates() == []
    faults.record("broker-a", 0, failed=True)
    assert _isolated_for_ms(faults, clock, "broker-a") == 1_000  # counting starts again


def test_slow_answers_set_a_broker_aside_by_latency_steps() -> None:
    clock = ManualClock()
    faults = LatencyFaults(clock)
    steps = {40: 0, 99: 0, 600: 2_000, 1_900: 5_000, 3_100: 6_000, 5_500: 10_000, 20_000: 30_000}
    for latency_ms, expected in steps.items():
        faults.record("broker-a", latency_ms)
        assert _isolated_for_ms(faults, clock, "broker-a") == expected, latency_ms
    assert faults.probe_candidates() == []  # slow, not failing: nothing to probe


def test_failed_brokers_are_probe_candidates_until_a_success_or_forget() -> None:
    clock = ManualClock()
    faults = LatencyFaults(clock)
    faults.record("broker-a", 0, failed=True)
    faults.record("broker-b", 0, failed=True)
    clock.advance(60_000)  # isolation over, but no send has succeeded there yet
    assert faults.probe_candidates() == ["broker-a", "broker-b"]
    faults.forget("broker-a")  # a probe answered, or the route shows a new master
    assert faults.available("broker-a") and faults.probe_candidates() == ["broker-b"]
