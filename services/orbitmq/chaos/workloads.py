"""Workloads: what the clients do while faults happen, every outcome recorded.

* ``sync``: concurrent senders sharing one producer (so sends also travel coalesced);
* ``batch``: one sender of 8-message batches (one call, one outcome for all 8);
* ``ordered``: one sender per sharding key, one message at a time, numbered; a send with an
  unknown outcome is sent again with the same number (as an application would), so a key's
  acknowledged numbers are its order;
* ``transaction``: a transactional producer with check-backs (:mod:`.transactions`);
* ``pop``: simple consumers of the first topic through ``orbitmq proxy`` (:mod:`.pop`);
* ``sidecar``: an application sending to the first topic and consuming it through
  ``orbitmq sidecar`` (:mod:`.sidecar_load`); the proxy and the sidecar run under the harness
  (:mod:`.gateways`);
and their consumers through the public client: a concurrent push group on the first topic, an
orderly push group on the ordered topic, a push group on the transactions' topic. A send refused
by the broker for a stated, lasting reason (an :class:`~orbitmq.common.rpc.RpcFailure` that is
not retriable: a slave's SLAVE_READ_ONLY, DISK_FULL) failed; any other exception is an unknown
outcome (the call may have been stored before the answer was lost), and so is a non-OK status
(with SYNC_MASTER, SLAVE_NOT_AVAILABLE and FLUSH_SLAVE_TIMEOUT mean the master has it and a
slave may not).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc

from orbitmq.chaos.gateways import PROXY, SIDECAR, Gateways
from orbitmq.chaos.history import Delivery, History, Outcome, Send
from orbitmq.chaos.pop import PopConsumers
from orbitmq.chaos.sidecar_load import SidecarApp
from orbitmq.chaos.transactions import TX_GROUP, TX_TOPIC, TransactionLoad
from orbitmq.client import (
    Admin,
    ConsumeFromWhere,
    ConsumerSettings,
    Message,
    OrderlyStatus,
    Producer,
    PushConsumer,
    SendResult,
    SendStatus,
    StoredMessage,
)
from orbitmq.common.errors import OrbitError
from orbitmq.common.rpc import RpcFailure

TOPIC = "ChaosTopic"
ORDERED_TOPIC = "ChaosOrdered"
QUEUES = 4
SYNC_SENDERS = 3
BATCH_SIZE = 8
ORDERED_KEYS = 4
SEND_PAUSE_S = 0.01
"""Between one sender's sends: a steady, modest rate that leaves the 2-core machine to the
cluster (the harness measures guarantees, not throughput)."""
SETTINGS = ConsumerSettings(
    rebalance_ms=2_000,
    heartbeat_ms=1_000,
    persist_ms=500,
    route_refresh_ms=1_000,
    lock_renew_ms=1_000,
    orderly_recheck_ms=200,
    suspend_orderly_ms=200,
    exception_delay_ms=300,
    suspend_timeout_ms=2_000,
    shutdown_timeout_ms=5_000,
)
"""Consumer timings shortened so a fault's effects (rebalances, lock renewals, committed
offsets) play out within a round."""
GROUPS = {TOPIC: "ChaosConcurrent", ORDERED_TOPIC: "ChaosOrderly", TX_TOPIC: TX_GROUP}
WORKLOADS = ("sync", "batch", "ordered", "transaction", "pop", "sidecar")
TOPIC_OF = {"sync": TOPIC, "batch": TOPIC, "ordered": ORDERED_TOPIC, "transaction": TX_TOPIC}
"""The push group's topic each producing workload needs (``pop`` and ``sidecar`` read :data:`TOPIC`)."""
BROKER_NAME = "broker-a"
"""Local up's broker group (a POP receive names it, as a RocketMQ 5 client takes it from its route)."""


def body(message_id: str, key: str | None = None, seq: int | None = None) -> bytes:
    return f"{message_id}|{key or ''}|{'' if seq is None else seq}".encode()


def parse(data: bytes) -> tuple[str, str | None, int | None]:
    """(message id, sharding key, sequence number) of a :func:`body`."""
    message_id, key, seq = data.decode().split("|")
    return message_id, key or None, int(seq) if seq else None


def delivery(message: StoredMessage, group: str, at: float) -> Delivery:
    message_id, key, seq = parse(message.body)
    return Delivery(message_id, group, at, message.queue_id, message.queue_offset, key, seq)


@dataclass
class Workload:
    """Producers and live consumers of one run, writing into ``history``."""

    namesrv: str
    history: History
    clock: Callable[[], float]
    workloads: tuple[str, ...] = WORKLOADS
    seed: int = 0
    """Seeds the transactions' decisions."""
    data_dir: Path = Path(".")
    """Where the gateways' log goes."""
    sending: bool = True
    gateways: Gateways | None = None
    create_topics: bool = True
    """False when the caller made the topics (the Kubernetes run puts the ordered one on one
    broker group)."""
    _consumers: list[PushConsumer] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _transactions: TransactionLoad | None = None
    _pop: PopConsumers | None = None
    _sidecar: SidecarApp | None = None
    _latest_acknowledged_start: dict[str, float] = field(default_factory=dict)
    """Per workload, the start of its latest acknowledged send."""

    @property
    def topics(self) -> list[str]:
        """The topics the chosen workloads use (the final read reads them all)."""
        wanted = {TOPIC_OF[w] for w in self.workloads if w in TOPIC_OF}
        if {"pop", "sidecar"} & set(self.workloads):
            wanted.add(TOPIC)
        return [t for t in GROUPS if t in wanted]

    def gateway_pids(self) -> dict[str, int]:
        return self.gateways.pids() if self.gateways is not None else {}

    def stats(self) -> dict[str, object]:
        """The clients' own counts: failed POP calls, sidecar stream reopenings, gateway restarts."""
        return {
            "pop_call_errors": self._pop.errors if self._pop else None,
            "sidecar_stream_restarts": self._sidecar.stream_restarts if self._sidecar else None,
            "gateway_restarts": dict(self.gateways.restarts) if self.gateways else {},
        }

    async def start(self) -> None:
        unknown = sorted(set(self.workloads) - set(WORKLOADS))
        if unknown:
            raise ValueError(f"unknown workloads {unknown}; workloads: {list(WORKLOADS)}")
        if self.create_topics:
            async with Admin(self.namesrv) as admin:
                for topic in self.topics:
                    await admin.create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        push_topics = {TOPIC_OF[w] for w in self.workloads if w in TOPIC_OF}
        for topic, group in GROUPS.items():
            if topic not in push_topics:
                continue
            consumer = PushConsumer(
                group,
                self.namesrv,
                listener=self._listener(group, topic == ORDERED_TOPIC),
                orderly=topic == ORDERED_TOPIC,
                settings=SETTINGS,
                consume_from=ConsumeFromWhere.FIRST_OFFSET,
            )
            consumer.subscribe(topic)
            await consumer.start()
            self._consumers.append(consumer)
        gateways = tuple(g for w, g in (("pop", PROXY), ("sidecar", SIDECAR)) if w in self.workloads)
        if gateways:
            self.gateways = Gateways(self.namesrv, self.data_dir, gateways, sidecar_topic=TOPIC)
            await self.gateways.start()
        if PROXY in gateways:
            assert self.gateways is not None
            self._pop = PopConsumers(
                self.gateways.address(PROXY), TOPIC, BROKER_NAME, self.history, self.clock, parse
            )
            self._pop.start()
        if SIDECAR in gateways:
            assert self.gateways is not None
            self._sidecar = SidecarApp(
                self.gateways.address(SIDECAR), TOPIC, self.history, self.clock, parse, body
            )
            self._sidecar.start()
            self._tasks.append(asyncio.create_task(self._sidecar.produce(lambda: self.sending, self._record)))
        if "transaction" in self.workloads:
            self._transactions = TransactionLoad(self.namesrv, self.history, random.Random(self.seed), body)
            await self._transactions.open()
            self._tasks.append(
                asyncio.create_task(self._transactions.produce(lambda: self.sending, self._record))
            )
        self._tasks.append(asyncio.create_task(self._produce()))

    def _listener(self, group: str, orderly: bool) -> Callable[[list[StoredMessage]], object]:
        def listen(messages: list[StoredMessage]) -> object:
            now = self.clock()
            for message in messages:
                self.history.add_delivery(delivery(message, group, now))
            return OrderlyStatus.SUCCESS if orderly else None

        return listen

    async def _produce(self) -> None:
        chosen = set(self.workloads)
        if not chosen & {"sync", "batch", "ordered"}:
            return
        async with Producer("ChaosProducer", self.namesrv) as producer:
            await asyncio.gather(
                *(self._sync_sender(producer, n) for n in range(SYNC_SENDERS if "sync" in chosen else 0)),
                *([self._batch_sender(producer)] if "batch" in chosen else []),
                *(
                    self._ordered_sender(producer, k)
                    for k in range(ORDERED_KEYS if "ordered" in chosen else 0)
                ),
            )

    async def _sync_sender(self, producer: Producer, n: int) -> None:
        i = 0
        while self.sending:
            message_id = f"s{n}-{i}"
            await self._record([message_id], "sync", producer.send(Message(TOPIC, body(message_id))))
            i += 1
            await asyncio.sleep(SEND_PAUSE_S)

    async def _batch_sender(self, producer: Producer) -> None:
        i = 0
        while self.sending:
            ids = [f"b{i}-{j}" for j in range(BATCH_SIZE)]
            await self._record(ids, "batch", producer.send_batch([Message(TOPIC, body(m)) for m in ids]))
            i += 1
            await asyncio.sleep(SEND_PAUSE_S)

    async def _ordered_sender(self, producer: Producer, k: int) -> None:
        key, seq = f"key{k}", 0
        while self.sending:
            message_id = f"o{k}-{seq}"
            message = Message(ORDERED_TOPIC, body(message_id, key, seq))
            outcome = await self._record(
                [message_id], "ordered", producer.send(message, sharding_key=key), key, seq
            )
            if outcome is Outcome.ACKNOWLEDGED:
                seq += 1  # else the same number again: the order a key's acknowledgements define
            await asyncio.sleep(SEND_PAUSE_S)

    async def _record(
        self,
        ids: list[str],
        workload: str,
        call: Awaitable[SendResult],
        key: str | None = None,
        seq: int | None = None,
        *,
        kept: bool = True,
    ) -> Outcome:
        """Await ``call`` and add a :class:`Send` per id to the history (unless not ``kept``:
        a rolled-back transaction's half, which must never be consumed)."""
        started = self.clock()
        queue_id = queue_offset = -1
        error = broker = ""
        try:
            result = await call
            outcome = Outcome.ACKNOWLEDGED if result.status is SendStatus.SEND_OK else Outcome.UNKNOWN
            queue_id, queue_offset, broker = result.queue_id, result.queue_offset, result.broker_name
            if outcome is Outcome.UNKNOWN:
                error = result.status.value
        except (OrbitError, grpc.aio.AioRpcError, TimeoutError) as failure:
            definite = isinstance(failure, RpcFailure) and not failure.retriable  # the broker's own refusal
            outcome = Outcome.FAILED if definite else Outcome.UNKNOWN
            error = f"{type(failure).__name__}: {failure}"[:200]
            await asyncio.sleep(0.05)
        ended = self.clock()
        if outcome is Outcome.ACKNOWLEDGED:
            latest = self._latest_acknowledged_start
            latest[workload] = max(latest.get(workload, -1.0), started)
        for n, message_id in enumerate(ids if kept else []):
            offset = queue_offset + n if queue_offset >= 0 else -1
            self.history.sends.append(
                Send(message_id, workload, started, ended, outcome, queue_id, offset, key, seq, error, broker)
            )
        return outcome

    async def stop_sending(self) -> None:
        self.sending = False
        await asyncio.gather(*self._tasks)

    def acknowledged_after(self, moment: float, target: str = "") -> bool:
        """Whether a send started at or after ``moment`` was acknowledged (writes recovered):
        after a fault of the sidecar, one through the sidecar (the other clients never stopped)."""
        latest = self._latest_acknowledged_start
        if target == SIDECAR and SIDECAR in self.workloads:
            return latest.get("sidecar", -1.0) >= moment
        return max(latest.values(), default=-1.0) >= moment

    async def close(self) -> None:
        self.sending = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for consumer in self._consumers:
            await consumer.close()
        for client in (self._pop, self._sidecar, self._transactions):
            if client is not None:
                await client.close()
        if self.gateways is not None:
            await self.gateways.stop()


DRAIN_SETTINGS = replace(SETTINGS, consume_batch=64)
"""The final read hands the listener 64 messages a call: a run of 30 rounds leaves ~50 000."""
DRAIN_IDLE_S = 20.0
"""The final read gives up when nothing new arrived for this long (a queue it cannot reach)."""


async def drain(
    namesrv: str, history: History, clock: Callable[[], float], timeout_s: float, topics: list[str]
) -> None:
    """Read ``topics`` from the first offset with a fresh group into ``history.drained``: what
    the brokers kept. Stops once every acknowledged message is seen (but a retired group's:
    :meth:`~.history.History.stored_expected`) and nothing new came for a second; else when
    nothing new came for :data:`DRAIN_IDLE_S` or at ``timeout_s`` (``drain_complete`` is then
    False when an expected message is unseen)."""
    acked = history.stored_expected()
    seen: set[str] = set()

    def listen(messages: list[StoredMessage]) -> None:
        for message in messages:
            d = delivery(message, "drain", clock())
            history.drained.append(d)
            seen.add(d.message_id)

    consumer = PushConsumer(
        "ChaosDrain",
        namesrv,
        listener=listen,
        settings=DRAIN_SETTINGS,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )
    for topic in topics:
        consumer.subscribe(topic)
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout_s
        count, progressed = -1, time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - progressed < DRAIN_IDLE_S:
            await asyncio.sleep(1.0)
            if len(history.drained) == count and acked <= seen:
                break
            if len(history.drained) != count:
                count, progressed = len(history.drained), time.monotonic()
        history.drain_complete = acked <= seen
    finally:
        await consumer.close()
