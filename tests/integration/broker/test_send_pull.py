"""Send, pull with long polling, offsets, permissions — over real gRPC to a real broker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest
from brokerkit import RunningBroker, start_broker, stop_broker

from nativekit import use_path
from orbitmq import native
from orbitmq.common.rpc import failure_of
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, common_pb2
from orbitmq.v1.broker_pb2 import ErrorReason, PullStatus, SendStatus

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True, params=["c", "python"])
def send_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs on the C send path and on the Python path."""
    use_path(request.param, monkeypatch, native)
    return request.param


def send_request(
    topic: str, *bodies: bytes, queue_id: int = -1, **properties: str
) -> broker_pb2.SendMessageRequest:
    return broker_pb2.SendMessageRequest(
        producer_group="PG",
        topic=topic,
        queue_id=queue_id,
        messages=[common_pb2.Message(topic=topic, body=b, properties=properties) for b in bodies],
    )


def pull_request(topic: str, queue_id: int, offset: int, **fields: object) -> broker_pb2.PullMessageRequest:
    values: dict[str, object] = {"max_msg_nums": 32, "commit_offset": -1, **fields}
    return broker_pb2.PullMessageRequest(
        consumer_group="CG",
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        **values,  # type: ignore[arg-type]
    )


async def expect_failure(call: object, reason: int, text: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    failure = failure_of(caught.value)
    assert failure is not None and failure.reason == reason, caught.value.details()
    assert text in failure.message


async def test_send_single_and_batch_then_pull(broker: RunningBroker) -> None:
    single = await broker.stub.SendMessage(send_request("Orders", b"one", queue_id=1, TAGS="A", KEYS="k1"))
    assert single.status == SendStatus.SEND_OK and (single.queue_id, single.queue_offset) == (1, 0)
    assert len(single.msg_ids[0]) == 32
    batch = await broker.stub.SendMessage(send_request("Orders", b"two", b"three", b"four", queue_id=1))
    assert batch.queue_offset == 1 and len(batch.msg_ids) == 3
    reply = await broker.stub.PullMessage(pull_request("Orders", 1, 0))
    assert reply.status == PullStatus.FOUND and reply.next_begin_offset == 4
    assert [decode(r).body for r in reply.records] == [b"one", b"two", b"three", b"four"]
    assert decode(reply.records[0]).tags == "A"


async def test_usual_sends_take_the_c_path_and_detours_the_python_path(
    broker: RunningBroker, send_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    scanned: list[int] = []
    put_scanned = MessageStore.put_scanned

    def spy(store: MessageStore, batch: object) -> object:
        scanned.append(len(batch))  # type: ignore[arg-type]
        return put_scanned(store, batch)  # type: ignore[arg-type]

    monkeypatch.setattr(MessageStore, "put_scanned", spy)
    await broker.stub.SendMessage(send_request("Orders", b"a", b"b", queue_id=0, TAGS="T"))
    await broker.stub.SendMessage(send_request("Orders", b"later", queue_id=0, DELAY="1"))
    prepared = send_request("Orders", b"half", queue_id=0)
    prepared.sys_flag = 4
    await broker.stub.SendMessage(prepared)
    assert scanned == ([2] if send_path == "c" else [])
    reply = await broker.stub.PullMessage(pull_request("Orders", 0, 0))
    assert [decode(r).body for r in reply.records] == [b"a", b"b"]


async def test_a_send_carrying_a_property_only_the_broker_writes_is_refused_naming_it(
    broker: RunningBroker,
) -> None:
    """``REAL_TOPIC``, ``RETRY_TOPIC``, ``PGROUP``, ``CLUSTER``...: the broker writes these on its
    own paths (delays, retries, transactions); a raw send carrying one is refused on either send
    path, and nothing is stored. The names a producer writes (tags, keys, ids, timing) pass."""
    for name in ("REAL_TOPIC", "RETRY_TOPIC", "PGROUP", "CLUSTER", "TRANSACTION_CHECK_TIMES", "MAX_OFFSET"):
        request = send_request("Raw", b"x", queue_id=0, TAGS="T", **{name: "Elsewhere"})
        await expect_failure(broker.stub.SendMessage(request), ErrorReason.MESSAGE_ILLEGAL, f"'{name}'")
    batch = send_request("Raw", b"ok", queue_id=0, TAGS="T", KEYS="k", UNIQ_KEY="AB" * 16)
    batch.messages.append(common_pb2.Message(topic="Raw", body=b"bad", properties={"REAL_QID": "3"}))
    await expect_failure(broker.stub.SendMessage(batch), ErrorReason.MESSAGE_ILLEGAL, "'REAL_QID'")
    ok = await broker.stub.SendMessage(send_request("Raw", b"ok", queue_id=0, TAGS="T", KEYS="k"))
    assert ok.queue_offset == 0  # the refused sends stored nothing
    reply = await broker.stub.PullMessage(pull_request("Raw", 0, 0))
    assert [(decode(r).body, decode(r).tags) for r in reply.records] == [(b"ok", "T")]


async def test_round_robin_over_write_queues_when_no_queue_given(broker: RunningBroker) -> None:
    queues = [(await broker.stub.SendMessage(send_request("RR", b"x"))).queue_id for _ in range(8)]
    assert sorted(queues) == [0, 0, 1, 1, 2, 2, 3, 3]


async def test_auto_create_off_and_permissions(tmp_path: Path) -> None:
    running = await start_broker(tmp_path / "b", auto_create_topic=False)
    try:
        await expect_failure(
            running.stub.SendMessage(send_request("Missing", b"x")), ErrorReason.TOPIC_NOT_EXIST, "'Missing'"
        )
        await running.stub.CreateTopic(
            broker_pb2.CreateTopicRequest(topic=common_pb2.TopicConfig(topic_name="ReadOnly", perm=4))
        )
        await expect_failure(
            running.stub.SendMessage(send_request("ReadOnly", b"x")),
            ErrorReason.NO_PERMISSION,
            "not writable",
        )
        await running.stub.CreateTopic(
            broker_pb2.CreateTopicRequest(topic=common_pb2.TopicConfig(topic_name="WriteOnly", perm=2))
        )
        await running.stub.SendMessage(send_request("WriteOnly", b"x", queue_id=0))
        await expect_failure(
            running.stub.PullMessage(pull_request("WriteOnly", 0, 0)),
            ErrorReason.NO_PERMISSION,
            "not readable",
        )
    finally:
        await stop_broker(running)


async def test_long_poll_is_woken_by_the_dispatcher(broker: RunningBroker) -> None:
    await broker.stub.SendMessage(send_request("Poll", b"first", queue_id=0))
    waits = []
    for round_number in range(5):
        offset = round_number + 1
        pull = asyncio.ensure_future(
            broker.stub.PullMessage(pull_request("Poll", 0, offset, suspend_timeout_ms=10_000))
        )
        await asyncio.sleep(0.2)  # the pull is held now
        assert not pull.done()
        sent_at = time.perf_counter()
        await broker.stub.SendMessage(send_request("Poll", f"m{offset}".encode(), queue_id=0))
        reply = await pull
        waits.append(time.perf_counter() - sent_at)
        assert reply.status == PullStatus.FOUND and decode(reply.records[0]).body == f"m{offset}".encode()
    median_ms, max_ms = sorted(waits)[2] * 1000, max(waits) * 1000
    print(f"long-poll wake-up after send: median {median_ms:.1f} ms, max {max_ms:.1f} ms")
    assert sorted(waits)[2] < 0.5  # generous bound; measured figures are printed above


async def test_long_poll_times_out_with_no_new_message(broker: RunningBroker) -> None:
    await broker.stub.SendMessage(send_request("Idle", b"only", queue_id=0))
    started = time.perf_counter()
    reply = await broker.stub.PullMessage(pull_request("Idle", 0, 1, suspend_timeout_ms=300))
    assert reply.status == PullStatus.NO_NEW_MSG and time.perf_counter() - started >= 0.28


async def test_offsets_commit_query_and_carried_by_pull(broker: RunningBroker) -> None:
    await broker.stub.SendMessage(send_request("Off", b"a", b"b", queue_id=2))
    query = broker_pb2.QueryConsumerOffsetRequest(consumer_group="CG", topic="Off", queue_id=2)
    assert (await broker.stub.QueryConsumerOffset(query)).offset == -1
    await broker.stub.UpdateConsumerOffset(
        broker_pb2.UpdateConsumerOffsetRequest(consumer_group="CG", topic="Off", queue_id=2, offset=1)
    )
    assert (await broker.stub.QueryConsumerOffset(query)).offset == 1
    await broker.stub.PullMessage(pull_request("Off", 2, 1, commit_offset=2))
    assert (await broker.stub.QueryConsumerOffset(query)).offset == 2
    await expect_failure(
        broker.stub.UpdateConsumerOffset(
            broker_pb2.UpdateConsumerOffsetRequest(consumer_group="CG", topic="Off", queue_id=2, offset=-3)
        ),
        ErrorReason.INVALID_OFFSET,
        "-3",
    )


async def test_offsets_survive_a_broker_restart(tmp_path: Path) -> None:
    running = await start_broker(tmp_path / "b")
    await running.stub.SendMessage(send_request("Keep", b"a", b"b", b"c", queue_id=0))
    await running.stub.UpdateConsumerOffset(
        broker_pb2.UpdateConsumerOffsetRequest(consumer_group="CG", topic="Keep", queue_id=0, offset=2)
    )
    await stop_broker(running)
    running = await start_broker(tmp_path / "b")
    try:
        query = broker_pb2.QueryConsumerOffsetRequest(consumer_group="CG", topic="Keep", queue_id=0)
        assert (await running.stub.QueryConsumerOffset(query)).offset == 2
        reply = await running.stub.PullMessage(pull_request("Keep", 0, 2))
        assert [decode(r).body for r in reply.records] == [b"c"]
    finally:
        await stop_broker(running)


async def test_offset_illegal_and_bad_requests(broker: RunningBroker) -> None:
    await broker.stub.SendMessage(send_request("Bad", b"a", queue_id=0))
    reply = await broker.stub.PullMessage(pull_request("Bad", 0, 99))
    assert reply.status == PullStatus.OFFSET_ILLEGAL and reply.next_begin_offset == 0
    await expect_failure(
        broker.stub.PullMessage(pull_request("Bad", 9, 0)), ErrorReason.INVALID_ARGUMENT, "queue id 9"
    )
    await expect_failure(
        broker.stub.PullMessage(pull_request("Nope", 0, 0)), ErrorReason.TOPIC_NOT_EXIST, "'Nope'"
    )
    await expect_failure(
        broker.stub.SendMessage(send_request("bad topic", b"x")), ErrorReason.INVALID_NAME, "'bad topic'"
    )
    await expect_failure(
        broker.stub.SendMessage(send_request("Big", b"x" * (256 * 1024 + 1))),
        ErrorReason.MESSAGE_ILLEGAL,
        "262145",
    )
    await expect_failure(
        broker.stub.PullMessage(
            pull_request("Bad", 0, 0, subscription=common_pb2.Subscription(expression="A ||"))
        ),
        ErrorReason.INVALID_EXPRESSION,
        "'A ||'",
    )


async def test_tag_filter_on_pull(broker: RunningBroker) -> None:
    for i in range(9):
        await broker.stub.SendMessage(send_request("Tags", f"{i}".encode(), queue_id=0, TAGS="ABC"[i % 3]))
    sub = common_pb2.Subscription(topic="Tags", expression="A || C", expression_type=common_pb2.TAG)
    reply = await broker.stub.PullMessage(pull_request("Tags", 0, 0, subscription=sub))
    assert [decode(r).body for r in reply.records] == [b"0", b"2", b"3", b"5", b"6", b"8"]
