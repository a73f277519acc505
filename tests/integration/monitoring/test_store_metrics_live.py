"""A real broker's ``/metrics`` shows its commit-log fsyncs and its disk, under both flush modes.

- ``orbitmq_commitlog_flush_seconds{broker}``: a histogram whose count grows with the sends
  (under SYNC_FLUSH by at least one per send made one after another, each waiting for its group
  commit; under ASYNC_FLUSH within the flush interval, 500 ms), with cumulative buckets ending at the
  count and a positive sum;
- ``orbitmq_store_disk_total_bytes{broker}`` and ``orbitmq_store_disk_available_bytes{broker}``:
  the size of the file system holding the data directory and the space left on it
  (total >= available > 0);
- ``promtool check metrics`` has nothing to say about the page.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from promkit import REPO_ROOT, fetch, promtool

sys.path.insert(0, str(REPO_ROOT / "tests" / "integration" / "broker"))
from brokerkit import RunningBroker, start_broker, stop_broker

from orbitmq.store.config import FlushMode
from orbitmq.v1 import broker_pb2, common_pb2

pytestmark = pytest.mark.timeout(120)

BROKER = "broker-a"
TOPIC = "Flushed"
SENDS = 10
POLL_S = 0.05


@pytest.fixture(params=[FlushMode.SYNC_FLUSH, FlushMode.ASYNC_FLUSH], ids=lambda mode: mode.value)
async def running(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunningBroker]:
    broker = await start_broker(tmp_path / "data", broker_name=BROKER, flush_mode=request.param)
    yield broker
    await stop_broker(broker)


def scrape(running: RunningBroker) -> tuple[str, dict[str, dict[tuple[tuple[str, str], ...], float]]]:
    """The page, and sample name -> (sorted labels -> value)."""
    text = fetch(running.broker.grpc.metrics_url or "")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return text, samples


def flush_count(samples: dict[str, dict[tuple[tuple[str, str], ...], float]]) -> float:
    return samples["orbitmq_commitlog_flush_seconds_count"][(("broker", BROKER),)]


async def send(running: RunningBroker, body: bytes) -> None:
    reply = await running.stub.SendMessage(
        broker_pb2.SendMessageRequest(
            producer_group="PG",
            topic=TOPIC,
            queue_id=0,
            messages=[common_pb2.Message(topic=TOPIC, body=body)],
        )
    )
    assert reply.status == broker_pb2.SEND_OK, reply


async def test_flushes_and_disk_space_are_exposed(running: RunningBroker) -> None:
    mode = running.broker.settings.flush_mode
    _, before = await asyncio.to_thread(scrape, running)
    for i in range(SENDS):  # one after another: under SYNC_FLUSH each waits for its own fsync
        await send(running, f"message {i}".encode())
    text, after = await asyncio.to_thread(scrape, running)
    if mode is FlushMode.SYNC_FLUSH:
        assert flush_count(after) - flush_count(before) >= SENDS
    else:
        deadline = time.monotonic() + 5  # the store flushes every 500 ms (flush_interval_ms)
        while flush_count(after) == flush_count(before) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
            text, after = await asyncio.to_thread(scrape, running)
        assert flush_count(after) > flush_count(before), "no periodic flush within 5 s"

    buckets = sorted(
        (float(dict(labels)["le"]), value)
        for labels, value in after["orbitmq_commitlog_flush_seconds_bucket"].items()
    )
    counts = [value for _, value in buckets]
    assert counts == sorted(counts), f"buckets not cumulative: {buckets}"
    assert buckets[-1] == (float("inf"), flush_count(after))
    assert after["orbitmq_commitlog_flush_seconds_sum"][(("broker", BROKER),)] > 0

    total = after["orbitmq_store_disk_total_bytes"][(("broker", BROKER),)]
    available = after["orbitmq_store_disk_available_bytes"][(("broker", BROKER),)]
    stats = os.statvfs(running.broker.store.commitlog.directory)
    assert total == stats.f_blocks * stats.f_frsize
    assert total >= available > 0, (total, available)

    checked = await asyncio.to_thread(promtool, "check", "metrics", input=text, check=False)
    assert checked.returncode == 0 and not (checked.stdout + checked.stderr).strip(), (
        checked.stdout + checked.stderr
    )
