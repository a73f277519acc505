"""The broker's own view of its consumer groups as metrics: members online, joins, leaves and
expiries, the rebalances it pushed, and every lock event per group, read from the real client
registry and lock table (issue 23 item 12: consumers that export no metrics still show up)."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from orbitmq.broker.consumers import ClientRegistry
from orbitmq.broker.locks import LockTable
from orbitmq.broker.metrics import ConsumerGroupCollector
from orbitmq.common.clock import ManualClock
from orbitmq.v1 import broker_pb2

EXPIRY_MS = 1_000
Q0, Q1 = ("Orders", "broker-a", 0), ("Orders", "broker-a", 1)


def _consumer(group: str) -> broker_pb2.ConsumerData:
    return broker_pb2.ConsumerData(group=group)


def _samples(
    clients: ClientRegistry, locks: LockTable
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    registry = CollectorRegistry()
    registry.register(ConsumerGroupCollector("broker-a", clients, locks))
    text = generate_latest(registry).decode()
    return {
        (sample.name, frozenset(sample.labels.items()) - {("broker", "broker-a")}): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _labels(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


async def test_joins_leaves_expiries_and_pushed_rebalances_are_counted_per_group() -> None:
    clock = ManualClock()
    clients = ClientRegistry(clock, EXPIRY_MS)
    locks = LockTable(clock, EXPIRY_MS)
    # Two members of Billing, each with an open session; Ledger's member has none.
    sessions = {c: clients.open_session(c) for c in ("c1", "c2")}
    for client_id, groups in (("c1", ["Billing"]), ("c2", ["Billing", "Ledger"])):
        changed = clients.heartbeat(client_id, "127.0.0.1:1", [], [_consumer(g) for g in groups])
        assert clients.notify_changed(changed) >= 1
    clients.heartbeat("c1", "127.0.0.1:1", [], [_consumer("Billing")])  # no change: nothing counted
    assert clients.notify_changed(clients.unregister("c2", "", "Ledger")) == 0  # Ledger has no one left
    clock.advance(EXPIRY_MS - 1)
    clients.heartbeat("c1", "127.0.0.1:1", [], [_consumer("Billing")])
    clock.advance(1)
    expired, changed = clients.sweep()  # c2 was silent for EXPIRY_MS
    assert expired == ["c2"] and changed == {"Billing"}
    assert clients.notify_changed(changed) == 1
    assert clients.notify_changed(clients.remove_client("c1")) == 0  # c1's session closed

    samples = _samples(clients, locks)
    changes = "orbitmq_consumer_membership_changes_total"
    assert samples[(changes, _labels(group="Billing", change="joined"))] == 2
    assert samples[(changes, _labels(group="Billing", change="expired"))] == 1
    assert samples[(changes, _labels(group="Billing", change="left"))] == 1
    assert samples[(changes, _labels(group="Ledger", change="joined"))] == 1
    assert samples[(changes, _labels(group="Ledger", change="left"))] == 1
    assert samples[(changes, _labels(group="Ledger", change="expired"))] == 0
    # c1 joined (told: c1), c2 joined (told: c1, c2; Ledger: c2), c2 expired (told: c1).
    assert samples[("orbitmq_rebalance_notifications_total", _labels(group="Billing"))] == 4
    assert samples[("orbitmq_rebalance_notifications_total", _labels(group="Ledger"))] == 1
    # Everyone left: the groups stay at 0 rather than vanish.
    assert samples[("orbitmq_consumer_connections", _labels(group="Billing"))] == 0
    assert samples[("orbitmq_consumer_connections", _labels(group="Ledger"))] == 0
    assert [e.consumer_ids_changed.consumer_group for e in _drain(sessions["c1"])] == ["Billing"] * 3


async def test_a_group_has_its_rebalance_series_before_anything_is_pushed() -> None:
    """A member without a session is told nothing: the series is there at 0 all the same, so
    the number of series per group does not depend on who happened to be online."""
    clients = ClientRegistry(ManualClock(), EXPIRY_MS)
    changed = clients.heartbeat("c1", "127.0.0.1:1", [], [_consumer("Quiet")])
    assert clients.notify_changed(changed) == 0
    samples = _samples(clients, LockTable(ManualClock(), EXPIRY_MS))
    assert samples[("orbitmq_rebalance_notifications_total", _labels(group="Quiet"))] == 0


async def test_members_online_per_group() -> None:
    clients = ClientRegistry(ManualClock(), EXPIRY_MS)
    for client_id in ("c1", "c2", "c3"):
        clients.heartbeat(client_id, "127.0.0.1:1", [], [_consumer("Billing")])
    clients.heartbeat("c3", "127.0.0.1:1", ["Checkout"], [_consumer("Ledger")])
    samples = _samples(clients, LockTable(ManualClock(), EXPIRY_MS))
    assert samples[("orbitmq_consumer_connections", _labels(group="Billing"))] == 2
    assert samples[("orbitmq_consumer_connections", _labels(group="Ledger"))] == 1


def test_lock_events_and_owners_per_group() -> None:
    clock = ManualClock()
    locks = LockTable(clock, EXPIRY_MS)
    assert locks.lock_batch("Ledger", "c1", [Q0, Q1]) == [Q0, Q1]
    assert locks.lock_batch("Ledger", "c2", [Q0]) == []  # held by c1
    assert locks.lock_batch("Audit", "c2", [Q0]) == [Q0]  # another group, another lock
    clock.advance(EXPIRY_MS // 2)
    assert locks.lock_batch("Ledger", "c1", [Q0]) == [Q0]  # renewed; Q1 is not
    clock.advance(EXPIRY_MS // 2)
    assert locks.lock_batch("Ledger", "c2", [Q1]) == [Q1]  # c1's lapsed lock: expired, then c2's
    clock.advance(EXPIRY_MS)
    assert locks.sweep() == 3  # Ledger Q0 (c1), Ledger Q1 (c2), Audit Q0 (c2)
    assert locks.lock_batch("Ledger", "c2", [Q0]) == [Q0]

    samples = _samples(ClientRegistry(clock, EXPIRY_MS), locks)
    events = "orbitmq_queue_lock_events_total"
    assert {labels: value for (name, labels), value in samples.items() if name == events} == {
        _labels(group="Ledger", event="acquired"): 4,
        _labels(group="Ledger", event="rejected"): 1,
        _labels(group="Ledger", event="renewed"): 1,
        _labels(group="Ledger", event="expired"): 3,
        _labels(group="Audit", event="acquired"): 1,
        _labels(group="Audit", event="expired"): 1,
        # every event of a group that had any, from 0: its first rejection shows as an increase
        _labels(group="Audit", event="renewed"): 0,
        _labels(group="Audit", event="rejected"): 0,
    }
    owners = {labels for (name, labels), _ in samples.items() if name == "orbitmq_queue_lock_owner"}
    assert owners == {_labels(group="Ledger", topic="Orders", queue="0", client="c2")}


def _drain(session: object) -> list[broker_pb2.ServerEvent]:
    queue: asyncio.Queue[broker_pb2.ServerEvent] = session.events  # type: ignore[attr-defined]
    return [queue.get_nowait() for _ in range(queue.qsize())]
