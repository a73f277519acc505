"""RouteTable: registration, routes, expiry and role changes, with a clock moved by hand."""

from __future__ import annotations

from typing import Any

import pytest

from orbitmq.common.clock import ManualClock
from orbitmq.nameserver.routes import (
    MASTER_ID,
    BrokerData,
    QueueData,
    Registration,
    RouteTable,
    StaleEpochError,
    TopicQueues,
)

MASTER = "10.0.0.1:10911"
SLAVE = "10.0.0.2:10911"
OTHER = "10.0.0.9:10911"
RW = 6
QUEUES = TopicQueues(read_queue_nums=4, write_queue_nums=4, perm=RW)


def _reg(addr: str = MASTER, broker_id: int = MASTER_ID, **overrides: Any) -> Registration:
    values: dict[str, Any] = {
        "cluster": "DefaultCluster",
        "broker_name": "broker-a",
        "broker_addr": addr,
        "broker_id": broker_id,
        "ha_addr": addr.replace("10911", "10912"),
        "topics": {"Orders": QUEUES} if broker_id == MASTER_ID else {},
    }
    return Registration(**{**values, **overrides})


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def table(clock: ManualClock) -> RouteTable:
    return RouteTable(clock)


def test_master_and_slave_make_one_route(table: RouteTable) -> None:
    assert table.register(_reg()) == (MASTER, "10.0.0.1:10912")
    # A slave learns its master (and where to replicate from) from the reply.
    assert table.register(_reg(SLAVE, 1)) == (MASTER, "10.0.0.1:10912")
    route = table.route("Orders")
    assert route is not None
    assert route.queue_datas == (QueueData("broker-a", 4, 4, RW),)
    assert route.broker_datas == (BrokerData("DefaultCluster", "broker-a", {0: MASTER, 1: SLAVE}),)
    assert route.order_topic is False
    assert table.topics() == ["Orders"]


def test_slave_registration_does_not_change_queue_data(table: RouteTable) -> None:
    table.register(_reg())
    table.register(_reg(SLAVE, 1, topics={"Orders": TopicQueues(16, 16, 4), "Other": QUEUES}))
    route = table.route("Orders")
    assert route is not None and route.queue_datas == (QueueData("broker-a", 4, 4, RW),)
    assert table.route("Other") is None


def test_master_registration_replaces_its_queue_data(table: RouteTable) -> None:
    table.register(_reg(topics={"Orders": QUEUES, "Gone": QUEUES}))
    table.register(_reg(topics={"Orders": TopicQueues(8, 8, RW, order=True)}))
    route = table.route("Orders")
    assert route is not None
    assert route.queue_datas == (QueueData("broker-a", 8, 8, RW, order=True),) and route.order_topic
    assert table.topics() == ["Orders"]


def test_two_broker_groups_serve_one_topic(table: RouteTable) -> None:
    table.register(_reg())
    table.register(_reg(OTHER, broker_name="broker-b", topics={"Orders": TopicQueues(2, 2, 4)}))
    route = table.route("Orders")
    assert route is not None
    assert [q.broker_name for q in route.queue_datas] == ["broker-a", "broker-b"]
    assert [dict(d.broker_addrs) for d in route.broker_datas] == [{0: MASTER}, {0: OTHER}]


def test_broker_expires_after_120_s_and_not_before(table: RouteTable, clock: ManualClock) -> None:
    table.register(_reg())
    clock.advance(120_000)
    assert table.expire(clock.now_ms()) == []
    assert table.route("Orders") is not None
    clock.advance(1)
    assert table.route("Orders") is None  # skipped at once, before any scan
    assert table.expire(clock.now_ms()) == [MASTER]
    assert table.topics() == [] and table.cluster_info().broker_addr_table == {}
    assert table.cluster_info().cluster_addr_table == {}


def test_heartbeat_keeps_a_broker_alive(table: RouteTable, clock: ManualClock) -> None:
    table.register(_reg())
    for _ in range(5):
        clock.advance(30_000)
        table.register(_reg())
    assert table.expire(clock.now_ms()) == []
    assert table.cluster_info().live_brokers[MASTER].last_update_ms == clock.now_ms()


def test_a_shorter_heartbeat_timeout_is_honoured_a_longer_one_capped(
    table: RouteTable, clock: ManualClock
) -> None:
    table.register(_reg(heartbeat_timeout_ms=300))
    table.register(_reg(OTHER, broker_name="broker-b", heartbeat_timeout_ms=10_000_000))
    clock.advance(301)
    assert table.expire(clock.now_ms()) == [MASTER]
    clock.advance(120_000)
    assert table.expire(clock.now_ms()) == [OTHER]


def test_master_expiry_drops_queue_data_but_keeps_the_slave(table: RouteTable, clock: ManualClock) -> None:
    table.register(_reg())
    clock.advance(60_000)
    table.register(_reg(SLAVE, 1))
    clock.advance(60_001)
    assert table.expire(clock.now_ms()) == [MASTER]
    assert table.route("Orders") is None
    assert table.topics() == []
    info = table.cluster_info()
    assert info.broker_addr_table == {"broker-a": BrokerData("DefaultCluster", "broker-a", {1: SLAVE})}
    assert list(info.live_brokers) == [SLAVE]
    # The slave keeps heartbeating; that alone does not bring the queues back ...
    assert table.register(_reg(SLAVE, 1)) == ("", "")
    assert table.route("Orders") is None
    # ... a master does.
    table.register(_reg())
    route = table.route("Orders")
    assert route is not None and dict(route.broker_datas[0].broker_addrs) == {0: MASTER, 1: SLAVE}


def test_unknown_topic_has_no_route(table: RouteTable) -> None:
    assert table.route("Nope") is None
    table.register(_reg())
    assert table.route("Nope") is None


def test_delete_topic(table: RouteTable) -> None:
    table.register(_reg(topics={"Orders": QUEUES, "Keep": QUEUES}))
    assert table.delete_topic("Orders") is True
    assert table.delete_topic("Orders") is False
    assert table.route("Orders") is None and table.topics() == ["Keep"]


def test_cluster_info(table: RouteTable, clock: ManualClock) -> None:
    table.register(_reg())
    table.register(_reg(SLAVE, 1))
    table.register(_reg(OTHER, cluster="Other", broker_name="broker-b"))
    info = table.cluster_info()
    assert info.cluster_addr_table == {"DefaultCluster": ["broker-a"], "Other": ["broker-b"]}
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: MASTER, 1: SLAVE}
    assert info.broker_addr_table["broker-b"].cluster == "Other"
    assert sorted(info.live_brokers) == sorted([MASTER, SLAVE, OTHER])
    assert info.live_brokers[SLAVE].broker_id == 1
    assert table.live_keys() == {
        ("DefaultCluster", "broker-a", 0),
        ("DefaultCluster", "broker-a", 1),
        ("Other", "broker-b", 0),
    }


def test_unregister(table: RouteTable) -> None:
    table.register(_reg())
    table.register(_reg(SLAVE, 1))
    assert table.unregister("broker-b", SLAVE) is False  # not its broker name
    assert table.unregister("broker-a", SLAVE) is True
    assert table.cluster_info().broker_addr_table["broker-a"].broker_addrs == {0: MASTER}
    assert table.unregister("broker-a", MASTER) is True
    assert table.cluster_info().broker_addr_table == {} and table.route("Orders") is None


def test_re_registration_under_a_new_broker_id_removes_the_old_id(table: RouteTable) -> None:
    table.register(_reg())
    table.register(_reg(SLAVE, 1))
    table.register(_reg(SLAVE, 2))
    assert table.cluster_info().broker_addr_table["broker-a"].broker_addrs == {0: MASTER, 2: SLAVE}
    # The master comes back as a slave: the group has no master, so no queues to write to.
    table.register(_reg(MASTER, 3))
    assert table.cluster_info().broker_addr_table["broker-a"].broker_addrs == {2: SLAVE, 3: MASTER}
    assert table.route("Orders") is None
    # A slave promoted to master (same address, id 0) brings its topics.
    assert table.register(_reg(SLAVE, MASTER_ID)) == (SLAVE, "10.0.0.2:10912")
    route = table.route("Orders")
    assert route is not None and dict(route.broker_datas[0].broker_addrs) == {0: SLAVE, 3: MASTER}


def test_new_master_with_a_higher_epoch_replaces_the_old_master(table: RouteTable) -> None:
    table.register(_reg(epoch=1))
    table.register(_reg(SLAVE, 1, epoch=1))
    # Failover: the slave is promoted with epoch 2 and registers as master.
    table.register(_reg(SLAVE, MASTER_ID, epoch=2, topics={"Orders": TopicQueues(8, 8, RW)}))
    info = table.cluster_info()
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: SLAVE}
    assert list(info.live_brokers) == [SLAVE]  # the replaced master is forgotten, not expired later
    route = table.route("Orders")
    assert route is not None and route.queue_datas[0].read_queue_nums == 8
    # The old master, still believing it leads, cannot take id 0 back with its older epoch.
    with pytest.raises(StaleEpochError, match=r"epoch 1, older than the live master .* epoch 2"):
        table.register(_reg(MASTER, MASTER_ID, epoch=1))
    assert table.cluster_info().broker_addr_table["broker-a"].broker_addrs == {0: SLAVE}
    # Rejoining as a slave is fine.
    assert table.register(_reg(MASTER, 1, epoch=2)) == (SLAVE, "10.0.0.2:10912")


def test_stale_epoch_master_may_register_once_the_newer_master_expired(
    table: RouteTable, clock: ManualClock
) -> None:
    table.register(_reg(SLAVE, MASTER_ID, epoch=2))
    clock.advance(120_001)
    table.register(_reg(MASTER, MASTER_ID, epoch=1))
    assert table.cluster_info().broker_addr_table["broker-a"].broker_addrs == {0: MASTER}


def test_address_moving_to_another_broker_name_leaves_the_old_one(table: RouteTable) -> None:
    table.register(_reg())
    table.register(_reg(MASTER, broker_name="broker-b"))
    info = table.cluster_info()
    assert list(info.broker_addr_table) == ["broker-b"]
    route = table.route("Orders")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["broker-b"]


def test_negative_broker_id_is_refused(table: RouteTable) -> None:
    with pytest.raises(ValueError, match="broker id -1"):
        table.register(_reg(broker_id=-1))
