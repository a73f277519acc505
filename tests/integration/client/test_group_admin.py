"""Subscription groups through the admin API: what is asked for is what the brokers keep."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from clusterkit import Cluster, start_cluster

from orbitmq.client.admin import Admin
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.client.pull_consumer import PullConsumer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path)
    yield running
    await running.close()


async def test_zero_retries_is_kept_and_the_default_is_sixteen(cluster: Cluster) -> None:
    async with Admin(cluster.address) as admin:
        await admin.create_group("NoRetries", retry_max_times=0)
        await admin.create_group("Defaults")
        groups = await admin.groups()
    assert groups["NoRetries"].retry_max_times == 0, "zero retries: the first failure is a dead letter"
    assert groups["Defaults"].retry_max_times == 16


async def test_a_pull_that_commits_nothing_leaves_no_group_and_a_commit_records_it(cluster: Cluster) -> None:
    """Readers that keep no offsets (a Spark batch read, the DLQ viewer) leave no subscription
    group behind; a group that commits an offset is recorded (listed, with its lag)."""
    async with Admin(cluster.address) as admin:
        await admin.create_topic("Readable", read_queue_nums=1, write_queue_nums=1)
    async with Producer("readable-producer", cluster.address) as producer:
        await producer.send(Message("Readable", b"one"))
    async with PullConsumer("JustReading", cluster.address) as reader:
        (mq,) = await reader.queues("Readable", refresh=True)
        result = await reader.pull(mq, 0)
        assert [m.body for m in result.messages] == [b"one"]
    async with PullConsumer("Committing", cluster.address) as committer:
        await committer.pull(mq, 0)
        await committer.commit_offset(mq, 1)
    async with Admin(cluster.address) as admin:
        groups = await admin.groups()
    assert "JustReading" not in groups, sorted(groups)
    assert "Committing" in groups, sorted(groups)
