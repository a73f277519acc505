"""The transactional workload: half messages, a seeded local decision, check-backs answered.

Each transaction's decision (commit or roll back) is drawn before its half message is sent and
kept in the history (:class:`~.history.Transaction`); the local transaction answers it, or (a
seeded share) UNKNOWN, which leaves it to the broker's check-back. Every check-back is answered
with the decision and counted: one about a transaction whose local answer was definite means its
EndTransaction was lost (a fault between the half and the end) and the check settled it. The
committed messages are consumed by a push group of their own; the transactions checker judges.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from orbitmq.chaos.history import History, Outcome, Transaction
from orbitmq.client import (
    Message,
    SendResult,
    SendStatus,
    StoredMessage,
    TransactionProducer,
    TransactionResolution,
)

TX_TOPIC = "ChaosTx"
TX_GROUP = "ChaosTxConsumer"
PRODUCER_GROUP = "ChaosTxProducer"
ROLLBACK_SHARE = 0.3
UNKNOWN_SHARE = 0.2
"""Shares of decisions to roll back, and of local transactions answering UNKNOWN."""
HEARTBEAT_MS = 1_000
"""A new master learns of the producer group at its next heartbeat, and its check-backs reach
no one before: with the default 30 s, two passes of the chaos cluster's 1 s checks (15 passes
discard a half) would lose a transaction whose end a failover lost. Shortened as the
consumers' timings are."""
SEND_PAUSE_S = 0.05
"""Between transactions: a few a second, each a half, an end and perhaps a check."""

Record = Callable[..., Awaitable[Outcome]]
""":meth:`.workloads.Workload._record`: a send's outcome into the history."""


@dataclass
class TransactionLoad:
    """One transactional sender. Its producer stays open from :meth:`open` to :meth:`close`,
    after the sends stop, so check-backs go on settling halves through the final read."""

    namesrv: str
    history: History
    rng: random.Random
    body: Callable[[str], bytes]
    _by_id: dict[str, Transaction] = field(default_factory=dict)
    _producer: TransactionProducer | None = None

    async def open(self) -> None:
        self._producer = TransactionProducer(
            PRODUCER_GROUP,
            self.namesrv,
            local_transaction=self._local,
            check=self._check,
            heartbeat_ms=HEARTBEAT_MS,
            route_refresh_ms=HEARTBEAT_MS,
        )
        await self._producer.start()

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.close()

    def _local(self, message: Message, transaction: Transaction) -> TransactionResolution:
        return _resolution(transaction.local)

    def _check(self, half: StoredMessage) -> TransactionResolution:
        """The broker asks about a half message: answer the decision (from the body's id)."""
        transaction = self._by_id.get(half.body.decode().split("|")[0])
        if transaction is None:  # not one of ours: leave it to a later check
            return TransactionResolution.UNKNOWN
        transaction.checks += 1
        return TransactionResolution.COMMIT if transaction.commit else TransactionResolution.ROLLBACK

    async def produce(self, sending: Callable[[], bool], record: Record) -> None:
        """Transactions until ``sending()`` is False. A decision to commit is a send like the
        other workloads' (acknowledged: the loss checker wants it consumed); a rollback's half
        is kept out of the sends (its outcome in :attr:`Transaction.half`), as it must never be."""
        assert self._producer is not None
        i = 0
        while sending():
            message_id = f"t{i}"
            commit = self.rng.random() >= ROLLBACK_SHARE
            local = "unknown" if self.rng.random() < UNKNOWN_SHARE else "commit" if commit else "rollback"
            transaction = Transaction(message_id, commit, local)
            self._by_id[message_id] = transaction
            self.history.transactions.append(transaction)
            call = self._send(self._producer, message_id, transaction)
            outcome = await record([message_id], "transaction", call, kept=commit)
            transaction.half = outcome.value
            i += 1
            await asyncio.sleep(SEND_PAUSE_S)

    async def _send(
        self, producer: TransactionProducer, message_id: str, transaction: Transaction
    ) -> SendResult:
        result, _ = await producer.send_in_transaction(Message(TX_TOPIC, self.body(message_id)), transaction)
        if result.status is not SendStatus.SEND_OK:  # rolled back, its local transaction not run
            transaction.local = "skipped"
        return result


def _resolution(local: str) -> TransactionResolution:
    return {
        "commit": TransactionResolution.COMMIT,
        "rollback": TransactionResolution.ROLLBACK,
    }.get(local, TransactionResolution.UNKNOWN)
