"""``PullConsumer.pull(raw=True)``: the records come back undecoded (for readers that decode in
bulk, like the Spark source), the same messages a decoded pull gives."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from clusterkit import Cluster, start_cluster

from orbitmq.client import Admin, Message, Producer, PullConsumer, PullStatus
from orbitmq.store.record import decode

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path)
    async with Admin(running.address) as admin:
        await admin.create_topic("RawPulled", read_queue_nums=1, write_queue_nums=1)
    async with Producer("PG", running.address) as producer:
        for i in range(10):
            await producer.send(
                Message("RawPulled", f"{i}".encode(), tags="AB"[i % 2], properties={"n": str(i)})
            )
    yield running
    await running.close()


async def test_raw_pulls_hand_back_the_records_a_decoded_pull_reads(cluster: Cluster) -> None:
    async with PullConsumer("RawGroup", cluster.address) as consumer:
        (mq,) = await consumer.queues("RawPulled")
        decoded = await consumer.pull(mq, 2, max_nums=5)
        raw = await consumer.pull(mq, 2, max_nums=5, raw=True)
        assert raw.messages == [] and len(raw.records) == 5
        assert [decode(r) for r in raw.records] == decoded.messages
        assert (raw.status, raw.next_begin_offset, raw.min_offset, raw.max_offset) == (
            decoded.status,
            decoded.next_begin_offset,
            decoded.min_offset,
            decoded.max_offset,
        )
        sql = await consumer.pull(mq, 0, expression="n BETWEEN 3 AND 4", sql=True, raw=True)
        assert [decode(r).body for r in sql.records] == [b"3", b"4"]
        none = await consumer.pull(mq, 0, expression="n > 100", sql=True, raw=True)
        assert none.status is PullStatus.NO_MATCHED_MSG and none.records == []
        end = await consumer.pull(mq, 10, raw=True)
        assert end.status is PullStatus.NO_NEW_MSG and end.records == []


async def test_a_raw_pull_refuses_a_tag_expression(cluster: Cluster) -> None:
    """The broker matches tags by hash only; the text check needs decoded tags."""
    async with PullConsumer("RawGroup", cluster.address) as consumer:
        (mq,) = await consumer.queues("RawPulled")
        with pytest.raises(
            ValueError, match=r"raw pull takes '\*' or an SQL92 condition, not the tag expression 'A'"
        ):
            await consumer.pull(mq, 0, expression="A", raw=True)
        assert len((await consumer.pull(mq, 0, expression=" * ", raw=True)).records) == 10
