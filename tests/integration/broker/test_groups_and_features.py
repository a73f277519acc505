"""Consumer groups and sessions, queue locks, retries and dead letters, delays, transactions,
queries and admin — each over real gRPC to a real broker."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from brokerkit import RunningBroker, start_broker, stop_broker
from test_send_pull import expect_failure, pull_request, send_request

from orbitmq.store.config import BrokerRole
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, common_pb2
from orbitmq.v1.broker_pb2 import ErrorReason, PullStatus, TransactionResolution

pytestmark = pytest.mark.timeout(60)


class Session:
    """A client's session stream: sends hello, collects server events."""

    def __init__(self, broker: RunningBroker, client_id: str) -> None:
        self.broker, self.client_id = broker, client_id
        self.outgoing: asyncio.Queue[broker_pb2.ClientEvent | None] = asyncio.Queue()
        self.events: asyncio.Queue[broker_pb2.ServerEvent] = asyncio.Queue()
        self.outgoing.put_nowait(broker_pb2.ClientEvent(hello=broker_pb2.SessionHello(client_id=client_id)))
        self.call = broker.stub.Session(self._requests())
        self.task = asyncio.ensure_future(self._collect())

    async def _requests(self) -> AsyncIterator[broker_pb2.ClientEvent]:
        while (event := await self.outgoing.get()) is not None:
            yield event

    async def _collect(self) -> None:
        async for event in self.call:
            await self.events.put(event)

    async def opened(self) -> Session:
        """Wait until the broker has registered the stream (the hello is asynchronous)."""
        for _ in range(200):
            if self.broker.broker.clients.session(self.client_id) is not None:
                return self
            await asyncio.sleep(0.01)
        raise AssertionError(f"session of {self.client_id} never opened")

    async def next(self, wait_s: float = 5) -> broker_pb2.ServerEvent:
        return await asyncio.wait_for(self.events.get(), wait_s)

    async def close(self) -> None:
        self.call.cancel()
        self.task.cancel()


def heartbeat(client_id: str, group: str = "CG", producer: str = "") -> broker_pb2.HeartbeatRequest:
    consumer = broker_pb2.ConsumerData(
        group=group,
        message_model=common_pb2.CLUSTERING,
        subscriptions=[common_pb2.Subscription(topic="T", expression="*")],
    )
    producers = [broker_pb2.ProducerData(group=producer)] if producer else []
    return broker_pb2.HeartbeatRequest(
        client_id=client_id, consumers=[consumer] if group else [], producers=producers
    )


async def consumer_ids(broker: RunningBroker, group: str = "CG") -> list[str]:
    reply = await broker.stub.GetConsumerList(broker_pb2.GetConsumerListRequest(consumer_group=group))
    return list(reply.client_ids)


async def test_membership_changes_are_pushed_at_once(broker: RunningBroker) -> None:
    first = await Session(broker, "c1").opened()
    await broker.stub.Heartbeat(heartbeat("c1"))
    assert await consumer_ids(broker) == ["c1"]
    await first.next()  # its own join
    started = time.perf_counter()
    await broker.stub.Heartbeat(heartbeat("c2"))
    event = await first.next()
    assert event.consumer_ids_changed.consumer_group == "CG" and time.perf_counter() - started < 1
    assert await consumer_ids(broker) == ["c1", "c2"]
    second = await Session(broker, "c2").opened()
    await second.close()  # c2's session ends: it leaves the group at once
    event = await first.next()
    assert event.consumer_ids_changed.consumer_group == "CG"
    assert await consumer_ids(broker) == ["c1"]
    await first.close()


async def test_a_session_that_ends_leaves_no_pending_task(
    broker: RunningBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """A client going away cancels the broker's session stream while it waits for an event:
    the wait's getter used to be left pending and reported at collection ("Task was destroyed
    but it is pending!", logged by every bench peer latency run)."""
    session = await Session(broker, "leaving").opened()
    await session.close()
    for _ in range(200):
        if broker.broker.clients.session("leaving") is None:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    gc.collect()
    destroyed = [r for r in caplog.records if "destroyed but it is pending" in r.getMessage()]
    assert not destroyed, destroyed[0].getMessage()


async def test_silent_clients_expire(tmp_path: Path) -> None:
    running = await start_broker(tmp_path / "b", channel_expiry_ms=300, scan_interval_ms=50)
    try:
        await running.stub.Heartbeat(heartbeat("lonely"))
        assert await consumer_ids(running) == ["lonely"]
        await asyncio.sleep(0.6)
        assert await consumer_ids(running) == []
    finally:
        await stop_broker(running)


def lock(client: str, *queue_ids: int) -> broker_pb2.LockBatchRequest:
    queues = [common_pb2.MessageQueue(topic="T", broker_name="broker-a", queue_id=q) for q in queue_ids]
    return broker_pb2.LockBatchRequest(consumer_group="CG", client_id=client, queues=queues)


async def test_queue_locks_expire_and_renew(tmp_path: Path) -> None:
    running = await start_broker(tmp_path / "b", lock_expiry_ms=400)
    try:
        held = await running.stub.LockBatch(lock("a", 0, 1))
        assert [q.queue_id for q in held.locked] == [0, 1]
        assert [q.queue_id for q in (await running.stub.LockBatch(lock("b", 1, 2))).locked] == [2]
        await asyncio.sleep(0.25)
        assert len((await running.stub.LockBatch(lock("a", 0))).locked) == 1  # renews queue 0 only
        await asyncio.sleep(0.25)
        taken = await running.stub.LockBatch(lock("b", 0, 1))
        assert [q.queue_id for q in taken.locked] == [1]  # 1 lapsed, 0 was renewed
        await running.stub.UnlockBatch(
            broker_pb2.UnlockBatchRequest(consumer_group="CG", client_id="a", queues=lock("a", 0).queues)
        )
        assert [q.queue_id for q in (await running.stub.LockBatch(lock("b", 0))).locked] == [0]
    finally:
        await stop_broker(running)


async def test_a_slave_refuses_writes_and_locks(tmp_path: Path) -> None:
    running = await start_broker(tmp_path / "s", broker_role=BrokerRole.SLAVE, broker_id=1)
    try:
        await expect_failure(
            running.stub.SendMessage(send_request("T", b"x")), ErrorReason.SLAVE_READ_ONLY, "slave"
        )
        await expect_failure(
            running.stub.LockBatch(lock("a", 0)), ErrorReason.SLAVE_READ_ONLY, "only a master"
        )
    finally:
        await stop_broker(running)


async def test_send_back_retries_with_growing_delay_then_dead_letters(tmp_path: Path) -> None:
    running = await start_broker(tmp_path / "b", schedule_tick_ms=10)
    broker = running.broker
    try:
        # Make delay levels fast so the test can walk through every retry.
        levels = broker.service.config.delay_levels_ms
        assert levels[2] == 10_000  # level 3 = 10 s, the first retry's delay by default
        await running.stub.CreateSubscriptionGroup(
            broker_pb2.CreateSubscriptionGroupRequest(
                group=broker_pb2.SubscriptionGroupConfig(
                    group_name="CG", consume_enable=True, retry_max_times=2
                )
            )
        )
        sent = await running.stub.SendMessage(send_request("Work", b"job", queue_id=0, KEYS="job-1"))
        offset = sent.commit_log_offset
        retry_queue = "%RETRY%CG"
        for attempt in (1, 2):
            await running.stub.SendBack(
                broker_pb2.SendBackRequest(consumer_group="CG", commit_log_offset=offset, delay_level=1)
            )
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                reply = (
                    await running.stub.PullMessage(
                        broker_pb2.PullMessageRequest(
                            consumer_group="CG",
                            topic=retry_queue,
                            queue_id=0,
                            queue_offset=attempt - 1,
                            max_msg_nums=1,
                            commit_offset=-1,
                        )
                    )
                    if broker.topics.get(retry_queue)
                    else None
                )
                if reply is not None and reply.status == PullStatus.FOUND:
                    break
                await asyncio.sleep(0.05)
            assert reply is not None and reply.status == PullStatus.FOUND
            retried = decode(reply.records[0])
            assert retried.reconsume_times == attempt and retried.properties["RETRY_TOPIC"] == "Work"
            offset = retried.physical_offset
        await running.stub.SendBack(broker_pb2.SendBackRequest(consumer_group="CG", commit_log_offset=offset))
        dlq = await running.stub.PullMessage(pull_request("%DLQ%CG", 0, 0))
        dead = decode(dlq.records[0])
        assert dead.body == b"job" and dead.reconsume_times == 3
        await expect_failure(
            running.stub.SendMessage(send_request("%DLQ%CG", b"x")), ErrorReason.NO_PERMISSION, "not writable"
        )
    finally:
        await stop_broker(running)


async def test_delay_level_waits_then_arrives_and_progress_survives_restart(tmp_path: Path) -> None:
    running = await start_broker(tmp_path / "b")
    try:
        sent_at = time.monotonic()
        await running.stub.SendMessage(send_request("Later", b"soon", queue_id=0, DELAY="1"))
        await running.stub.SendMessage(send_request("Later", b"much later", queue_id=0, DELAY="2"))
        early = await running.stub.PullMessage(pull_request("Later", 0, 0, suspend_timeout_ms=500))
        assert early.status == PullStatus.NO_NEW_MSG
        reply = await running.stub.PullMessage(pull_request("Later", 0, 0, suspend_timeout_ms=5000))
        arrived = time.monotonic() - sent_at
        assert reply.status == PullStatus.FOUND and decode(reply.records[0]).body == b"soon"
        assert 0.9 <= arrived < 2.5, arrived
        assert "DELAY" not in decode(reply.records[0]).properties
    finally:
        await stop_broker(running)
    # The level-2 message (5 s) is still waiting; it must arrive after a restart, once.
    running = await start_broker(tmp_path / "b")
    try:
        reply = await running.stub.PullMessage(pull_request("Later", 0, 1, suspend_timeout_ms=8000))
        assert [decode(r).body for r in reply.records] == [b"much later"]
        assert time.monotonic() - sent_at >= 4.9
        again = await running.stub.PullMessage(pull_request("Later", 0, 2, suspend_timeout_ms=300))
        assert again.status == PullStatus.NO_NEW_MSG
    finally:
        await stop_broker(running)


def half(topic: str, body: bytes, tid: str) -> broker_pb2.SendMessageRequest:
    return send_request(topic, body, queue_id=0, TRAN_MSG="true", UNIQ_KEY=tid)


async def test_transactions_commit_rollback_and_check_back(tmp_path: Path) -> None:
    running = await start_broker(
        tmp_path / "b", transaction_timeout_ms=200, transaction_check_interval_ms=100, transaction_check_max=3
    )
    stub = running.stub
    try:
        committed = await stub.SendMessage(half("Pay", b"commit me", "t1"))
        rolled = await stub.SendMessage(half("Pay", b"roll me back", "t2"))
        invisible = await stub.PullMessage(pull_request("Pay", 0, 0))
        assert invisible.status != PullStatus.FOUND
        await stub.EndTransaction(
            broker_pb2.EndTransactionRequest(
                producer_group="PG",
                commit_log_offset=committed.commit_log_offset,
                resolution=TransactionResolution.COMMIT,
            )
        )
        await stub.EndTransaction(
            broker_pb2.EndTransactionRequest(
                producer_group="PG",
                commit_log_offset=rolled.commit_log_offset,
                resolution=TransactionResolution.ROLLBACK,
            )
        )
        reply = await stub.PullMessage(pull_request("Pay", 0, 0, suspend_timeout_ms=2000))
        assert [decode(r).body for r in reply.records] == [b"commit me"]

        # An unresolved one is checked back through the producer's session.
        session = await Session(running, "producer-1").opened()
        await stub.Heartbeat(heartbeat("producer-1", group="", producer="PG"))
        await stub.SendMessage(half("Pay", b"ask me", "t3"))
        event = await session.next(wait_s=5)
        check = event.check_transaction
        assert check.producer_group == "PG" and check.transaction_id == "t3"
        assert decode(check.record).body == b"ask me"
        await session.outgoing.put(
            broker_pb2.ClientEvent(
                check_result=broker_pb2.TransactionCheckResult(
                    producer_group="PG",
                    commit_log_offset=check.commit_log_offset,
                    resolution=TransactionResolution.COMMIT,
                )
            )
        )
        reply = await stub.PullMessage(pull_request("Pay", 0, 1, suspend_timeout_ms=3000))
        assert [decode(r).body for r in reply.records] == [b"ask me"]

        # Never answered: at most check_max checks, then discarded.
        await stub.SendMessage(half("Pay", b"ignored", "t4"))
        checks = 0
        while True:
            try:
                event = await session.next(wait_s=1.5)
            except TimeoutError:
                break
            if event.check_transaction.transaction_id == "t4":
                checks += 1
        assert checks == 3
        assert running.broker.transactions.discarded == 1
        await session.close()
    finally:
        await stop_broker(running)


async def test_queries_by_key_id_time_and_progress(broker: RunningBroker) -> None:
    stub = broker.stub
    before = int(time.time() * 1000)
    sent = await stub.SendMessage(send_request("Q", b"findme", queue_id=1, KEYS="order-42"))
    await asyncio.sleep(0.05)
    by_key = await stub.QueryMessageByKey(broker_pb2.QueryMessageByKeyRequest(topic="Q", key="order-42"))
    assert [decode(r).body for r in by_key.records] == [b"findme"]
    by_id = await stub.ViewMessage(broker_pb2.ViewMessageRequest(msg_id=sent.msg_ids[0]))
    assert decode(by_id.records[0]).body == b"findme"
    search = await stub.SearchOffset(
        broker_pb2.SearchOffsetRequest(topic="Q", queue_id=1, timestamp_ms=before)
    )
    assert search.offset == 0
    assert (await stub.GetMaxOffset(broker_pb2.QueueRequest(topic="Q", queue_id=1))).offset == 1
    await stub.UpdateConsumerOffset(
        broker_pb2.UpdateConsumerOffsetRequest(consumer_group="CG", topic="Q", queue_id=1, offset=0)
    )
    stats = await stub.GetConsumeStats(broker_pb2.GetConsumeStatsRequest(consumer_group="CG", topic="Q"))
    queue1 = next(q for q in stats.queues if q.queue_id == 1)
    assert (queue1.broker_offset, queue1.consumer_offset, queue1.lag) == (1, 0, 1) and stats.total_lag == 1
    await expect_failure(
        stub.ViewMessage(broker_pb2.ViewMessageRequest(msg_id="zz")), ErrorReason.INVALID_ARGUMENT, "'zz'"
    )


async def test_admin_topics_groups_reset_and_runtime(broker: RunningBroker) -> None:
    stub = broker.stub
    await stub.CreateTopic(
        broker_pb2.CreateTopicRequest(
            topic=common_pb2.TopicConfig(topic_name="Admin", read_queue_nums=2, write_queue_nums=2)
        )
    )
    names = [t.topic_name for t in (await stub.ListTopics(broker_pb2.ListTopicsRequest())).topics]
    assert "Admin" in names
    t0 = int(time.time() * 1000)
    for i in range(4):
        await stub.SendMessage(send_request("Admin", f"{i}".encode(), queue_id=0))
        await asyncio.sleep(0.02)
    session = await Session(broker, "c1").opened()
    await stub.Heartbeat(heartbeat("c1"))
    await session.next()
    reset = await stub.ResetOffset(
        broker_pb2.ResetOffsetRequest(consumer_group="CG", topic="Admin", offset=2)
    )
    assert dict(reset.offsets) == {0: 2, 1: 0}
    notice = (await session.next()).reset_offset
    assert (notice.consumer_group, notice.topic, dict(notice.offsets)) == ("CG", "Admin", {0: 2, 1: 0})
    back = await stub.ResetOffset(
        broker_pb2.ResetOffsetRequest(consumer_group="CG", topic="Admin", timestamp_ms=t0)
    )
    assert dict(back.offsets)[0] == 0
    await session.close()
    await stub.DeleteTopic(broker_pb2.DeleteTopicRequest(topic="Admin"))
    await expect_failure(
        stub.PullMessage(pull_request("Admin", 0, 0)), ErrorReason.TOPIC_NOT_EXIST, "'Admin'"
    )
    await expect_failure(
        stub.DeleteTopic(broker_pb2.DeleteTopicRequest(topic="Admin")), ErrorReason.TOPIC_NOT_EXIST, "'Admin'"
    )
    info = await stub.GetRuntimeInfo(broker_pb2.GetRuntimeInfoRequest())
    assert info.broker_name == "broker-a" and info.commit_log_max_offset > 0
    await stub.CreateSubscriptionGroup(
        broker_pb2.CreateSubscriptionGroupRequest(
            group=broker_pb2.SubscriptionGroupConfig(group_name="G2", retry_max_times=5)
        )
    )
    groups = {
        g.group_name: g
        for g in (await stub.ListSubscriptionGroups(broker_pb2.ListSubscriptionGroupsRequest())).groups
    }
    assert groups["G2"].retry_max_times == 5
    await stub.DeleteSubscriptionGroup(broker_pb2.DeleteSubscriptionGroupRequest(group_name="G2"))


async def test_default_retry_delay_level_is_three_plus_reconsume_times(broker: RunningBroker) -> None:
    store = broker.broker.store
    sent = await broker.stub.SendMessage(send_request("Redo", b"again", queue_id=0))
    offset = sent.commit_log_offset
    for reconsume, level in ((0, 3), (1, 4), (2, 5)):
        await broker.stub.SendBack(broker_pb2.SendBackRequest(consumer_group="CG", commit_log_offset=offset))
        store.dispatch_pending()
        queue = store.consume_queue("SCHEDULE_TOPIC_XXXX", level - 1)
        assert queue is not None and queue.max_offset == 1, (
            f"reconsume {reconsume} should wait at level {level}"
        )
        waiting = store.message_at(queue.unit_at(0)[0])  # type: ignore[index]
        assert waiting is not None and waiting.reconsume_times == reconsume + 1
        assert waiting.properties["REAL_TOPIC"] == "%RETRY%CG" and waiting.properties["DELAY"] == str(level)
        offset = waiting.physical_offset
