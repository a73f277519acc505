"""A latency histogram kept as plain per-bucket counts, for hot paths and for code that must not
import prometheus_client.

prometheus_client's ``Histogram`` takes a lock per observation (three, with its sum and count):
a few microseconds of a send that costs tens. A :class:`LatencyTally` is a list of ints and a
float, with one writer at a time (the event loop for sends and pulls; the one thread that
flushes the commit log for its fsyncs), read when Prometheus scrapes. A scrape that lands between
an observation's two updates sees a count one ahead of the sum, which the next scrape corrects;
no observation is lost, since a single writer never races itself.

The store keeps one for its commit-log flushes without knowing about Prometheus; the broker's
collectors export every tally as the histogram it stands for
(:func:`orbitmq.broker.metrics.histogram_buckets`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate, pairwise


class LatencyTally:
    """Observations counted per bucket: ``buckets[i]`` holds those in ``(bounds[i-1], bounds[i]]``
    (Prometheus's ``le``), the last one those above every bound (``+Inf``)."""

    __slots__ = ("bounds", "buckets", "total_seconds")

    def __init__(self, bounds: Sequence[float]) -> None:
        """``bounds``: the buckets' upper bounds in seconds, positive and strictly increasing."""
        bounds = tuple(bounds)
        if not bounds or bounds[0] <= 0 or any(b <= a for a, b in pairwise(bounds)):
            raise ValueError(f"latency bucket bounds must be positive and strictly increasing: got {bounds}")
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)
        self.total_seconds = 0.0

    def observe(self, seconds: float) -> None:
        self.buckets[bisect_left(self.bounds, seconds)] += 1
        self.total_seconds += seconds

    @property
    def count(self) -> int:
        return sum(self.buckets)

    def cumulative(self) -> list[int]:
        """Observations at or below each bound, then the total (the ``+Inf`` bucket)."""
        return list(accumulate(list(self.buckets)))
