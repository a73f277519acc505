"""The planned switchover decision: hand mastership to an in-sync slave while the master is healthy.

A failover (:func:`orbitmq.ha.decision.decide`) reacts to a master that is gone; a switchover is
asked for (a rolling update is about to restart the master's pod) while the master still runs, so
it can be done without losing or refusing anything: the master stops taking writes first, the
chosen slave copies the rest of its log, and only then is the slave promoted. This module only
says *whom* to promote; :meth:`orbitmq.ha.group.BrokerGroupFailover.switchover` does it.

Pure code, same inputs as :func:`~orbitmq.ha.decision.decide`. The chosen slave must be
*in sync*: live, following the current epoch (its log is the master's lineage, nothing to cut)
and at most ``max_lag_bytes`` behind the master's max offset. A slave further behind would make
the write pause as long as its catch-up, and one of an older epoch may hold a diverging tail, so
neither is chosen: the switchover is refused with a reason and the caller waits and asks again.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from orbitmq.ha.decision import Decision, Member, Policy, Role, _check_group, _is_live

DEFAULT_POLICY = Policy()


def switchover(
    members: Sequence[Member],
    now_ms: int,
    policy: Policy = DEFAULT_POLICY,
    max_lag_bytes: int = 0,
    streaming: Collection[str] | None = None,
) -> Decision:
    """Plan moving mastership of ``members`` to an in-sync slave under ``current epoch + 1``.

    The returned decision promotes that slave and demotes the master, both under the new epoch;
    it is :attr:`~orbitmq.ha.decision.Decision.nothing` (with the reason) when there is no single
    live master of the current epoch or no in-sync slave. Among in-sync slaves the longest log
    wins, then the lowest name. ``streaming``, when given, names the slaves the master reports
    connected: only those can catch up once the master is demoted (a slave not streaming then
    would look for a master and find none), so no other is chosen. Raises ``ValueError`` for an
    empty group, duplicate names or a negative ``max_lag_bytes``.
    """
    _check_group(members)
    if isinstance(max_lag_bytes, bool) or not isinstance(max_lag_bytes, int) or max_lag_bytes < 0:
        raise ValueError(f"max_lag_bytes must be an int >= 0, got {max_lag_bytes!r}")
    epoch = max(m.epoch for m in members)
    masters = [
        m for m in members if m.role is Role.MASTER and m.epoch == epoch and _is_live(m, now_ms, policy)
    ]
    if len(masters) != 1:
        found = ", ".join(repr(m.name) for m in masters) or "none"
        return _refuse(
            epoch, f"no single live master under epoch {epoch} to switch over from (found: {found})"
        )
    (master,) = masters
    slaves = [m for m in members if m.role is Role.SLAVE]
    in_sync = [
        m
        for m in slaves
        if _is_live(m, now_ms, policy)
        and (streaming is None or m.name in streaming)
        and m.epoch == epoch
        and master.max_offset - m.max_offset <= max_lag_bytes
    ]
    if not in_sync:
        seen = "; ".join(
            _why_not(m, master, now_ms, policy, streaming) for m in sorted(slaves, key=lambda m: m.name)
        )
        return _refuse(
            epoch,
            f"master {master.name!r} (epoch {epoch}, max offset {master.max_offset}) has no in-sync slave"
            f" (lag allowed {max_lag_bytes} bytes): {seen or 'it has no slave'}",
        )
    chosen = min(in_sync, key=lambda m: (-m.max_offset, m.name))
    reason = (
        f"switching over from {master.name!r} to in-sync slave {chosen.name!r}"
        f" (max offset {chosen.max_offset} of {master.max_offset}) under epoch {epoch + 1}"
    )
    return Decision(chosen.name, (master.name,), epoch + 1, reason)


def _refuse(epoch: int, reason: str) -> Decision:
    return Decision(None, (), epoch, reason)


def _why_not(
    slave: Member, master: Member, now_ms: int, policy: Policy, streaming: Collection[str] | None
) -> str:
    if not _is_live(slave, now_ms, policy):
        return f"{slave.name!r} is not live"
    if streaming is not None and slave.name not in streaming:
        return f"{slave.name!r} is not replicating from it"
    if slave.epoch != master.epoch:
        return f"{slave.name!r} follows epoch {slave.epoch}, not {master.epoch}"
    return f"{slave.name!r} is {master.max_offset - slave.max_offset} bytes behind"
