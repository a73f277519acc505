"""Injectable time.

Every component that makes a decision based on time (retention, lock expiry, delays) takes a
:class:`Clock` so tests can move time forward without sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Milliseconds since the epoch; the unit every on-disk timestamp uses."""

    def now_ms(self) -> int: ...


class SystemClock:
    """Wall-clock time."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to (tests)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, delta_ms: int) -> None:
        self._now_ms += delta_ms

    def set(self, now_ms: int) -> None:
        self._now_ms = now_ms


class MonotonicClock:
    """Milliseconds on the monotonic clock (its zero is arbitrary: not a timestamp), for leases
    and liveness kept in memory, a lock's last renewal or a client's last heartbeat: a step of
    the wall clock (NTP, an operator's ``date -s``) must neither lapse nor prolong them. On the
    wall clock a two-minute forward step lapsed every orderly lock at once and another consumer
    took a queue its owner was still consuming."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


SYSTEM_CLOCK = SystemClock()
MONOTONIC_CLOCK = MonotonicClock()
