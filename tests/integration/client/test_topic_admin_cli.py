"""``orbitmq admin topic create|update|delete`` as a user runs them: creates never change an
existing topic behind the user's back, updates change only what is given, and no change hides
messages that are not consumed yet."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from clusterkit import Cluster, run_cli, start_cluster

from orbitmq.client.admin import Admin
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path)
    yield running
    await running.close()


async def queue_counts(cluster: Cluster, topic: str) -> tuple[int, int, int]:
    async with Admin(cluster.address) as admin:
        route = await admin.route(topic)
    (queue_data,) = route.queue_datas
    return queue_data.read_queue_nums, queue_data.write_queue_nums, queue_data.perm


async def produce(cluster: Cluster, topic: str, count: int) -> None:
    async with Producer("TopicAdminP", cluster.address) as producer:
        for i in range(count):
            await producer.send(Message(topic, f"m{i}".encode()))


async def test_create_update_and_the_messages_stay_visible(cluster: Cluster) -> None:
    code, out, err = await run_cli(
        cluster, "admin", "topic", "create", "--topic", "Orders", "--read-queues", "8", "--write-queues", "8"
    )
    assert code == 0, err
    await produce(cluster, "Orders", 120)

    # create again without queue counts: the topic is reported, not cut to the default 4
    code, out, err = await run_cli(cluster, "admin", "topic", "create", "--topic", "Orders", "--json")
    assert code == 0, err
    (report,) = json.loads(out)
    assert report["outcome"] == "exists" and report["after"]["read_queues"] == 8
    assert await queue_counts(cluster, "Orders") == (8, 8, 6)

    # create asking for something else: nothing changes, and the exit status says so
    code, out, err = await run_cli(
        cluster, "admin", "topic", "create", "--topic", "Orders", "--read-queues", "4", "--write-queues", "4"
    )
    assert code == 1 and "already exists" in err and "left unchanged" in err, err
    assert await queue_counts(cluster, "Orders") == (8, 8, 6)

    # update touches only the field given
    code, out, err = await run_cli(cluster, "admin", "topic", "update", "--topic", "Orders", "--perm", "4")
    assert code == 0, err
    assert await queue_counts(cluster, "Orders") == (8, 8, 4)
    code, out, err = await run_cli(cluster, "admin", "topic", "update", "--topic", "Orders", "--perm", "6")
    assert code == 0, err

    # cutting the read queues under unconsumed messages is refused, naming queues and counts
    code, out, err = await run_cli(
        cluster, "admin", "topic", "update", "--topic", "Orders", "--read-queues", "4", "--write-queues", "4"
    )
    assert code == 1, err
    assert "WOULD_HIDE_MESSAGES" in err and "queue 4: 15 message(s)" in err and "queue 7: 15" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert await queue_counts(cluster, "Orders") == (8, 8, 6)

    code, out, err = await run_cli(
        cluster,
        "consume",
        "--group",
        "Billing",
        "--topic",
        "Orders",
        "--from",
        "first",
        "--count",
        "120",
        "--json",
    )
    assert code == 0, err
    consumed = [json.loads(line) for line in out.splitlines()]
    assert consumed.pop()["summary"]["received"] == 120  # the run's last line is its summary
    assert sorted(r["body"] for r in consumed) == sorted(f"m{i}" for i in range(120))

    # consumed: RocketMQ's way down (write queues first, then read queues) goes through
    for option in ("--write-queues", "--read-queues"):
        code, out, err = await run_cli(cluster, "admin", "topic", "update", "--topic", "Orders", option, "4")
        assert code == 0, err
    assert await queue_counts(cluster, "Orders") == (4, 4, 6)


async def test_update_of_a_missing_topic_creates_nothing(cluster: Cluster) -> None:
    code, _out, err = await run_cli(cluster, "admin", "topic", "update", "--topic", "Ghost", "--perm", "6")
    assert code == 1 and "'Ghost' does not exist" in err, err
    async with Admin(cluster.address) as admin:
        assert "Ghost" not in await admin.topic_list()
    code, _, err = await run_cli(cluster, "admin", "topic", "delete", "--topic", "Ghost")
    assert code == 1 and "does not exist" in err, err


async def test_force_allows_hiding_messages(cluster: Cluster) -> None:
    async with Admin(cluster.address) as admin:
        await admin.create_topic("Forced", read_queue_nums=2, write_queue_nums=2)
    await produce(cluster, "Forced", 4)
    args = ("admin", "topic", "update", "--topic", "Forced", "--read-queues", "1", "--write-queues", "1")
    code, _out, err = await run_cli(cluster, *args)
    assert code == 1 and "no group has consumed it" in err, err
    code, _, err = await run_cli(cluster, *args, "--force")
    assert code == 0, err
    assert await queue_counts(cluster, "Forced") == (1, 1, 6)


@pytest.mark.parametrize("name", ["TBW102", "%DLQ%Billing", "SCHEDULE_TOPIC_XXXX", "DefaultCluster"])
async def test_reserved_names_cannot_be_created(cluster: Cluster, name: str) -> None:
    code, _, err = await run_cli(cluster, "admin", "topic", "create", "--topic", name)
    assert code == 1 and "reserved" in err and name in err, err
