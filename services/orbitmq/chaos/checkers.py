"""Checkers: pure verdicts over a :class:`~.history.History`.

Each takes the history and returns a :class:`Check` (a pass/fail, a summary table and the first
violations). :data:`CHECKERS` is the registry ``orbitmq chaos --checker`` chooses from; a later
checker (transactions all-or-nothing, POP through the proxy) is one more entry.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from orbitmq.chaos.history import Delivery, History, Outcome

MAX_LISTED = 20
"""Violations listed per checker; the counts are always complete."""
DUPLICATE_WINDOW_S = 3.5
"""What bounds re-deliveries per fault: a consumer that keeps its queue re-delivers at most what
it had not committed (its persist interval, 0.5 s in the harness), and one that restarts a queue
from a promoted slave's copy of the group's offsets re-delivers what that copy lacked (the
slaves' ``replica_config_interval_ms``, 3 s). So per fault, at most this many seconds of the
consume rate; the duplicates checker reports the bound and fails beyond it."""


@dataclass
class Check:
    name: str
    ok: bool
    summary: dict[str, object]
    violations: list[dict[str, object]] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "ok": self.ok, "summary": self.summary, "violations": self.violations}


def acknowledged(history: History) -> set[str]:
    return {s.message_id for s in history.sends if s.outcome is Outcome.ACKNOWLEDGED}


def check_acknowledged_consumed(history: History) -> Check:
    """Every acknowledged message was delivered to the live consumers and is in the final drain
    (what the brokers kept; a retired group's messages only in the former): at least once. A
    drain that stopped short (``drain_complete`` False) fails the check without calling what it
    did not reach lost."""
    acked = acknowledged(history)
    live = {d.message_id for d in history.deliveries}
    stored = {d.message_id for d in history.drained}
    missing_live = sorted(acked - live)
    missing_stored = sorted(history.stored_expected() - stored)
    violations = [{"message_id": m, "missing_from": "live consumers"} for m in missing_live[:MAX_LISTED]]
    violations += [{"message_id": m, "missing_from": "final drain"} for m in missing_stored[:MAX_LISTED]]
    return Check(
        "acknowledged_consumed",
        not missing_live and not missing_stored and history.drain_complete,
        {
            "acknowledged": len(acked),
            "lost_live": len(missing_live),
            "lost_stored": len(missing_stored) if history.drain_complete else None,
            "drain_complete": history.drain_complete,
            "unread_by_drain": len(missing_stored),
        },
        violations,
    )


def check_order(history: History) -> Check:
    """Per consumer group and sharding key (one queue), the first deliveries come in send order.

    A key's producer sends one message at a time, numbered; a re-delivery after a rebalance or a
    failover rewinds (a duplicate, counted elsewhere), but a message delivered for the first time
    after a later one of its key is a reordering."""
    streams: dict[tuple[str, str], list[Delivery]] = defaultdict(list)
    for delivery in history.deliveries:
        if delivery.sharding_key is not None and delivery.seq is not None:
            streams[(delivery.group, delivery.sharding_key)].append(delivery)
    violations: list[dict[str, object]] = []
    checked = 0
    for (group, key), deliveries in sorted(streams.items()):
        seen: set[int] = set()
        highest = -1
        for delivery in deliveries:
            assert delivery.seq is not None
            if delivery.seq in seen:
                continue
            seen.add(delivery.seq)
            checked += 1
            if delivery.seq < highest:
                violations.append(
                    {
                        "group": group,
                        "sharding_key": key,
                        "seq": delivery.seq,
                        "after": highest,
                        "queue_id": delivery.queue_id,
                        "queue_offset": delivery.queue_offset,
                    }
                )
            highest = max(highest, delivery.seq)
    return Check(
        "order",
        not violations,
        {"keys": len(streams), "checked": checked, "violations": len(violations)},
        violations[:MAX_LISTED],
    )


def check_duplicates(history: History) -> Check:
    """Deliveries of a message already delivered, per group, in two kinds: re-deliveries of the
    same stored record (same queue and offset: a rebalance or failover rewound the group), which
    fail the check beyond :data:`DUPLICATE_WINDOW_S` of consumption per fault, and deliveries of
    a second stored copy (a resend after an unknown outcome; ``stored_twice`` counts them in the
    final read), which only the producer's resends bound."""
    per_group: dict[str, list[Delivery]] = defaultdict(list)
    for delivery in history.deliveries:
        per_group[delivery.group].append(delivery)
    times = [d.at for d in history.deliveries]
    span = max(times, default=0.0) - min(times, default=0.0)
    table: dict[str, object] = {}
    ok = True
    for group, deliveries in sorted(per_group.items()):
        unique = len({d.message_id for d in deliveries})
        records = len({(d.message_id, d.queue_id, d.queue_offset) for d in deliveries})
        rate = unique / span if span > 0 else 0.0
        bound = int(len(history.faults) * DUPLICATE_WINDOW_S * rate) + 1
        redelivered = len(deliveries) - records
        ok &= redelivered <= bound
        table[group] = {
            "deliveries": len(deliveries),
            "unique": unique,
            "redelivered": redelivered,
            "bound": bound,
            "second_copies": records - unique,
        }
    stored = [d.message_id for d in history.drained]
    table["stored_twice"] = len(stored) - len(set(stored))
    return Check("duplicates", ok, table)


def check_unacknowledged(history: History) -> Check:
    """Sends never acknowledged, reported as such (found stored or not), never as loss; fails
    only when a message whose every attempt the broker refused outright was stored anyway."""
    acked = acknowledged(history)
    stored = {d.message_id for d in history.drained}
    outcomes: dict[str, set[Outcome]] = defaultdict(set)
    for send in history.sends:
        if send.message_id not in acked:
            outcomes[send.message_id].add(send.outcome)
    summary: dict[str, object] = {}
    for outcome in (Outcome.UNKNOWN, Outcome.FAILED):
        ids = {m for m, seen in outcomes.items() if outcome in seen}
        if ids:
            summary[outcome.value] = {"messages": len(ids), "stored_anyway": len(ids & stored)}
    refused_but_stored = sorted(m for m, seen in outcomes.items() if seen == {Outcome.FAILED} and m in stored)
    return Check(
        "unacknowledged",
        not refused_but_stored,
        summary,
        [{"message_id": m, "refused_but_stored": True} for m in refused_but_stored[:MAX_LISTED]],
    )


GATEWAY_SCOPES: dict[str, tuple[set[str] | None, str]] = {
    "proxy": (None, "ChaosPop"),
    "sidecar": ({"sidecar"}, "ChaosSidecar"),
}
"""A gateway fault's recovery is its own clients': writes through it (the sidecar app's sends;
the proxy's clients only read, so any write) and deliveries to its group (the POP consumers',
the sidecar app's) of what that group reads (:data:`GATEWAY_READS`)."""
GATEWAY_READS = {"sync", "batch", "sidecar"}
"""The workloads of the topic the POP group and the sidecar's group read."""


def recovery(history: History) -> list[dict[str, object]]:
    """Per fault: seconds from the fault to the first acknowledged write started after it, and to
    the moment every message acknowledged from the fault to then had been delivered (consumers
    caught up). Earlier acknowledgements are the loss checker's: one message never delivered
    must not leave every later fault without a recovery time. A fault of the proxy or the
    sidecar counts its own clients' writes and deliveries (:data:`GATEWAY_SCOPES`), a fault of
    one broker group among several (``FaultRecord.group``) that group's writes."""
    first_delivery: dict[tuple[str | None, str], float] = {}
    for delivery in history.deliveries:
        first_delivery.setdefault((None, delivery.message_id), delivery.at)
        first_delivery.setdefault((delivery.group, delivery.message_id), delivery.at)
    acked_sends = sorted(
        (s for s in history.sends if s.outcome is Outcome.ACKNOWLEDGED), key=lambda s: s.ended
    )
    rows: list[dict[str, object]] = []
    for fault in history.faults:
        writers, group = GATEWAY_SCOPES.get(fault.target, (None, None))
        writes = next(
            (
                s.ended
                for s in acked_sends
                if s.started >= fault.injected_at
                and (writers is None or s.workload in writers)
                and (not fault.group or s.broker == fault.group)
            ),
            None,
        )
        caught_up: float | None = None
        if writes is not None:  # what was acknowledged from the fault to the recovered write
            due = [
                first_delivery.get((group, s.message_id))
                for s in acked_sends
                if fault.injected_at <= s.ended <= writes and (group is None or s.workload in GATEWAY_READS)
            ]
            if due and all(at is not None for at in due):
                caught_up = max(fault.injected_at, *(at for at in due if at is not None))
        rows.append(
            {
                "round": fault.round,
                "fault": fault.fault,
                "target": fault.target,
                "writes_s": None if writes is None else round(writes - fault.injected_at, 3),
                "caught_up_s": None if caught_up is None else round(caught_up - fault.injected_at, 3),
            }
        )
    return rows


def check_recovery(history: History) -> Check:
    """Writes were acknowledged again, and consumers caught up, after every fault."""
    rows = recovery(history)
    stuck = [r for r in rows if r["writes_s"] is None or r["caught_up_s"] is None]
    writes = sorted(float(r["writes_s"]) for r in rows if r["writes_s"] is not None)  # type: ignore[arg-type]
    caught = sorted(float(r["caught_up_s"]) for r in rows if r["caught_up_s"] is not None)  # type: ignore[arg-type]
    return Check(
        "recovery",
        not stuck,
        {
            "faults": len(rows),
            "writes_p99_s": _p99(writes),
            "writes_max_s": max(writes, default=None),
            "caught_up_p99_s": _p99(caught),
            "caught_up_max_s": max(caught, default=None),
            "per_fault": rows,
        },
        [{"never_recovered": r} for r in stuck[:MAX_LISTED]],
    )


def missing_per_group(history: History) -> dict[str, set[str]]:
    """Per live group, the acknowledged messages it has not been delivered, of every workload
    it was delivered any message of (a group reads whole topics: the POP group and the sidecar's
    read what the push group on the same topic reads, and each must get all of it)."""
    workload_of = {s.message_id: s.workload for s in history.sends}
    acked_by_workload: dict[str, set[str]] = defaultdict(set)
    for send in history.sends:
        if send.outcome is Outcome.ACKNOWLEDGED:
            acked_by_workload[send.workload].add(send.message_id)
    delivered: dict[str, set[str]] = defaultdict(set)
    for delivery in history.deliveries:
        delivered[delivery.group].add(delivery.message_id)
    missing: dict[str, set[str]] = {}
    for group, ids in delivered.items():
        workloads = {workload_of[m] for m in ids if m in workload_of}
        expected = set().union(*(acked_by_workload[w] for w in workloads))
        missing[group] = expected - ids
    return missing


def check_groups(history: History) -> Check:
    """Every live group got every acknowledged message of the workloads it reads (the loss
    checker asks only that some group did)."""
    missing = missing_per_group(history)
    violations = [
        {"group": group, "message_id": m}
        for group, ids in sorted(missing.items())
        for m in sorted(ids)[:MAX_LISTED]
    ]
    return Check(
        "groups",
        not any(missing.values()),
        {group: {"missing": len(ids)} for group, ids in sorted(missing.items())},
        violations[:MAX_LISTED],
    )


def check_transactions(history: History) -> Check:
    """All or nothing: every transaction decided to commit whose half message was acknowledged
    was delivered live and is in the final read (whether its EndTransaction arrived or a
    check-back settled it), and no transaction decided to roll back was ever delivered or
    stored. Counts the check-backs: ``ends_lost`` are transactions whose local transaction
    answered definitely and were checked back anyway (the end lost in a fault, or late). A
    final read that stopped short (``drain_complete`` False) fails the check without calling
    what it did not reach missing from it."""
    txs = history.transactions
    live = {d.message_id for d in history.deliveries}
    drained = [d for d in history.drained if d.message_id.startswith("t")]
    stored = {d.message_id for d in drained}
    committed = {t.message_id for t in txs if t.commit and t.half == Outcome.ACKNOWLEDGED.value}
    rolled_back = {t.message_id for t in txs if not t.commit}
    missing_live = sorted(committed - live)
    missing_stored = sorted(committed - stored) if history.drain_complete else []
    visible_rollbacks = sorted(rolled_back & (live | stored))
    violations: list[dict[str, object]] = [
        {"message_id": m, "rolled_back_but": "delivered"} for m in visible_rollbacks
    ]
    violations += [{"message_id": m, "committed_but_missing_from": "live consumers"} for m in missing_live]
    violations += [{"message_id": m, "committed_but_missing_from": "final drain"} for m in missing_stored]
    copies = {(d.message_id, d.queue_id, d.queue_offset) for d in drained}
    return Check(
        "transactions",
        not violations and history.drain_complete,
        {
            "transactions": len(txs),
            "committed": len(committed),
            "rolled_back": len(rolled_back),
            "local_unknown": sum(t.local == "unknown" for t in txs),
            "local_skipped": sum(t.local == "skipped" for t in txs),
            "checked_back": sum(t.checks > 0 for t in txs),
            "ends_lost": sum(t.checks > 0 and t.local != "unknown" for t in txs),
            "half_not_acknowledged": sum(t.half != Outcome.ACKNOWLEDGED.value for t in txs),
            "committed_missing_live": len(missing_live),
            "committed_missing_stored": len(missing_stored) if history.drain_complete else None,
            "rolled_back_visible": len(visible_rollbacks),
            "stored_twice": len(copies) - len(stored),
        },
        violations[:MAX_LISTED],
    )


def _p99(values: list[float]) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(0.99 * len(values)))]


CHECKERS: dict[str, Callable[[History], Check]] = {
    "acknowledged_consumed": check_acknowledged_consumed,
    "order": check_order,
    "duplicates": check_duplicates,
    "unacknowledged": check_unacknowledged,
    "recovery": check_recovery,
    "transactions": check_transactions,
    "groups": check_groups,
}
