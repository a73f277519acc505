from __future__ import annotations

import logging
import random

import pytest

from orbitmq.client.allocation import (
    STRATEGIES,
    AllocateAveragely,
    AllocateByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AllocateMachineRoomNearby,
    AllocateStrategy,
    md5_hash,
    room_of_broker_name,
    split_broker_name,
)
from orbitmq.client.queue import MessageQueue
from orbitmq.v1 import common_pb2

GROUP = "GID_test"


def queues(n: int, topic: str = "TopicTest", broker: str = "broker-a") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def clients(n: int) -> list[str]:
    return [f"client-{i}" for i in range(n)]


def ids(allocated: list[MessageQueue]) -> list[int]:
    return [q.queue_id for q in allocated]


def allocate_all(strategy: AllocateStrategy, qs: list[MessageQueue], cs: list[str]) -> dict[str, list]:
    return {c: strategy.allocate(GROUP, c, qs, cs) for c in cs}


# ------------------------------------------------------------------------------- message queue


def test_message_queue_sorts_by_topic_then_broker_then_queue_id() -> None:
    unsorted = [
        MessageQueue("B", "broker-a", 0),
        MessageQueue("A", "broker-b", 0),
        MessageQueue("A", "broker-a", 10),
        MessageQueue("A", "broker-a", 2),
    ]
    assert sorted(unsorted) == [
        MessageQueue("A", "broker-a", 2),
        MessageQueue("A", "broker-a", 10),
        MessageQueue("A", "broker-b", 0),
        MessageQueue("B", "broker-a", 0),
    ]


def test_message_queue_proto_round_trip_and_validation() -> None:
    mq = MessageQueue("TopicTest", "broker-a", 3)
    proto = mq.to_proto()
    assert isinstance(proto, common_pb2.MessageQueue)
    assert (proto.topic, proto.broker_name, proto.queue_id) == ("TopicTest", "broker-a", 3)
    assert MessageQueue.from_proto(proto) == mq
    with pytest.raises(ValueError, match="broker name"):
        MessageQueue.from_proto(common_pb2.MessageQueue(topic="T", queue_id=1))
    with pytest.raises(ValueError, match="-1"):
        MessageQueue("T", "b", -1)


# --------------------------------------------------------------------------------- tables


SHARES = [
    # (strategy, queues, clients, expected queue ids per client)
    (AllocateAveragely(), 8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
    (AllocateAveragely(), 16, 3, [list(range(0, 6)), list(range(6, 11)), list(range(11, 16))]),
    (AllocateAveragely(), 3, 3, [[0], [1], [2]]),
    (AllocateAveragely(), 4, 6, [[0], [1], [2], [3], [], []]),
    (AllocateAveragely(), 1, 1, [[0]]),
    (AllocateByCircle(), 8, 3, [[0, 3, 6], [1, 4, 7], [2, 5]]),
    (
        AllocateByCircle(),
        16,
        3,
        [[0, 3, 6, 9, 12, 15], [1, 4, 7, 10, 13], [2, 5, 8, 11, 14]],
    ),
    (AllocateByCircle(), 4, 6, [[0], [1], [2], [3], [], []]),
]


@pytest.mark.parametrize(("strategy", "n_queues", "n_clients", "expected"), SHARES)
def test_documented_shares(strategy: AllocateStrategy, n_queues: int, n_clients: int, expected: list) -> None:
    qs, cs = queues(n_queues), clients(n_clients)
    assert [ids(strategy.allocate(GROUP, c, qs, cs)) for c in cs] == expected


@pytest.mark.parametrize("strategy", [AllocateAveragely(), AllocateByCircle(), AllocateConsistentHash()])
def test_input_order_and_duplicates_do_not_matter(strategy: AllocateStrategy) -> None:
    qs = queues(4, broker="broker-a") + queues(4, broker="broker-b")
    cs = clients(3)
    expected = {c: strategy.allocate(GROUP, c, qs, cs) for c in cs}
    rng = random.Random(7)
    for _ in range(20):
        shuffled_qs, shuffled_cs = qs + qs[:3], cs + cs[:1]
        rng.shuffle(shuffled_qs)
        rng.shuffle(shuffled_cs)
        for c in cs:
            assert strategy.allocate(GROUP, c, shuffled_qs, shuffled_cs) == expected[c]


def test_sorting_is_by_client_id_not_arrival_order() -> None:
    # "client-b" sorts before "client-c" whatever order the broker lists them in.
    qs = queues(4)
    assert ids(AllocateAveragely().allocate(GROUP, "client-b", qs, ["client-c", "client-b"])) == [0, 1]
    assert ids(AllocateAveragely().allocate(GROUP, "client-c", qs, ["client-c", "client-b"])) == [2, 3]


def test_result_is_sorted_across_brokers() -> None:
    qs = [
        MessageQueue("T", "broker-b", 1),
        MessageQueue("T", "broker-a", 1),
        MessageQueue("T", "broker-a", 0),
    ]
    assert AllocateAveragely().allocate(GROUP, "c", qs, ["c"]) == sorted(qs)


# ----------------------------------------------------------------------------- properties


@pytest.mark.parametrize(
    "strategy", [AllocateAveragely(), AllocateByCircle(), AllocateConsistentHash()], ids=lambda s: s.name
)
def test_every_queue_goes_to_exactly_one_client(strategy: AllocateStrategy) -> None:
    for n_queues in range(1, 21):
        for n_clients in range(1, 9):
            qs, cs = queues(n_queues), clients(n_clients)
            shares = allocate_all(strategy, qs, cs)
            flat = [q for share in shares.values() for q in share]
            assert sorted(flat) == qs, (n_queues, n_clients)  # union is all, and no queue twice


@pytest.mark.parametrize("strategy", [AllocateAveragely(), AllocateByCircle()], ids=lambda s: s.name)
def test_even_strategies_differ_by_at_most_one(strategy: AllocateStrategy) -> None:
    for n_queues in range(1, 21):
        for n_clients in range(1, 9):
            sizes = [len(s) for s in allocate_all(strategy, queues(n_queues), clients(n_clients)).values()]
            assert max(sizes) - min(sizes) <= 1
            # the first consumers in sorted order get the extra queue; beyond the count get nothing
            assert sizes == sorted(sizes, reverse=True)


def test_client_not_in_list_gets_nothing_and_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="orbitmq.client.allocation"):
        assert AllocateAveragely().allocate(GROUP, "stranger", queues(4), clients(2)) == []
    assert "stranger" in caplog.text and GROUP in caplog.text


@pytest.mark.parametrize("strategy_name", sorted(STRATEGIES))
def test_no_queues_means_nothing(strategy_name: str) -> None:
    strategy = _build(strategy_name)
    assert strategy.allocate(GROUP, "client-0", [], clients(2)) == []


@pytest.mark.parametrize(
    ("group", "client", "message"),
    [("", "c", "consumer group"), (GROUP, "", "current client"), (None, "c", "None")],
)
def test_invalid_arguments_name_the_value(group: object, client: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AllocateAveragely().allocate(group, client, queues(2), ["c"])  # type: ignore[arg-type]


def test_empty_client_id_in_list_is_rejected() -> None:
    with pytest.raises(ValueError, match="''"):
        AllocateByCircle().allocate(GROUP, "c", queues(2), ["c", ""])


# -------------------------------------------------------------------------- consistent hash


def test_md5_hash_is_stable() -> None:
    # RocketMQ's MD5Hash: the first four digest bytes, big endian. md5("a") = 0cc175b9...
    assert md5_hash("a") == 0x0CC175B9
    assert md5_hash("MessageQueue [topic=T, brokerName=b, queueId=0]") == md5_hash(
        str(MessageQueue("T", "b", 0))
    )


def test_consistent_hash_adding_a_client_only_moves_queues_to_it() -> None:
    strategy = AllocateConsistentHash()
    qs = queues(16, broker="broker-a") + queues(16, broker="broker-b")
    before_clients = ["10.0.0.1@1", "10.0.0.2@1", "10.0.0.3@1"]
    newcomer = "10.0.0.4@1"
    before = allocate_all(strategy, qs, before_clients)
    after = allocate_all(strategy, qs, [*before_clients, newcomer])
    owner_before = {q: c for c, share in before.items() for q in share}
    owner_after = {q: c for c, share in after.items() for q in share}
    moved = {q for q in qs if owner_before[q] != owner_after[q]}
    assert moved, "the new client should take some queues"
    assert all(owner_after[q] == newcomer for q in moved)
    assert moved == set(after[newcomer])


def test_consistent_hash_removing_a_client_only_moves_its_queues() -> None:
    strategy = AllocateConsistentHash(virtual_nodes=50)
    qs = queues(40)
    cs = clients(5)
    before = allocate_all(strategy, qs, cs)
    after = allocate_all(strategy, qs, cs[1:])
    for c in cs[1:]:
        assert set(before[c]) <= set(after[c])


def test_consistent_hash_uses_the_given_hash() -> None:
    # A hash that puts every virtual node of "a" at 100 and of "b" at 200; queues hash to 150.
    points = {"a": 100, "b": 200}
    strategy = AllocateConsistentHash(virtual_nodes=2, hash=lambda key: points.get(key[0], 150))
    assert strategy.allocate(GROUP, "b", queues(3), ["a", "b"]) == queues(3)
    assert strategy.allocate(GROUP, "a", queues(3), ["a", "b"]) == []


@pytest.mark.parametrize("virtual_nodes", [0, -1, True, 1.5])
def test_consistent_hash_rejects_bad_virtual_nodes(virtual_nodes: object) -> None:
    with pytest.raises(ValueError, match="virtual_nodes"):
        AllocateConsistentHash(virtual_nodes=virtual_nodes)  # type: ignore[arg-type]


# -------------------------------------------------------------------------------- by config


def test_by_config_returns_the_configured_queues_of_this_topic() -> None:
    mine = [MessageQueue("TopicTest", "broker-a", 5), MessageQueue("TopicTest", "broker-a", 1)]
    other_topic = MessageQueue("Other", "broker-a", 0)
    strategy = AllocateByConfig([*mine, other_topic])
    assert strategy.allocate(GROUP, "c", queues(8), ["c", "d"]) == sorted(mine)
    # the configured list does not depend on the other clients
    assert strategy.allocate(GROUP, "c", queues(8), ["c"]) == sorted(mine)
    # a configured queue missing from the route is not allocated
    assert strategy.allocate(GROUP, "c", queues(3), ["c"]) == [MessageQueue("TopicTest", "broker-a", 1)]


# ------------------------------------------------------------------------------ machine rooms


def room_queues() -> list[MessageQueue]:
    return [
        MessageQueue("T", broker, i)
        for broker in ("hz@broker-a", "hz@broker-b", "sh@broker-c", "bj@broker-d", "broker-e")
        for i in range(4)
    ]


def test_split_broker_name() -> None:
    assert split_broker_name("hz@broker-a") == ("hz", "broker-a")
    assert split_broker_name("broker-a") == (None, "broker-a")
    assert split_broker_name("@broker-a") == (None, "@broker-a")
    assert room_of_broker_name("sh@b") == "sh"
    with pytest.raises(ValueError, match="'broker-a'"):
        room_of_broker_name("broker-a")


def test_by_machine_room_takes_only_its_rooms_then_averagely() -> None:
    strategy = AllocateByMachineRoom({"hz"})
    cs = ["c1", "c2", "c3"]
    shares = allocate_all(strategy, room_queues(), cs)
    hz = [q for q in room_queues() if q.broker_name.startswith("hz@")]
    assert shares["c1"] == hz[0:3]
    assert shares["c2"] == hz[3:6]
    assert shares["c3"] == hz[6:8]


def test_by_machine_room_with_several_rooms_and_validation() -> None:
    shares = allocate_all(AllocateByMachineRoom({"sh", "bj"}), room_queues(), ["c1", "c2"])
    assert {q.broker_name for share in shares.values() for q in share} == {"sh@broker-c", "bj@broker-d"}
    assert sum(len(s) for s in shares.values()) == 8
    with pytest.raises(ValueError, match="empty"):
        AllocateByMachineRoom(set())
    with pytest.raises(ValueError, match="'a@b'"):
        AllocateByMachineRoom({"a@b"})


def _room_of_client(client: str) -> str:
    return client.split("-")[0]  # "hz-1" -> "hz"


NEARBY_QUEUES = [
    MessageQueue("T", broker, i) for broker in ("hz@broker-a", "sh@broker-b", "bj@broker-c") for i in range(4)
]


def test_machine_room_nearby_prefers_own_room_and_shares_unattended_rooms() -> None:
    strategy = AllocateMachineRoomNearby(AllocateAveragely(), _room_of_client)
    cs = ["hz-1", "hz-2", "sh-1"]  # nobody in bj
    shares = allocate_all(strategy, NEARBY_QUEUES, cs)
    hz = [q for q in NEARBY_QUEUES if q.broker_name == "hz@broker-a"]
    sh = [q for q in NEARBY_QUEUES if q.broker_name == "sh@broker-b"]
    bj = [q for q in NEARBY_QUEUES if q.broker_name == "bj@broker-c"]
    # own room among own room's clients; bj's queues averagely among all three (sorted: hz-1, hz-2, sh-1)
    assert shares["hz-1"] == sorted(hz[0:2] + bj[0:2])
    assert shares["hz-2"] == sorted(hz[2:4] + bj[2:3])
    assert shares["sh-1"] == sorted(sh + bj[3:4])
    flat = [q for share in shares.values() for q in share]
    assert sorted(flat) == sorted(NEARBY_QUEUES)


def test_machine_room_nearby_client_in_a_room_without_brokers_gets_only_unattended_queues() -> None:
    strategy = AllocateMachineRoomNearby(AllocateByCircle(), _room_of_client)
    cs = ["hz-1", "gz-1"]  # gz has no broker; sh and bj have no consumer
    shares = allocate_all(strategy, NEARBY_QUEUES, cs)
    hz = [q for q in NEARBY_QUEUES if q.broker_name == "hz@broker-a"]
    assert set(hz) <= set(shares["hz-1"])
    assert not any(q.broker_name == "hz@broker-a" for q in shares["gz-1"])
    assert sorted(q for share in shares.values() for q in share) == sorted(NEARBY_QUEUES)
    assert len(shares["gz-1"]) == 4  # half of sh's and half of bj's


def test_machine_room_nearby_rejects_a_client_without_room() -> None:
    strategy = AllocateMachineRoomNearby(AllocateAveragely(), lambda client: "")
    with pytest.raises(ValueError, match="client 'c1'"):
        strategy.allocate(GROUP, "c1", NEARBY_QUEUES, ["c1"])


def test_machine_room_nearby_custom_broker_rooms() -> None:
    rooms = {"broker-a": "hz", "broker-b": "sh"}
    strategy = AllocateMachineRoomNearby(
        AllocateAveragely(), _room_of_client, room_of_broker=rooms.__getitem__
    )
    qs = [MessageQueue("T", b, i) for b in rooms for i in range(2)]
    assert {q.broker_name for q in strategy.allocate(GROUP, "sh-1", qs, ["hz-1", "sh-1"])} == {"broker-b"}


# ------------------------------------------------------------------------------ registry


def _build(name: str) -> AllocateStrategy:
    cls = STRATEGIES[name]
    if cls is AllocateByConfig:
        return AllocateByConfig(queues(1))
    if cls is AllocateByMachineRoom:
        return AllocateByMachineRoom({"hz"})
    if cls is AllocateMachineRoomNearby:
        return AllocateMachineRoomNearby(AllocateAveragely(), _room_of_client)
    return cls()


def test_strategies_by_name() -> None:
    assert set(STRATEGIES) == {
        "averagely",
        "by_circle",
        "consistent_hash",
        "by_config",
        "by_machine_room",
        "machine_room_nearby",
    }
    for name, cls in STRATEGIES.items():
        assert cls.name == name
        assert _build(name).name == name
