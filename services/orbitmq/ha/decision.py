"""The failover decision: given what was observed of a broker group, who should be master.

Pure code, no I/O and no clock: the caller (the local supervisor, the Kubernetes operator)
observes each member's role, epoch, max physical offset and health, passes the time of the
observation as ``now_ms``, and carries out the returned :class:`Decision` (promote one member,
demote others). Keeping the rules here, apart from the processes and pods, lets both callers
fail over identically and lets the rules be tested exhaustively without brokers.

The rules follow RocketMQ's DLedger / Kafka's leader epochs
(docs/architecture.md, "Replication and failover"):

* The **epoch** only grows. The group's current epoch is the highest epoch any member reports.
  A member claiming MASTER under a lower epoch is a returning old master: somebody has been
  master since, and slaves at the newer epoch would refuse to follow it, so it is demoted.
* The **current master** is the live member claiming MASTER under the current epoch. Two such
  members (split brain) are never both kept: the one with the higher max offset stays (ties go
  to the lower name), the other is demoted. There is never more than one master per epoch.
* A master that stops answering for less than ``detection_window_ms`` is a blip: nothing is
  promoted (a restart or a GC pause must not cost a failover). Once it has been unseen for the
  whole window, the best live slave is promoted under ``current epoch + 1``: highest epoch, then
  highest max offset, then lowest name. A slave behind another live slave is never chosen, so
  with ``SYNC_MASTER`` the promoted slave holds every acknowledged message.
* With no live slave nothing is promoted; the decision says so, and the caller retries later.

Demotions are only addressed to members whose health check answers (``alive``): one that does
not answer cannot carry out a role change, and is demoted when it comes back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum


class Role(Enum):
    MASTER = "MASTER"
    SLAVE = "SLAVE"


@dataclass(frozen=True)
class Member:
    """One broker of a broker group as last observed.

    ``alive`` says whether its health check answers now, ``last_heartbeat_ms`` when it was last
    seen healthy (for a member that is alive, the time of that check). A member counts as live
    only if both hold: alive, and seen less than the detection window ago.
    """

    name: str
    """Stable identity in the broker group, e.g. ``broker-a-0`` or a pod name."""
    role: Role
    epoch: int
    """The epoch the member last acted under (>= 0); for a slave, that of the master it follows."""
    max_offset: int
    """Its commit log's max physical offset (>= 0), in bytes."""
    alive: bool
    last_heartbeat_ms: int
    """When it was last seen healthy, in milliseconds on the caller's clock (the one of ``now_ms``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"member name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.role, Role):
            raise ValueError(f"member {self.name!r}: role must be a Role, got {self.role!r}")
        for what, value in (("epoch", self.epoch), ("max_offset", self.max_offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"member {self.name!r}: {what} must be an int >= 0, got {value!r}")


@dataclass(frozen=True)
class Policy:
    """How cautious the decision is."""

    detection_window_ms: int = 6_000
    """A master unseen for less than this is a blip: do nothing. Unseen for at least this: fail over.

    Six seconds is three missed heartbeats at the usual two-second interval: long enough to ride
    out a broker restart on the same disk or a long GC pause, short enough that producers'
    retries (which re-route after a failed send) do not run out first.
    """

    def __post_init__(self) -> None:
        if isinstance(self.detection_window_ms, bool) or not isinstance(self.detection_window_ms, int):
            raise ValueError(f"detection_window_ms must be an int, got {self.detection_window_ms!r}")
        if self.detection_window_ms <= 0:
            raise ValueError(f"detection_window_ms must be > 0, got {self.detection_window_ms}")


@dataclass(frozen=True)
class Decision:
    """What the caller should do to the group; :attr:`nothing` if the group is fine as it is."""

    promote: str | None
    """The member to make master (under :attr:`epoch`), or None."""
    demote: tuple[str, ...]
    """Members to turn into slaves (under :attr:`epoch`), sorted by name."""
    epoch: int
    """The epoch the changes carry: the new epoch for a promotion, else the group's current one.

    A demotion can carry the demoted member's own epoch (two masters under one epoch), so a
    broker accepts a demotion whose epoch is not lower than its own; only a promotion must be newer.
    """
    reason: str
    """One readable sentence, for the caller's log."""

    @property
    def nothing(self) -> bool:
        return self.promote is None and not self.demote


def decide(members: Sequence[Member], now_ms: int, policy: Policy = Policy()) -> Decision:
    """Decide who is master of the broker group ``members``, observed at ``now_ms``.

    ``members`` is every broker of one group (order does not matter); ``now_ms`` is the time of
    the observation on the clock of the members' ``last_heartbeat_ms``. Raises ``ValueError``
    for an empty group or duplicate names.
    """
    _check_group(members)
    epoch = max(m.epoch for m in members)
    claimants = [m for m in members if m.role is Role.MASTER]
    reigning = [m for m in claimants if m.epoch == epoch]
    live_reigning = [m for m in reigning if _is_live(m, now_ms, policy)]
    if live_reigning:
        master = min(live_reigning, key=_master_rank)
        return _keep(master, _reachable(m for m in claimants if m is not master), epoch)

    stale = _reachable(claimants)
    last_seen = max(reigning, key=lambda m: m.last_heartbeat_ms, default=None)
    if last_seen is None:
        gone = f"no member claims MASTER under the current epoch {epoch}"
    else:
        unseen_ms = now_ms - last_seen.last_heartbeat_ms
        if unseen_ms < policy.detection_window_ms:
            reason = (
                f"master {last_seen.name!r} (epoch {epoch}) was last seen {unseen_ms} ms ago,"
                f" less than the {policy.detection_window_ms} ms detection window: waiting"
            )
            return Decision(None, stale, epoch, _with_demotions(reason, stale))
        gone = (
            f"master {last_seen.name!r} (epoch {epoch}) unseen for {unseen_ms} ms"
            f" (detection window {policy.detection_window_ms} ms)"
        )
    return _promote_best(members, now_ms, policy, epoch, gone, stale)


def _check_group(members: Sequence[Member]) -> None:
    if not members:
        raise ValueError("the broker group has no members: nothing to decide on")
    duplicates = sorted(name for name, count in Counter(m.name for m in members).items() if count > 1)
    if duplicates:
        raise ValueError(f"member names must be unique in a broker group; duplicated: {duplicates}")


def _is_live(member: Member, now_ms: int, policy: Policy) -> bool:
    return member.alive and now_ms - member.last_heartbeat_ms < policy.detection_window_ms


def _reachable(members: Iterable[Member]) -> tuple[str, ...]:
    """Names of the members that can carry out a role change (their health check answers)."""
    return tuple(sorted(m.name for m in members if m.alive))


def _master_rank(member: Member) -> tuple[int, str]:
    """Between masters of one epoch, the longer log stays: it holds what the other may lack."""
    return (-member.max_offset, member.name)


def _candidate_rank(member: Member) -> tuple[int, int, str]:
    """The newest epoch first (its log follows the latest master), then the longest log."""
    return (-member.epoch, -member.max_offset, member.name)


def _promote_best(
    members: Sequence[Member], now_ms: int, policy: Policy, epoch: int, gone: str, stale: tuple[str, ...]
) -> Decision:
    """The master is gone for good: promote the best live slave under ``epoch + 1``, if there is one."""
    candidates = [m for m in members if m.role is Role.SLAVE and _is_live(m, now_ms, policy)]
    if not candidates:
        return Decision(None, stale, epoch, _with_demotions(f"{gone}, but no live slave to promote", stale))
    best = min(candidates, key=_candidate_rank)
    reason = (
        f"{gone}: promoting {best.name!r} (epoch {best.epoch}, max offset {best.max_offset})"
        f" under epoch {epoch + 1}"
    )
    return Decision(best.name, stale, epoch + 1, _with_demotions(reason, stale))


def _keep(master: Member, others: tuple[str, ...], epoch: int) -> Decision:
    reason = f"{master.name!r} is master under epoch {epoch}"
    return Decision(None, others, epoch, _with_demotions(reason, others))


def _with_demotions(reason: str, demote: tuple[str, ...]) -> str:
    if not demote:
        return reason
    names = ", ".join(repr(name) for name in demote)
    return f"{reason}; demoting {names}, which also claim{'s' if len(demote) == 1 else ''} MASTER"
