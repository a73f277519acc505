"""Sidecars as real processes against a real cluster, applications through the thin client."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import Cluster, eventually, scrape, start_cluster

from orbitmq.client import Admin, Message, Producer
from orbitmq.common.properties import SystemPropertyError
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.sidecar.client import SidecarClient
from orbitmq.v1 import common_pb2, sidecar_pb2, sidecar_pb2_grpc
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(180)

FAST = [
    "--rebalance-ms",
    "1000",
    "--heartbeat-ms",
    "500",
    "--persist-ms",
    "300",
    "--route-refresh-ms",
    "1000",
    "--lock-renew-ms",
    "500",
    "--consume-from",
    "first",
    "--listen",
    "127.0.0.1:0",
    "--metrics-listen",
    "127.0.0.1:0",
    "--drain-timeout-ms",
    "5000",
]


@dataclass
class Sidecar:
    process: subprocess.Popen[str]
    address: str
    metrics: str

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    async def wait(self) -> int:
        return await asyncio.to_thread(self.process.wait, 60)


async def start_sidecar(cluster: Cluster, group: str, *extra: str, name: str = "app") -> Sidecar:
    process = subprocess.Popen(  # noqa: ASYNC220 - its output is read in a thread
        [
            sys.executable,
            "-m",
            "orbitmq.cli.main",
            "sidecar",
            "--namesrv",
            cluster.address,
            "--group",
            group,
            "--instance-name",
            name,
            *FAST,
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=(cluster.root / f"sidecar-{name}.log").open("w"),  # a pipe nobody reads could fill up
        text=True,
    )
    assert process.stdout is not None
    line = await asyncio.to_thread(process.stdout.readline)  # the cluster runs on this loop
    if "listening on" not in line:
        process.kill()
        raise AssertionError(
            f"sidecar did not start: {line!r} {process.stderr.read() if process.stderr else ''}"
        )
    address = line.split("listening on ")[1].split()[0]
    return Sidecar(process, address, line.split(" metrics ")[1].strip())


@dataclass
class App:
    """An application behind one sidecar: records every delivery, acknowledges as told."""

    name: str
    received: list[tuple[str, int, int]] = field(default_factory=list)
    answer: str = "ack"
    task: asyncio.Task[None] | None = None

    def bodies(self) -> list[str]:
        return [body for body, _, _ in self.received]

    async def run(self, address: str, max_in_flight: int = 0) -> None:
        async with SidecarClient(address) as client:
            try:
                async for delivery in client.deliveries(app_id=self.name, max_in_flight=max_in_flight):
                    self.received.append((delivery.body.decode(), delivery.queue_id, delivery.queue_offset))
                    if self.answer == "ack":
                        await delivery.ack()
            except Exception:  # the sidecar went away: the application just stops
                return

    def start(self, address: str, max_in_flight: int = 0) -> App:
        self.task = asyncio.get_running_loop().create_task(self.run(address, max_in_flight))
        return self

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    # Locks of a SIGKILLed sidecar free after 6 s, not RocketMQ's 60 s: the orderly restart test
    # waited a minute for them (the sidecars renew every 500 ms, FAST).
    running = await start_cluster(tmp_path, lock_expiry_ms=6_000, scan_interval_ms=500)
    async with Admin(running.address) as admin:
        await admin.create_topic("Work", read_queue_nums=8, write_queue_nums=8)
    yield running
    await running.close()


async def produce(cluster: Cluster, start: int, count: int, key: str | None = None) -> None:
    async with Producer("PG", cluster.address) as producer:
        for i in range(start, start + count):
            body = f"{key}:{i}" if key else f"{i}"
            await producer.send(Message("Work", body.encode()), sharding_key=key)


async def test_two_sidecars_share_queues_and_one_takes_over_after_sigkill(cluster: Cluster) -> None:
    sidecars = [await start_sidecar(cluster, "Shared", "--subscribe", "Work", name=f"s{i}") for i in range(2)]
    apps = [App(f"a{i}").start(s.address) for i, s in enumerate(sidecars)]
    try:
        await produce(cluster, 0, 200)
        await eventually(lambda: len({b for a in apps for b in a.bodies()}) == 200, 60, lambda: "first 200")
        assert all(a.received for a in apps), "both sidecars consumed"
        sidecars[1].signal(signal.SIGKILL)
        killed = time.monotonic()
        await sidecars[1].wait()
        await produce(cluster, 200, 200)
        await eventually(
            lambda: set(apps[0].bodies()) >= {f"{i}" for i in range(200, 400)},
            60,
            lambda: "the survivor took over",
        )
        took = time.monotonic() - killed
        everything = Counter(b for a in apps for b in a.bodies())
        assert set(everything) == {f"{i}" for i in range(400)}, "every message consumed at least once"
        print(
            f"takeover: all 200 later messages consumed {took:.2f} s after the SIGKILL; "
            f"{sum(everything.values()) - 400} redelivered"
        )
        assert took < 1.0 + 60 + 10  # rebalance interval + lock expiry + margin
    finally:
        for app in apps:
            await app.stop()
        for sidecar in sidecars:
            sidecar.signal(signal.SIGKILL)
            await sidecar.wait()


async def test_graceful_sigterm_loses_and_duplicates_nothing(cluster: Cluster) -> None:
    first = await start_sidecar(cluster, "Rolling", "--subscribe", "Work", name="old")
    app = App("old").start(first.address)
    producing = asyncio.create_task(produce(cluster, 0, 600))
    await eventually(lambda: len(app.received) >= 150, 60, lambda: "some consumed before the restart")
    first.signal(signal.SIGTERM)
    assert await first.wait() == 0
    second = await start_sidecar(cluster, "Rolling", "--subscribe", "Work", name="new")
    fresh = App("new").start(second.address)
    try:
        await producing
        await eventually(lambda: len(app.received) + len(fresh.received) >= 600, 60, lambda: "all 600")
        await asyncio.sleep(1.5)
        everything = Counter(app.bodies() + fresh.bodies())
        assert set(everything) == {f"{i}" for i in range(600)}, "nothing lost"
        assert max(everything.values()) == 1, (
            f"duplicated: {[b for b, n in everything.items() if n > 1][:10]}"
        )
    finally:
        await app.stop()
        await fresh.stop()
        second.signal(signal.SIGTERM)
        await second.wait()


async def test_orderly_per_queue_across_a_sidecar_restart(cluster: Cluster) -> None:
    keys = [f"k{i}" for i in range(6)]
    sidecar = await start_sidecar(cluster, "Ordered", "--subscribe", "Work", "--orderly", name="o1")
    app = App("o1").start(sidecar.address)
    for step in range(20):
        for key in keys:
            await produce(cluster, step, 1, key=key)
    await eventually(lambda: len(app.received) >= 40, 60, lambda: "some consumed")
    sidecar.signal(signal.SIGKILL)
    await sidecar.wait()
    await app.stop()
    restarted = await start_sidecar(cluster, "Ordered", "--subscribe", "Work", "--orderly", name="o2")
    again = App("o2").start(restarted.address)
    try:
        for step in range(20, 30):
            for key in keys:
                await produce(cluster, step, 1, key=key)
        expected = {f"{k}:{s}" for k in keys for s in range(30)}
        await eventually(lambda: set(app.bodies() + again.bodies()) >= expected, 90, lambda: "all steps")
        redelivered = len(app.received) + len(again.received) - len(expected)
        for key in keys:
            for run in (app, again):
                steps = [int(b.split(":")[1]) for b in run.bodies() if b.startswith(f"{key}:")]
                seen: set[int] = set()
                for s in steps:  # within one sidecar's run, a key's steps come in order
                    assert s == min(steps) or s - 1 in seen, f"{key} out of order in {run.name}: {steps}"
                    seen.add(s)
        print(f"orderly restart: {len(expected)} messages, {redelivered} redelivered after the SIGKILL")
    finally:
        await again.stop()
        restarted.signal(signal.SIGTERM)
        await restarted.wait()


async def test_unacknowledged_deliveries_of_a_disconnected_app_go_to_another(cluster: Cluster) -> None:
    sidecar = await start_sidecar(
        cluster, "Handover", "--subscribe", "Work", "--max-in-flight", "8", name="h"
    )
    silent = App("silent", answer="none").start(sidecar.address, max_in_flight=5)
    try:
        await produce(cluster, 0, 20)
        await eventually(lambda: len(silent.received) == 5, 30, lambda: f"{len(silent.received)} held")
        await asyncio.sleep(0.5)
        assert len(silent.received) == 5, "never more than its max in flight"
        await silent.stop()
        helper = App("helper").start(sidecar.address)
        await eventually(
            lambda: set(helper.bodies()) == {f"{i}" for i in range(20)},
            30,
            lambda: f"{helper.received} {silent.received}",
        )
        assert set(silent.bodies()) <= set(helper.bodies()), "what the silent app held was redelivered"
        samples = await asyncio.to_thread(scrape, sidecar.metrics)
        assert (
            samples[("orbitmq_sidecar_deliveries_total", (("group", "Handover"), ("kind", "redelivered")))]
            >= 5
        )
        assert samples[("orbitmq_sidecar_acks_total", (("group", "Handover"), ("status", "SUCCESS")))] >= 20
        assert samples[("orbitmq_sidecar_in_flight", (("group", "Handover"),))] == 0
        assigned = [v for (n, _), v in samples.items() if n == "orbitmq_client_queues_assigned"]
        assert sum(assigned) >= 8, "the client metrics of the sidecar's consumer are served too"
        await helper.stop()
    finally:
        sidecar.signal(signal.SIGTERM)
        assert await sidecar.wait() == 0


FIELDS = (
    "topic", "queue_id", "queue_offset", "msg_id", "keys", "tags", "properties", "body",
    "reconsume_times", "born_timestamp_ms", "store_timestamp_ms",
)  # fmt: skip


async def test_protobuf_and_record_deliveries_carry_the_same_message(cluster: Cluster) -> None:
    """An application that does not ask for records (any language's client) gets `Delivery`
    messages and answers with `Ack`s by string id; the thin client gets the same message as a
    record, every field alike."""
    sidecar = await start_sidecar(cluster, "Wire", "--subscribe", "Work", name="w")
    try:
        async with Producer("PG", cluster.address) as producer:
            await producer.send(
                Message("Work", b"rich", tags="TagA", keys=["k1", "k2"], properties={"color": "red"})
            )
            await producer.send(Message("Work", b"plain"))
        held: dict[bytes, sidecar_pb2.Delivery] = {}
        success = ("orbitmq_sidecar_acks_total", (("group", "Wire"), ("status", "SUCCESS")))
        async with grpc.aio.insecure_channel(sidecar.address) as channel:
            answers: asyncio.Queue[sidecar_pb2.ConsumeRequest] = asyncio.Queue()
            answers.put_nowait(sidecar_pb2.ConsumeRequest(hello=sidecar_pb2.ConsumeHello(app_id="old")))

            async def requests() -> AsyncIterator[sidecar_pb2.ConsumeRequest]:
                while True:
                    yield await answers.get()

            call = sidecar_pb2_grpc.SidecarStub(channel).Consume(requests())
            async for batch in call:
                assert not batch.records, "records only for an application that asked for them"
                held.update((d.body, d) for d in batch.deliveries)
                if len(held) == 2:
                    break
            plain = sidecar_pb2.Ack(delivery_id=held[b"plain"].delivery_id, status=sidecar_pb2.SUCCESS)
            answers.put_nowait(sidecar_pb2.ConsumeRequest(acks=sidecar_pb2.Acks(acks=[plain])))
            await eventually(
                lambda: scrape(sidecar.metrics).get(success) == 1, 10, lambda: "the Ack was never settled"
            )
            call.cancel()  # "rich" unanswered: redelivered to the next application
        old = held[b"rich"]
        assert (old.topic, old.tags, list(old.keys), old.properties["color"]) == (
            "Work",
            "TagA",
            ["k1", "k2"],
            "red",
        )
        expected = {f: getattr(old, f) for f in FIELDS} | {
            "keys": list(old.keys),
            "properties": dict(old.properties),
        }
        async with SidecarClient(sidecar.address) as client:
            async for delivery in client.deliveries(app_id="new"):
                assert {f: getattr(delivery, f) for f in FIELDS} == expected
                assert delivery.delivery_id != old.delivery_id and delivery.delivery_id.isdecimal()
                await delivery.ack()
                with pytest.raises(RuntimeError, match="already answered"):
                    await delivery.later()
                break
            await eventually(
                lambda: scrape(sidecar.metrics)[("orbitmq_sidecar_in_flight", (("group", "Wire"),))] == 0,
                10,
                lambda: "the thin client's ack was never settled",
            )
        samples = await asyncio.to_thread(scrape, sidecar.metrics)
        assert samples[success] == 2
        assert (
            samples[("orbitmq_sidecar_deliveries_total", (("group", "Wire"), ("kind", "redelivered")))] == 1
        )
    finally:
        sidecar.signal(signal.SIGTERM)
        assert await sidecar.wait() == 0


async def test_send_through_the_sidecar_and_bad_settings(cluster: Cluster) -> None:
    sidecar = await start_sidecar(cluster, "Sender", "--subscribe", "Work", name="x")
    try:
        async with SidecarClient(sidecar.address) as client:
            reply = await client.send("Work", b"via sidecar", tags="T", keys=["k1"])
            # System names are not user properties: the thin client refuses them before sending...
            with pytest.raises(SystemPropertyError, match="property 'UNIQ_KEY' is reserved"):
                await client.send("Work", b"x", properties={"UNIQ_KEY": "myid"})
        assert reply.status == 1 and reply.msg_id
        # ... and the sidecar refuses them from any application on its wire, where TAGS, KEYS
        # and the timing names set the message's tags, keys and timing.
        async with grpc.aio.insecure_channel(sidecar.address) as channel:
            stub = sidecar_pb2_grpc.SidecarStub(channel)
            for properties, refusal in (
                ({"UNIQ_KEY": "myid"}, "property 'UNIQ_KEY' is reserved for the system"),
                ({"REAL_TOPIC": "Other"}, "property 'REAL_TOPIC' is reserved for the system"),
                ({"DELAY": "soon"}, "property DELAY 'soon' must be a non-negative whole number"),
            ):
                wire = common_pb2.Message(topic="Work", body=b"x", properties=properties)
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.Send(sidecar_pb2.SidecarSendRequest(message=wire))
                failure = failure_of(caught.value)
                assert failure is not None and failure.reason == ErrorReason.MESSAGE_ILLEGAL
                assert refusal in failure.message, failure.message
            wire = common_pb2.Message(topic="Work", body=b"tagged", properties={"TAGS": "T", "KEYS": "a b"})
            tagged = await stub.Send(sidecar_pb2.SidecarSendRequest(message=wire))
        async with Admin(cluster.address) as admin:
            stored = await admin.message_by_id(tagged.msg_id, "Work")
        assert (stored.tags, stored.keys) == ("T", ("a", "b"))
    finally:
        sidecar.signal(signal.SIGTERM)
        await sidecar.wait()
    bad = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "orbitmq.cli.main",
            "sidecar",
            "--namesrv",
            cluster.address,
            "--group",
            "G",
            "--subscribe",
            "Work:sql:a >",
        ],
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert bad.returncode != 0 and "invalid SQL92 expression 'a >'" in bad.stderr


async def test_concurrent_sends_travel_together_each_with_its_own_result(cluster: Cluster) -> None:
    """Sends made while others are on their way go to the sidecar as SendBatch calls: each
    gets its own result (its message's id and stored offset), and a message the sidecar
    refuses fails alone, with its reason."""
    sidecar = await start_sidecar(cluster, "Sender", "--subscribe", "Work", name="batch")
    try:
        async with SidecarClient(sidecar.address) as client:
            await client.send("Work", b"warm-up")
            before = client.sends.calls
            outcomes = await asyncio.gather(
                *(client.send("Work", f"m{i}".encode(), keys=[f"k{i}"]) for i in range(100)),
                client.send("Bad Topic!", b"refused"),
                return_exceptions=True,
            )
            calls = client.sends.calls - before
        assert calls < 50, f"{calls} calls for 101 concurrent sends"
        *results, refused = outcomes
        assert isinstance(refused, RpcFailure) and "Bad Topic!" in refused.message, refused
        assert all(isinstance(r, sidecar_pb2.SidecarSendResponse) for r in results), results
        assert len({r.msg_id for r in results}) == 100  # type: ignore[union-attr]
        async with Admin(cluster.address) as admin:
            for i in (0, 37, 99):
                stored = await admin.message_by_id(results[i].msg_id, "Work")  # type: ignore[union-attr]
                assert stored.body == f"m{i}".encode() and stored.keys == (f"k{i}",)
                assert stored.queue_offset == results[i].queue_offset  # type: ignore[union-attr]
    finally:
        sidecar.signal(signal.SIGTERM)
        await sidecar.wait()


async def test_a_send_that_fails_for_good_is_one_clear_status(cluster: Cluster) -> None:
    """The broker is gone: the sidecar's producer retries for --send-timeout-ms, then the
    application gets the reason and one line naming the topic — no gRPC dump."""
    from orbitmq.common.rpc import RpcFailure
    from orbitmq.v1.broker_pb2 import ErrorReason

    sidecar = await start_sidecar(cluster, "Sender", "--subscribe", "Work", "--send-timeout-ms", "1000")
    try:
        await cluster.stop_broker("broker-a")
        async with SidecarClient(sidecar.address) as client:
            began = time.monotonic()
            with pytest.raises(RpcFailure) as caught:
                await client.send("Work", b"nowhere to go")
        assert 0.5 < time.monotonic() - began < 5
        assert caught.value.reason == ErrorReason.SERVICE_NOT_AVAILABLE
        assert caught.value.message.startswith("send to topic Work failed")
        assert "s of retries" in caught.value.message and "\n" not in caught.value.message
    finally:
        sidecar.signal(signal.SIGTERM)
        await sidecar.wait()


async def test_a_slow_app_does_not_grow_the_sidecar_past_flow_control(cluster: Cluster) -> None:
    async with Producer("PG", cluster.address) as producer:
        queues = await producer.write_queues("Work")
        body = bytes(1024)
        for first in range(0, 40_000, 128):
            batch = [Message("Work", body) for _ in range(128)]
            await producer.send_batch(batch, queue=queues[(first // 128) % len(queues)])
    sidecar = await start_sidecar(cluster, "Slow", "--subscribe", "Work", "--max-in-flight", "4", name="slow")

    def rss_mb() -> float:
        for line in Path(f"/proc/{sidecar.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    before = rss_mb()
    received = 0

    async def slow_app() -> None:
        nonlocal received
        async with SidecarClient(sidecar.address) as client:
            async for delivery in client.deliveries(app_id="slow", max_in_flight=4):
                await asyncio.sleep(0.002)
                received += 1
                await delivery.ack()

    app = asyncio.get_running_loop().create_task(slow_app())
    peak = before
    try:
        for _ in range(80):  # 8 s
            await asyncio.sleep(0.1)
            peak = max(peak, rss_mb())
    finally:
        app.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await app
        sidecar.signal(signal.SIGTERM)
        await sidecar.wait()
    print(f"slow app: {received} of 40000 consumed; sidecar RSS {before:.0f} MB -> peak {peak:.0f} MB")
    assert 0 < received < 40_000, "the backlog outlasted the test: the bound is what is measured"
    # Unbounded, the 40 MB backlog would be pulled into Python objects (well over 80 MB);
    # flow control caps it at 1 000 messages per queue (8 MB of bodies).
    assert peak - before < 60, f"sidecar grew {peak - before:.0f} MB"
