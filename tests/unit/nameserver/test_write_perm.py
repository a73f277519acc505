"""Wiping a broker group's write permission (RocketMQ's wipeWritePerm): routes lose WRITE for
that group only, and keep losing it when the master re-registers with its own perm."""

from __future__ import annotations

from orbitmq.common.clock import ManualClock
from orbitmq.nameserver.routes import MASTER_ID, Registration, RouteTable, TopicQueues

RW = 6
READ_ONLY = 4


def _register(table: RouteTable, broker_name: str, addr: str, topics: dict[str, int]) -> None:
    table.register(
        Registration(
            cluster="c",
            broker_name=broker_name,
            broker_addr=addr,
            broker_id=MASTER_ID,
            topics={t: TopicQueues(4, 4, perm) for t, perm in topics.items()},
        )
    )


def _perms(table: RouteTable, topic: str) -> dict[str, int]:
    route = table.route(topic)
    assert route is not None
    return {q.broker_name: q.perm for q in route.queue_datas}


def test_wipe_masks_write_and_survives_reregistration() -> None:
    table = RouteTable(ManualClock())
    _register(table, "broker-a", "10.0.0.1:10911", {"Orders": RW})
    _register(table, "broker-b", "10.0.0.2:10911", {"Orders": RW, "Audit": READ_ONLY, "Logs": RW})

    assert table.wipe_write_perm("broker-b") == 2, "Audit was not writable: not counted"
    assert _perms(table, "Orders") == {"broker-a": RW, "broker-b": READ_ONLY}
    assert table.wipe_write_perm("broker-b") == 0, "already wiped"

    _register(table, "broker-b", "10.0.0.2:10911", {"Orders": RW, "Audit": READ_ONLY, "Logs": RW})
    assert _perms(table, "Orders")["broker-b"] == READ_ONLY, "the heartbeat's perm 6 stays masked"
    assert table.write_wiped() == {"broker-b"}

    assert table.add_write_perm("broker-b") == 2
    assert _perms(table, "Orders") == {"broker-a": RW, "broker-b": RW}
    assert _perms(table, "Audit") == {"broker-b": READ_ONLY}, "restored to what the broker registers"
    assert table.add_write_perm("broker-b") == 0


def test_wipe_of_an_unregistered_name_holds_when_it_registers() -> None:
    table = RouteTable(ManualClock())
    assert table.wipe_write_perm("broker-c") == 0
    _register(table, "broker-c", "10.0.0.3:10911", {"Orders": RW})
    assert _perms(table, "Orders") == {"broker-c": READ_ONLY}
