"""The range read's pipelined pulls (``orbitmq_spark.brokers.read_range``) against a real
cluster: with pulls sent ahead at the broker's stride, every slot of a range must still come
back once and in queue order — for full pulls, a pull size below the broker's cap, ranges that
start and end mid-pull, and tag and SQL92 filters (whose pulls skip slots, so the pulls ahead
guess wrong and must be dropped)."""

from __future__ import annotations

import pytest
from sparkkit import ThreadCluster

from orbitmq.client.message import Message
from orbitmq_spark import brokers
from orbitmq_spark.offsets import QueueRange
from orbitmq_spark.options import parse_read_options

pytestmark = pytest.mark.timeout(180)

TOPIC = "SparkReadPipeline"
COUNT = 300


@pytest.fixture(scope="module")
def queue(cluster: ThreadCluster) -> tuple[str, int]:
    """(broker, queue id) of the one queue holding COUNT messages; message i has offset i."""
    cluster.create_topic(TOPIC, 1, broker="broker-a")
    messages = [
        Message(TOPIC, f"m-{i}".encode(), tags="TagA" if i % 3 == 0 else "TagB", properties={"n": str(i)})
        for i in range(COUNT)
    ]
    results = cluster.send(messages)
    assert [r.queue_offset for r in results] == list(range(COUNT))
    return results[0].broker_name, results[0].queue_id


def _read(
    cluster: ThreadCluster, queue: tuple[str, int], start: int, end: int, **options: str
) -> list[list[int]]:
    """Queue offsets of each list ``read_range`` yields."""
    parsed = parse_read_options({"namesrv": cluster.namesrv, "topic": TOPIC, **options}, streaming=False)
    piece = QueueRange(TOPIC, queue[0], queue[1], start, end)
    return [[m.queue_offset for m in pulled] for pulled in brokers.read_range(parsed, piece)]


@pytest.mark.parametrize("pull_size", ["1024", "10", "7"])
def test_every_slot_once_in_order_with_pulls_ahead(
    cluster: ThreadCluster, queue: tuple[str, int], pull_size: str
) -> None:
    pulls = _read(cluster, queue, 0, COUNT, pullBatchSize=pull_size)
    assert [o for pulled in pulls for o in pulled] == list(range(COUNT))
    assert max(len(pulled) for pulled in pulls) <= int(pull_size)


def test_a_range_starting_and_ending_mid_pull(cluster: ThreadCluster, queue: tuple[str, int]) -> None:
    pulls = _read(cluster, queue, 37, 251, pullBatchSize="10")
    assert [o for pulled in pulls for o in pulled] == list(range(37, 251))


def test_tag_filter_with_pulls_ahead(cluster: ThreadCluster, queue: tuple[str, int]) -> None:
    pulls = _read(cluster, queue, 5, 290, tags="TagA", pullBatchSize="8")
    assert [o for pulled in pulls for o in pulled] == [i for i in range(5, 290) if i % 3 == 0]


def test_sql92_filter_with_pulls_ahead(cluster: ThreadCluster, queue: tuple[str, int]) -> None:
    pulls = _read(cluster, queue, 0, COUNT, sql="n BETWEEN 50 AND 149 OR n > 280", pullBatchSize="16")
    assert [o for pulled in pulls for o in pulled] == [*range(50, 150), *range(281, COUNT)]
