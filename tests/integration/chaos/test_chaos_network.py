"""The network faults against a real ``local up --slaves 1`` routed through toxiproxy and iptables:
one round of each, in a fixed order, under steady sync sends and a push consumer. Each fault
must be in effect while it lasts (no acknowledgement through a partition, the delay in every
acknowledged send's latency, packets dropped for loss), writes must be acknowledged again
after it heals, nothing acknowledged may be lost, and no rule may outlive the cluster."""

from __future__ import annotations

import asyncio
import os
import random
import re
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orbitmq.chaos.checkers import check_acknowledged_consumed, recovery
from orbitmq.chaos.cluster import LocalUpCluster
from orbitmq.chaos.faults import FAULTS
from orbitmq.chaos.history import Delivery, History, Outcome, Send
from orbitmq.chaos.netfilter import PREFIX, Chains, iptables, remove_stale
from orbitmq.chaos.network import Network
from orbitmq.chaos.toxiproxy import ToxiproxyError, binary
from orbitmq.client import (
    Admin,
    ConsumeFromWhere,
    ConsumerSettings,
    Message,
    Producer,
    PushConsumer,
    SendStatus,
    StoredMessage,
)
from orbitmq.common.errors import OrbitError

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        os.geteuid() != 0, reason="iptables rules and processes under their own group need root"
    ),
]

TOPIC = "NetTopic"
FAILOVER_AFTER_MS = 2_000
ORDER = [
    "delay-client-master",
    "partition-client-master",
    "loss-client-master",
    "delay-master-slave",
    "loss-master-slave",
    "partition-master-slave",
]
TESTBED = Path(__file__).resolve().parents[3] / "scripts" / "k8s-testbed"
SETTINGS = ConsumerSettings(rebalance_ms=1_000, heartbeat_ms=1_000, persist_ms=500, route_refresh_ms=1_000)


def _toxiproxy() -> Path:
    """The test bed's toxiproxy-server, built by ``scripts/k8s-testbed build`` when missing (a
    no-op when cached; ``scripts/test`` runs it before the suite)."""
    try:
        return binary()
    except ToxiproxyError:
        built = subprocess.run(
            [str(TESTBED), "build"], capture_output=True, text=True, timeout=1800, check=False
        )
        assert built.returncode == 0, f"scripts/k8s-testbed build failed:\n{built.stderr[-3000:]}"
        return binary()


async def test_each_network_fault_is_in_effect_and_loses_no_acknowledged_message(tmp_path: Path) -> None:
    origin = time.monotonic()

    def clock() -> float:
        return round(time.monotonic() - origin, 4)

    _toxiproxy()
    data = tmp_path / "data"
    cluster = LocalUpCluster(data, FAILOVER_AFTER_MS, network=Network(data))
    history = History()
    await cluster.start()
    assert cluster.network is not None
    chain = cluster.network.chains.name
    try:
        async with Admin(cluster.namesrv) as admin:
            await admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
        consumer = _consumer(cluster.namesrv, history, clock)
        await consumer.start()
        sending = asyncio.Event()
        sending.set()
        async with Producer("NetProducer", cluster.namesrv) as producer:
            senders = [asyncio.create_task(_send(producer, n, history, clock, sending)) for n in range(3)]
            rng = random.Random(7)
            for round_no, name in enumerate(ORDER, 1):
                pair = await cluster.wait_healthy(60)
                assert pair is not None, f"no healthy pair before {name}: {data / 'local-up.log'}"
                await asyncio.sleep(0.5)
                record = await FAULTS[name].inject(cluster, round_no, pair, rng, clock)
                history.faults.append(record)
                await _acknowledged_after(history, record.healed_at or 0.0, 30.0)
            await asyncio.sleep(1.0)
            sending.clear()
            await asyncio.gather(*senders)
        await _consumed(history, 30.0)
        await consumer.close()
    finally:
        await cluster.stop()
    assert chain not in iptables("-S") + iptables("-t", "nat", "-S")  # rules gone with the cluster

    history.drained = list(history.deliveries)  # the live group read every queue from its start
    loss = check_acknowledged_consumed(history)
    assert loss.ok, loss.as_dict()
    for record, row in zip(history.faults, recovery(history), strict=True):
        assert row["writes_s"] is not None, (record, row)
        acked = [s for s in history.sends if s.outcome is Outcome.ACKNOWLEDGED]
        assert record.healed_at is not None
        during = [s for s in acked if record.injected_at + 0.3 <= s.ended <= record.healed_at]
        if record.fault.startswith("partition"):
            assert not during, (record, during[:3])  # nothing gets through
            assert int(record.note.rsplit(": ", 1)[1].split()[0]) > 0, record.note  # packets dropped
        elif record.fault.startswith("loss"):
            assert int(record.note.rsplit(": ", 1)[1].split()[0]) > 0, record.note
        else:  # a round trip or two of the link, twice the one-way delay each, in every send
            one_way_ms = int(re.match(r"(\d+) ms", record.note)[1])  # type: ignore[index]
            inside = [s for s in acked if record.injected_at <= s.started and s.ended <= record.healed_at]
            assert len(inside) >= 2, record  # a long delay in a short window leaves few
            latency_ms = statistics.median((s.ended - s.started) * 1000 for s in inside)
            assert latency_ms >= 1.8 * one_way_ms, (record.note, latency_ms)


def _consumer(namesrv: str, history: History, clock: Callable[[], float]) -> PushConsumer:
    def listen(messages: list[StoredMessage]) -> None:
        for m in messages:
            history.add_delivery(Delivery(m.body.decode(), "NetGroup", clock(), m.queue_id, m.queue_offset))

    consumer = PushConsumer(
        "NetGroup", namesrv, listener=listen, settings=SETTINGS, consume_from=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe(TOPIC)
    return consumer


async def _send(
    producer: Producer, n: int, history: History, clock: Callable[[], float], sending: asyncio.Event
) -> None:
    i = 0
    while sending.is_set():
        message_id, started = f"n{n}-{i}", clock()
        try:
            result = await producer.send(Message(TOPIC, message_id.encode()))
            outcome = Outcome.ACKNOWLEDGED if result.status is SendStatus.SEND_OK else Outcome.UNKNOWN
        except (OrbitError, TimeoutError):
            outcome = Outcome.UNKNOWN
        history.sends.append(Send(message_id, "sync", started, clock(), outcome))
        i += 1
        await asyncio.sleep(0.01)


async def _acknowledged_after(history: History, moment: float, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(s.outcome is Outcome.ACKNOWLEDGED and s.started >= moment for s in history.sends[-50:]):
            return
        await asyncio.sleep(0.1)


async def _consumed(history: History, timeout_s: float) -> None:
    acked = {s.message_id for s in history.sends if s.outcome is Outcome.ACKNOWLEDGED}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not acked <= {d.message_id for d in history.deliveries}:  # noqa: ASYNC110 - listener threads
        await asyncio.sleep(0.2)


def test_the_rules_of_a_run_killed_outright_go_with_the_next_run() -> None:
    """A harness killed by SIGKILL runs neither its ``finally`` nor ``atexit``: its chains stay
    until the next run removes those whose process is gone (and only those)."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale, live = Chains(f"{PREFIX}{gone.pid}-1"), Chains()
    stale.create()
    live.create()
    try:
        stale.drop(9, 0.5)
        removed = remove_stale()
        rules = iptables("-S") + iptables("-t", "nat", "-S")
        assert sorted(removed) == [f"filter {stale.name}", f"nat {stale.name}"]
        assert stale.name not in rules
        assert live.name in rules  # this process is alive: its run goes on
    finally:
        stale.close()
        live.close()
    assert live.name not in iptables("-S") + iptables("-t", "nat", "-S")
