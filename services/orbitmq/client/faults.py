"""Latency-based fault avoidance (RocketMQ's MQFaultStrategy), pure and clock-injected.

After each send the producer records how long the broker took (or that it failed). A slow or
failing broker is avoided for a while that grows with the latency, so retries and new sends go
to healthy brokers without a hard blacklist.
"""

from __future__ import annotations

from orbitmq.common.clock import Clock

LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_MS = (0, 0, 30_000, 60_000, 120_000, 180_000, 600_000)
FAILURE_LATENCY_MS = 30_000


class LatencyFaults:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._until: dict[str, int] = {}

    def record(self, broker_name: str, latency_ms: float, failed: bool = False) -> None:
        latency = FAILURE_LATENCY_MS if failed else latency_ms
        pause = 0
        for threshold, duration in zip(reversed(LATENCY_MAX_MS), reversed(NOT_AVAILABLE_MS), strict=True):
            if latency >= threshold:
                pause = duration
                break
        if pause:
            self._until[broker_name] = self._clock.now_ms() + pause
        else:
            self._until.pop(broker_name, None)

    def forget(self, broker_name: str) -> None:
        """Lift any pause of ``broker_name``: its master was replaced (a failover), and the new
        one has not failed yet."""
        self._until.pop(broker_name, None)

    def available(self, broker_name: str) -> bool:
        until = self._until.get(broker_name)
        return until is None or self._clock.now_ms() >= until
