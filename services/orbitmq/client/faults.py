"""Latency-based fault avoidance (RocketMQ 5's MQFaultStrategy), pure and clock-injected.

After each send the producer records how long the broker took to answer, or that it could not
be reached. Such a broker is set aside for a short while, so retries and new sends go to
healthy brokers, without a blacklist that outlives the fault:

* a failed attempt (unreachable, timed out, no longer master) sets the broker aside for
  ``FAILURE_ISOLATION_MS`` by the count of failures in a row: 1 s, 2 s, 5 s, 10 s, then 30 s;
* an answer as slow as ``LATENCY_MAX_MS[i]`` sets it aside for ``NOT_AVAILABLE_MS[i]``
  (RocketMQ 5's steps: under 550 ms not at all, then 2 s, 5 s, 6 s, 10 s, 30 s from 15 s);
* a quick answer ends both, and the failure count starts again.

A pause also ends early (:meth:`LatencyFaults.forget`) when the route shows the broker again
(a new master address, or the broker back after it had left the route) or when a probe of a
failed broker succeeds (:meth:`LatencyFaults.probe_candidates` lists which to probe): a
restarted master that is writable after 3 s gets sends again within about a second of its
return, not after the pause. One failure used to set a broker aside for 10 minutes.
"""

from __future__ import annotations

from orbitmq.common.clock import Clock

LATENCY_MAX_MS = (50, 100, 550, 1_800, 3_000, 5_000, 15_000)
NOT_AVAILABLE_MS = (0, 0, 2_000, 5_000, 6_000, 10_000, 30_000)
"""An answer that took at least ``LATENCY_MAX_MS[i]`` sets the broker aside for
``NOT_AVAILABLE_MS[i]`` (RocketMQ 5's ``latencyMax`` and ``notAvailableDuration``)."""
FAILURE_ISOLATION_MS = (1_000, 2_000, 5_000, 10_000, 30_000)
"""The pause after the Nth failed attempt in a row (the last one from then on): short at first,
as most failures are a restart or a failover that is over in seconds, longer for a broker that
keeps failing, so sends do not keep paying a failed attempt for it."""


class LatencyFaults:
    """Which brokers to avoid now; see the module docstring for the steps."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._until: dict[str, int] = {}
        self._failures: dict[str, int] = {}
        """Failed attempts in a row per broker, until a success or :meth:`forget`."""

    def record(self, broker_name: str, latency_ms: float, failed: bool = False) -> None:
        """One attempt on ``broker_name``: its answer's latency, or that it ``failed``."""
        if failed:
            count = self._failures[broker_name] = self._failures.get(broker_name, 0) + 1
            pause = FAILURE_ISOLATION_MS[min(count, len(FAILURE_ISOLATION_MS)) - 1]
        else:
            self._failures.pop(broker_name, None)
            pause = _latency_pause_ms(latency_ms)
        if pause:
            self._until[broker_name] = self._clock.now_ms() + pause
        else:
            self._until.pop(broker_name, None)

    def forget(self, broker_name: str) -> None:
        """Lift any pause of ``broker_name``: it answered a probe, or the route shows it again
        (its master was replaced or re-registered), and the new one has not failed yet."""
        self._until.pop(broker_name, None)
        self._failures.pop(broker_name, None)

    def available(self, broker_name: str) -> bool:
        until = self._until.get(broker_name)
        return until is None or self._clock.now_ms() >= until

    def probe_candidates(self) -> list[str]:
        """Brokers whose last attempt failed (paused or not): a probe that succeeds lifts the
        pause; slow brokers are not probed, their next send tells."""
        return sorted(self._failures)


def _latency_pause_ms(latency_ms: float) -> int:
    for threshold, duration in zip(reversed(LATENCY_MAX_MS), reversed(NOT_AVAILABLE_MS), strict=True):
        if latency_ms >= threshold:
            return duration
    return 0
