"""``orbitmq admin group progress`` for a group consuming by POP (the official RocketMQ 5
SimpleConsumer through ``orbitmq proxy``): per queue the POP consume offset (everything below
it acked), the lag from it, the messages in flight (received, not acked), how many of those have
expired, and the first offset never delivered; text and ``--json``."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from v2kit import call, message, official_producer, official_simple_consumer, v2_cluster

from orbitmq.broker.pop.handles import ReceiptHandle
from orbitmq.cli.main import main

pytestmark = pytest.mark.timeout(90)

TOPIC = "V2PopProgress"
GROUP = "v2-pop-progress"
SENT = 8


async def cli(*args: str) -> tuple[int, str]:
    """Run ``orbitmq …`` in a thread (the command runs its own event loop)."""
    result = await asyncio.to_thread(CliRunner().invoke, main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


async def test_group_progress_shows_pop_in_flight_expired_and_consume_offset(tmp_path: Path) -> None:
    async with v2_cluster(tmp_path) as cluster:
        async with official_producer(cluster.endpoint, [TOPIC]) as producer:
            for i in range(SENT):
                await call(producer.send, message(TOPIC, f"p{i}".encode()))
        async with official_simple_consumer(cluster.endpoint, GROUP, [TOPIC]) as consumer:
            received: list[Any] = []
            deadline = time.monotonic() + 20
            while len(received) < SENT and time.monotonic() < deadline:
                received.extend(await call(consumer.receive, 16, 60))
            assert len(received) == SENT
            held, expiring = received[0], received[1]  # not acked: one stays hidden, one expires
            for m in received[2:]:
                await call(consumer.ack, m)
            await call(consumer.change_invisible_duration, expiring, 1)
            await asyncio.sleep(1.5)

            places = {m.body: ReceiptHandle.decode(m.receipt_handle) for m in received}
            per_queue: dict[int, list[int]] = {}
            for place in places.values():
                per_queue.setdefault(place.queue_id, []).append(place.offset)
            unacked = {places[held.body], places[expiring.body]}
            expected = {}
            for queue_id, offsets in per_queue.items():
                end = max(offsets) + 1
                stuck = [p.offset for p in unacked if p.queue_id == queue_id]
                floor = min(stuck, default=end)
                expected[queue_id] = {
                    "broker_offset": end,
                    "consumer_offset": floor,
                    "lag": end - floor,
                    "in_flight": len(stuck),
                    "expired": int(places[expiring.body].queue_id == queue_id),
                    "delivered_offset": end,
                    "mode": "pop",
                }

            ns = ("--namesrv", cluster.namesrv.address)
            code, out = await cli("admin", "group", "progress", "--group", GROUP, "--json", *ns)
            assert code == 0, out
            rows = {r["queue"]: r for r in json.loads(out) if r["topic"] == TOPIC}
            for queue_id, want in expected.items():
                got = {k: rows[queue_id][k] for k in want}
                assert got == want, queue_id
            assert sum(r["in_flight"] for r in rows.values()) == 2

            code, text = await cli("admin", "group", "progress", "--group", GROUP, *ns)
            assert code == 0, text
            assert "in_flight" in text and "in flight 2" in text and "pop" in text
