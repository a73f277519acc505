"""Timers in a cluster: a slave promoted to master delivers the timers it replicated (and not
those the old master already delivered), and the orbitmq client and ``orbitmq produce`` ask
for delivery times."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from brokerkit import RunningBroker
from clusterkit import Cluster, eventually, run_cli, start_cluster

from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.store.record import StoredMessage
from orbitmq.v1 import broker_pb2, common_pb2

pytestmark = pytest.mark.timeout(90)

HA = {"replica_config_interval_ms": 100, "timer_precision_ms": 50}
TOPIC = "TimedFailover"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=())
    yield running
    await running.close()


def stored(running: RunningBroker, topic: str = TOPIC) -> list[StoredMessage]:
    """Every message of the topic's queues, read from the store (exact store times)."""
    store, found = running.broker.store, []
    for queue_id in store.queue_ids(topic):
        queue = store.consume_queue(topic, queue_id)
        assert queue is not None
        for offset in range(queue.min_offset, queue.max_offset):
            unit = queue.unit_at(offset)
            message = store.message_at(unit[0]) if unit else None
            if message is not None:
                found.append(message)
    return found


async def create_topic(running: RunningBroker, queues: int = 1) -> None:
    await running.stub.CreateTopic(
        broker_pb2.CreateTopicRequest(
            topic=common_pb2.TopicConfig(
                topic_name=TOPIC, read_queue_nums=queues, write_queue_nums=queues, perm=6
            )
        )
    )


async def test_promoted_slave_delivers_the_timers_it_replicated_once(cluster: Cluster) -> None:
    old = await cluster.start_broker("a-master", broker_name="broker-a", broker_role="ASYNC_MASTER", **HA)
    new = await cluster.start_broker(
        "a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **HA
    )
    await create_topic(old)
    now = int(time.time() * 1000)
    due = {f"early{i}".encode(): now + 800 + i * 4 for i in range(100)}
    due |= {f"late{i}".encode(): now + 4_000 + i * 4 for i in range(100)}
    for body, at in due.items():
        reply = await old.stub.SendMessage(
            broker_pb2.SendMessageRequest(
                topic=TOPIC,
                queue_id=0,
                messages=[
                    common_pb2.Message(topic=TOPIC, body=body, properties={"TIMER_DELIVER_MS": str(at)})
                ],
            )
        )
        assert reply.status == broker_pb2.SEND_OK
    await eventually(lambda: len(stored(old)) == 100, 10, lambda: f"old master delivered {len(stored(old))}")
    await eventually(  # the log (timers, deliveries, timer log) and the topic's config are copied
        lambda: (
            new.broker.store.dispatcher.dispatched_offset == old.broker.store.commitlog.max_offset
            and new.broker.tables.topics.get(TOPIC) is not None
        ),
        20,
        lambda: "slave behind",
    )
    assert new.broker.timer.pending == 0  # a slave delivers nothing itself
    assert sorted(m.body for m in stored(new)) == sorted(b for b in due if b.startswith(b"early"))
    await cluster.stop_broker("a-master")
    await new.stub.ChangeRole(broker_pb2.ChangeRoleRequest(role="ASYNC_MASTER", epoch=1, broker_id=0))
    assert new.broker.timer.pending == 100  # the late ones, loaded at promotion

    await eventually(lambda: len(stored(new)) >= 200, 15, lambda: f"new master holds {len(stored(new))}")
    await eventually(lambda: new.broker.timer.pending == 0, 5)
    delivered = stored(new)
    assert Counter(m.body for m in delivered) == Counter(list(due))  # every timer, each once
    for message in delivered:
        assert message.store_timestamp_ms >= due[message.body], message.body


async def test_client_and_cli_ask_for_delivery_times(cluster: Cluster) -> None:
    running = await cluster.start_broker("broker-t", timer_precision_ms=50)
    await create_topic(running, queues=2)
    async with Producer("timer-producer", cluster.address) as producer:
        now = int(time.time() * 1000)
        await producer.send(Message(TOPIC, b"at", deliver_at_ms=now + 1_200, tags="T"))
        await producer.send(Message(TOPIC, b"after", delay_ms=700))
        with pytest.raises(ValueError, match="set one of delay_level, deliver_at_ms and delay_ms"):
            await producer.send(Message(TOPIC, b"both", delay_level=2, delay_ms=700))
    assert stored(running) == []
    cli_started = int(time.time() * 1000)
    code, _, err = await run_cli(cluster, "produce", "--topic", TOPIC, "--body", "cli", "--delay", "1.5s")
    assert code == 0, err
    arrived = await eventually(lambda: len(stored(running)) == 3 and stored(running), 10)
    by_body = {m.body: m for m in arrived}
    assert by_body[b"at"].store_timestamp_ms >= now + 1_200 and by_body[b"at"].properties["TAGS"] == "T"
    assert by_body[b"after"].store_timestamp_ms >= int(by_body[b"after"].properties["TIMER_DELIVER_MS"])
    assert int(by_body[b"after"].properties["TIMER_DELIVER_MS"]) >= now + 700
    cli = by_body[b"cli"]
    assert cli.store_timestamp_ms >= int(cli.properties["TIMER_DELIVER_MS"]) >= cli_started + 1_500
    for message in arrived:
        assert message.store_timestamp_ms - int(message.properties["TIMER_DELIVER_MS"]) <= 300

    code, _, err = await run_cli(cluster, "produce", "--topic", TOPIC, "--delay", "1s", "--delay-level", "2")
    assert code != 0 and "give one of --delay-level, --delay and --deliver-at" in err
    code, _, err = await run_cli(cluster, "produce", "--topic", TOPIC, "--deliver-at", "soon")
    assert code != 0 and "'soon' is neither epoch milliseconds nor an ISO 8601 time" in err
    code, _, err = await run_cli(cluster, "produce", "--topic", TOPIC, "--delay", "5 minutes")
    assert code != 0 and "is not a duration" in err
    code, _, err = await run_cli(cluster, "produce", "--topic", TOPIC, "--deliver-at", "2020-01-01T00:00:00Z")
    assert code == 0, err  # in the past: delivered now
    await eventually(lambda: len(stored(running)) == 4, 5)
