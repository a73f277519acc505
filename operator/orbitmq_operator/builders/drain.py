"""The drain of a surplus broker group as a pure state machine.

Scaling ``spec.brokers.groups`` down removes the highest groups, but a group's StatefulSet may
only go once nobody needs its messages. The reconciler wipes the group's write permission on
every name server (producers stop sending there, consumers keep reading), measures each
consumer group's lag on it, and asks :func:`decide_drain` what to do:

* ``WAIT``: backlog left, or the backlog cannot be read, or the wipe is younger than
  ``grace_s`` (producers refresh routes every 30 s: until then a producer may still send one
  last message there, which an empty backlog read too early would lose);
* the backlog of a consumer group with no consumer online on the draining group for
  ``offline_grace_s`` (``spec.brokers.drainOfflineGroupGraceS``) is not waited on: nobody is
  there to consume it (a ``helm test`` group, an application retired long ago), as Strimzi's
  drain waits on active consumers only. The decision names those groups (status and Event);
* ``REMOVE``: nothing left to consume, past the grace period — delete the group's objects;
* ``STUCK``: ``timeout_s`` passed with backlog left (or unreadable): nothing is deleted and the
  status says which consumer groups lag — unless the spec discards the backlog on purpose.

The decision keeps no state itself: the drain's start time and since when each lagging group
has had no consumer online live in ``status.drains`` (:func:`track_offline` keeps the latter).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum

ROUTE_REFRESH_GRACE_S = 35.0
"""A wipe this old has reached every producer (their route refresh is 30 s by default)."""
OFFLINE_GROUP_GRACE_S = 300.0
"""``spec.brokers.drainOfflineGroupGraceS``'s default: longer than a consumer's restart or a
rolling update of its Deployment, so a group only between two pods is still waited on."""
DELAYED_GROUP = "(delayed)"
"""The pseudo group under which delayed messages waiting on the group count
(``orbitmq.client.admin.DELAYED``): no consumer ever comes for it, and it is never ignored."""

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
    offline_grace_s: float = OFFLINE_GROUP_GRACE_S


@dataclass(frozen=True)
class DrainDecision:
    broker_name: str
    step: DrainStep
    message: str
    lag: int = 0
    """Total messages left (0 also when unknown), ignored groups' included."""
    ignored: tuple[str, ...] = ()
    """Consumer groups whose backlog is not waited on (no consumer online for the grace)."""


def describe_backlog(backlog: Backlog, limit: int = 5) -> str:
    """``Billing/Orders 12, Audit/Orders 3`` (largest first, at most ``limit`` entries)."""
    top = sorted(backlog.items(), key=lambda item: (-item[1], item[0]))
    text = ", ".join(f"{group}/{topic} {lag}" for (group, topic), lag in top[:limit])
    return text + (f" and {len(top) - limit} more" if len(top) > limit else "")


def track_offline(
    backlog: Backlog | None, online: Collection[str], previous: Mapping[str, str], stamp: str
) -> dict[str, str]:
    """Since when each lagging consumer group has had no consumer online: ``previous``'s time
    for a group still offline, ``stamp`` (now) for one newly so. A group with a consumer online
    again, or with nothing left, drops out (its clock starts over next time). An unreadable
    backlog keeps ``previous`` as it is."""
    if backlog is None:
        return dict(previous)
    lagging = {group for group, _ in backlog if group != DELAYED_GROUP}
    return {group: previous.get(group, stamp) for group in sorted(lagging - set(online))}


def ignored_groups(offline_s: Mapping[str, float], policy: DrainPolicy) -> tuple[str, ...]:
    """The groups offline for at least ``policy.offline_grace_s`` (never the delayed pseudo group)."""
    return tuple(
        sorted(g for g, s in offline_s.items() if s >= policy.offline_grace_s and g != DELAYED_GROUP)
    )


def decide_drain(
    broker_name: str,
    elapsed_s: float,
    backlog: Backlog | None,
    policy: DrainPolicy,
    problem: str = "",
    offline_s: Mapping[str, float] | None = None,
) -> DrainDecision:
    """What to do with a draining group whose write permission was wiped ``elapsed_s`` ago.

    Args:
        backlog: lag by (consumer group, topic) on the group; None when it could not be read
            (``problem`` says why: the master down, a name server not answering).
        policy: how long to wait, and whether to delete anyway after that.
        offline_s: seconds each lagging consumer group has had no consumer online (absent:
            online); a group offline for ``policy.offline_grace_s`` is not waited on.
    """
    ignored = ignored_groups(offline_s or {}, policy) if backlog else ()
    waited = {key: lag for key, lag in (backlog or {}).items() if key[0] not in ignored}
    decision = _decide(broker_name, elapsed_s, None if backlog is None else waited, policy, problem)
    if not ignored or backlog is None:
        return decision
    left = {key: lag for key, lag in backlog.items() if key[0] in ignored}
    note = (
        f"; not waiting on {', '.join(ignored)} (no consumer online for "
        f"spec.brokers.drainOfflineGroupGraceS={policy.offline_grace_s:.0f} s): "
        f"{sum(left.values())} message(s) left there: {describe_backlog(left)}"
    )
    if decision.step is DrainStep.REMOVE:
        note += ", lost with the group"
    lag = decision.lag + sum(left.values())
    return DrainDecision(broker_name, decision.step, decision.message + note, lag, ignored)


def _decide(
    broker_name: str, elapsed_s: float, backlog: Backlog | None, policy: DrainPolicy, problem: str
) -> DrainDecision:
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
