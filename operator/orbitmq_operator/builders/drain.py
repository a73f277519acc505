"""The drain of a surplus broker group as a pure state machine (DESIGN §10).

Scaling ``spec.brokers.groups`` down removes the highest groups, but a group's StatefulSet may
only go once nobody needs its messages. The reconciler wipes the group's write permission on
every name server (producers stop sending there, consumers keep reading), measures each
consumer group's lag on it, and asks :func:`decide_drain` what to do:

* ``WAIT``: backlog left, or the backlog cannot be read, or the wipe is younger than
  ``grace_s`` (producers refresh routes every 30 s: until then a producer may still send one
  last message there, which an empty backlog read too early would lose);
* ``REMOVE``: nothing left to consume, past the grace period — delete the group's objects;
* ``STUCK``: ``timeout_s`` passed with backlog left (or unreadable): nothing is deleted and the
  status says which consumer groups lag — unless the spec discards the backlog on purpose.

The decision keeps no state itself: the drain's start time lives in ``status.drains``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

ROUTE_REFRESH_GRACE_S = 35.0
"""A wipe this old has reached every producer (their route refresh is 30 s by default)."""

Backlog = Mapping[tuple[str, str], int]
"""Unconsumed messages by (consumer group, topic); only entries with some left."""


class DrainStep(StrEnum):
    WAIT = "Wait"
    REMOVE = "Remove"
    STUCK = "Stuck"


@dataclass(frozen=True)
class DrainPolicy:
    """``spec.brokers.drainTimeoutS``, ``spec.brokers.discardBacklogAfterTimeout`` and the grace."""

    timeout_s: float
    discard_after_timeout: bool = False
    grace_s: float = ROUTE_REFRESH_GRACE_S


@dataclass(frozen=True)
class DrainDecision:
    broker_name: str
    step: DrainStep
    message: str
    lag: int = 0
    """Total messages left (0 also when unknown)."""


def describe_backlog(backlog: Backlog, limit: int = 5) -> str:
    """``Billing/Orders 12, Audit/Orders 3`` (largest first, at most ``limit`` entries)."""
    top = sorted(backlog.items(), key=lambda item: (-item[1], item[0]))
    text = ", ".join(f"{group}/{topic} {lag}" for (group, topic), lag in top[:limit])
    return text + (f" and {len(top) - limit} more" if len(top) > limit else "")


def decide_drain(
    broker_name: str, elapsed_s: float, backlog: Backlog | None, policy: DrainPolicy, problem: str = ""
) -> DrainDecision:
    """What to do with a draining group whose write permission was wiped ``elapsed_s`` ago.

    Args:
        backlog: lag by (consumer group, topic) on the group; None when it could not be read
            (``problem`` says why: the master down, a name server not answering).
        policy: how long to wait, and whether to delete anyway after that.
    """
    lag = sum(backlog.values()) if backlog else 0
    if backlog is None:
        left = f"backlog unknown ({problem or 'not readable'})"
    elif backlog:
        left = f"{lag} message(s) not consumed: {describe_backlog(backlog)}"
    else:
        left = "no backlog"
    timed_out = elapsed_s >= policy.timeout_s
    if backlog == {} and elapsed_s >= policy.grace_s:
        return DrainDecision(broker_name, DrainStep.REMOVE, f"{broker_name} drained: {left}", 0)
    if backlog == {} or not timed_out:
        why = "waiting for producers' routes to refresh" if backlog == {} else "waiting for consumers"
        message = f"{broker_name} draining for {elapsed_s:.0f} s, {why}: {left}"
        return DrainDecision(broker_name, DrainStep.WAIT, message, lag)
    if policy.discard_after_timeout:
        message = (
            f"{broker_name} not drained after spec.brokers.drainTimeoutS={policy.timeout_s:.0f}; "
            f"removed anyway (spec.brokers.discardBacklogAfterTimeout), losing {left}"
        )
        return DrainDecision(broker_name, DrainStep.REMOVE, message, lag)
    message = (
        f"{broker_name} not drained after spec.brokers.drainTimeoutS={policy.timeout_s:.0f}: {left}; "
        "kept (nothing deleted): let the consumers catch up, raise spec.brokers.groups to keep it, "
        "or set spec.brokers.discardBacklogAfterTimeout to remove it with its messages"
    )
    return DrainDecision(broker_name, DrainStep.STUCK, message, lag)
