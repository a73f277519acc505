"""Transactional messages: half messages, commit/rollback, and check-backs to producers.

A prepared (half) message is stored invisibly in ``RMQ_SYS_TRANS_HALF_TOPIC``. The producer
ends it with COMMIT (the message is re-put on its real topic) or ROLLBACK (discarded); either
outcome is recorded as an *op* message in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` whose body is the
transaction id, so the outcome survives restarts. Half messages left unresolved longer than the
transaction timeout are checked back with the producer group over a client's session stream;
each check re-appends the half message with its check count (so the scan always moves forward),
and after ``check_max`` checks it is discarded and logged.

The ids of ended transactions are kept only while a half of theirs is at or after the check
progress, where a check pass or a late end could still meet it: behind the progress every half
was handled (ended, or copied by a check), so a late end of a half back there whose id is not
kept, and of which no copy is still open, is one the broker already applied, and is refused.
The set holds about one check interval of transactions, not every transaction the broker ever
saw (a soak found it growing by one per transaction).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from orbitmq.broker.consumers import ClientRegistry
from orbitmq.broker.reput import restore
from orbitmq.common.clock import Clock
from orbitmq.common.properties import TRANSACTION_CHECK_TIMES, TRANSACTION_ID
from orbitmq.common.rpc import RpcFailure
from orbitmq.common.topics import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, Property
from orbitmq.store.config_store import ConsumerOffsetTable
from orbitmq.store.consume_queue import ConsumeQueue
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import InboundMessage, StoredMessage, SysFlag
from orbitmq.store.results import PutResult
from orbitmq.v1 import broker_pb2
from orbitmq.v1.broker_pb2 import ErrorReason, TransactionResolution

log = logging.getLogger(__name__)

CHECK_TIMES = TRANSACTION_CHECK_TIMES
PROGRESS_GROUP = "CID_RMQ_SYS_TRANS"
OP_DONE_TAG = "d"
OP_DISCARD_TAG = "discard"

Put = Callable[[InboundMessage], Awaitable[PutResult]]


def transaction_id_of(message: StoredMessage) -> str:
    return (
        message.properties.get(TRANSACTION_ID) or message.properties.get(Property.UNIQ_KEY) or message.msg_id
    )


class TransactionService:
    def __init__(
        self,
        store: MessageStore,
        progress: ConsumerOffsetTable,
        clients: ClientRegistry,
        clock: Clock,
        put: Put,
        *,
        timeout_ms: int,
        check_max: int,
        check_interval_ms: int,
    ) -> None:
        self._store = store
        self._progress = progress
        self._clients = clients
        self._clock = clock
        self._put = put
        self._timeout_ms = timeout_ms
        self._check_max = check_max
        self._check_interval_s = check_interval_ms / 1000
        self._resolved: set[str] = set()
        self._ops_read = 0
        """Op-topic queue offset :meth:`load` has read up to."""
        self.committed = self.rolled_back = self.checks_sent = self.discarded = 0

    def load(self) -> None:
        """Read the op topic at start (and after the log was cut), keeping the ids of the
        transactions with a half still ahead of the check progress: the others are forgotten
        now, not at the first check pass a minute later (a store holds millions of op records)."""
        self._read_ops()
        queue = self._store.consume_queue(TRANS_HALF_TOPIC, 0)
        if queue is not None:
            self._open_from_progress(queue)

    def _read_ops(self) -> None:
        """Add the op topic's records not read yet to the set of resolved transactions: at start,
        and before every check pass, since a slave promoted to master got its master's op records
        by replication, never through :meth:`end` (a set read once at its start made it check
        back, and commit again, transactions its old master had resolved since)."""
        queue = self._store.consume_queue(TRANS_OP_HALF_TOPIC, 0)
        if queue is None:
            return
        end = queue.max_offset
        for offset in range(max(self._ops_read, queue.min_offset), end):
            unit = queue.unit_at(offset)
            message = self._store.message_at(unit[0]) if unit else None
            if message is not None:
                self._resolved.add(message.body.decode())
        self._ops_read = end

    async def end(self, producer_group: str, commit_log_offset: int, resolution: int) -> None:
        """Apply a producer's decision about the half message at ``commit_log_offset``."""
        if resolution == TransactionResolution.UNKNOWN:
            return
        if resolution not in (TransactionResolution.COMMIT, TransactionResolution.ROLLBACK):
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT, f"transaction resolution {resolution} is not known"
            )
        half = self._store.message_at(commit_log_offset)
        if half is None or half.topic != TRANS_HALF_TOPIC:
            raise RpcFailure(
                ErrorReason.INVALID_OFFSET,
                f"commit log offset {commit_log_offset} does not hold a half message",
            )
        transaction_id = transaction_id_of(half)
        if transaction_id in self._resolved:
            return
        if self._ended_before(half, transaction_id):
            raise RpcFailure(
                ErrorReason.INVALID_OFFSET,
                f"transaction {transaction_id} (half message at commit log offset {commit_log_offset}) "
                "was already ended, or discarded after its checks: an end is applied once",
            )
        if resolution == TransactionResolution.COMMIT:
            real = restore(
                half, drop=(Property.TRANSACTION_PREPARED, CHECK_TIMES), sys_flag=SysFlag.TRANSACTION_COMMIT
            )
            result = await self._put(real)
            if not result.status.stored:
                raise RpcFailure(ErrorReason.SERVICE_NOT_AVAILABLE, f"commit failed: {result.reason}")
            self.committed += 1
        else:
            self.rolled_back += 1
        await self._record(transaction_id, OP_DONE_TAG)

    def _ended_before(self, half: StoredMessage, transaction_id: str) -> bool:
        """Whether the transaction of ``half``, whose id is not kept, was handled: the half is
        behind the check progress and no copy of it is open at or after it. Only a late end
        (a retry long after the first, an answer to an old check) gets this far back, so the
        scan of the open halves is rare."""
        queue = self._store.consume_queue(TRANS_HALF_TOPIC, 0)
        if queue is None:
            return False
        progress = self._progress.query(PROGRESS_GROUP, TRANS_HALF_TOPIC, 0)
        if half.queue_offset >= progress:
            return False
        return transaction_id not in self._latest(queue, max(progress, queue.min_offset), queue.max_offset)

    def _open_from_progress(self, queue: ConsumeQueue) -> tuple[int, int, dict[str, int], set[str]]:
        """The check progress, the half queue's end, the last offset of each transaction between
        them (:meth:`_latest`) and the ids of the transactions ended so far that have a half
        there; forgets the other ended ones, as every half of theirs is behind the progress. The
        ids are taken before the end is read: an id ended later may have a half past that end
        (a check copies an open transaction); one ended before gets no new half."""
        kept = set(self._resolved)
        offset = max(self._progress.query(PROGRESS_GROUP, TRANS_HALF_TOPIC, 0), queue.min_offset)
        end = queue.max_offset
        latest = self._latest(queue, offset, end)
        self._resolved.difference_update(kept.difference(latest))
        return offset, end, latest, kept.intersection(latest)

    async def _record(self, transaction_id: str, tag: str) -> None:
        op = InboundMessage(
            topic=TRANS_OP_HALF_TOPIC, body=transaction_id.encode(), properties={Property.TAGS: tag}
        )
        result = await self._put(op)
        if result.status.stored:
            self._resolved.add(transaction_id)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._check_interval_s)
            try:
                await self.check_once()
            except Exception:
                log.exception("transaction check pass failed")

    async def check_once(self) -> int:
        """One pass over unresolved half messages; returns how many checks were sent."""
        self._read_ops()
        queue = self._store.consume_queue(TRANS_HALF_TOPIC, 0)
        if queue is None:
            return 0
        offset, end, latest, kept = self._open_from_progress(queue)
        now, sent = self._clock.now_ms(), 0
        while offset < end:
            found = self._open_half(queue, offset, latest)
            if found is not None:
                half, transaction_id = found
                # Not yet timed out: the halves after it are newer still. One stamped in the
                # future was stored before the wall clock stepped back: its age is unknown,
                # and waiting for the clock to catch up would hold every later check-back as
                # long as the step; it is checked now (a check is a question: a producer
                # answers UNKNOWN for a transaction still running).
                if 0 <= now - half.store_timestamp_ms < self._timeout_ms:
                    break
                checked = await self._check(half, transaction_id)
                if checked < 0:  # not copied: asked about at the next pass, not skipped
                    break
                sent += checked
            offset += 1
            self._progress.commit(PROGRESS_GROUP, TRANS_HALF_TOPIC, 0, offset)
        # ended before the pass, and passed by it: kept until the next pass, they would double
        # the set (an interval's transactions) for nothing
        self._resolved.difference_update([i for i in kept if latest[i] < offset])
        return sent

    def _latest(self, queue: ConsumeQueue, start: int, end: int) -> dict[str, int]:
        """The last half-queue offset of each transaction in ``start..end``: an earlier record
        of one with a later copy (appended by a check) was handled, its copy is asked about."""
        latest: dict[str, int] = {}
        for offset in range(start, end):
            unit = queue.unit_at(offset)
            half = self._store.message_at(unit[0]) if unit else None
            if half is not None:
                latest[transaction_id_of(half)] = offset
        return latest

    def _open_half(
        self, queue: ConsumeQueue, offset: int, latest: dict[str, int]
    ) -> tuple[StoredMessage, str] | None:
        """The half at ``offset`` and its transaction id while it is to be asked about: no op
        record ended the transaction, and no later copy of it was appended."""
        unit = queue.unit_at(offset)
        half = self._store.message_at(unit[0]) if unit else None
        if half is None:
            return None
        transaction_id = transaction_id_of(half)
        if transaction_id in self._resolved or latest[transaction_id] != offset:
            return None
        return half, transaction_id

    def settle(self, claimed: int) -> None:
        """On a slave: move the check progress toward ``claimed`` (its master's, just copied) only
        past halves this log shows handled, resolved by an op record or copied by a check. The
        master's progress also passes halves handled by records still on their way here (or
        never coming: written while no slave confirmed them); a slave that took it and was
        promoted before they arrived never asked about those transactions again, and a
        committed one never became visible."""
        self._read_ops()
        queue = self._store.consume_queue(TRANS_HALF_TOPIC, 0)
        if queue is None:
            return
        start, end, latest, _ = self._open_from_progress(queue)
        offset, stop = start, min(claimed, end)
        while offset < stop and self._open_half(queue, offset, latest) is None:
            offset += 1
        if offset > start:  # past a handled half: a progress the master has too, none before
            self._progress.commit(PROGRESS_GROUP, TRANS_HALF_TOPIC, 0, offset)

    def forget(self) -> None:
        """After this log was cut (a demoted master aligning with the new one): the op records
        read and the check progress may stand for records that are gone. Everything is read
        again from the log as it now is; the progress restarts at the first half and
        :meth:`settle` moves it past what this log shows handled."""
        self._resolved.clear()
        self._ops_read = 0
        queue = self._store.consume_queue(TRANS_HALF_TOPIC, 0)
        self._progress.commit(PROGRESS_GROUP, TRANS_HALF_TOPIC, 0, queue.min_offset if queue else 0)
        self.load()

    async def _check(self, half: StoredMessage, transaction_id: str) -> int:
        """Copy the half (its check count one more) and ask a producer about the copy: 1 when
        asked, 0 when no producer is connected (the copy is asked about later), -1 when the
        copy was refused (a full disk, a demotion) and the half must stay where the pass is."""
        checks = int(half.properties.get(CHECK_TIMES, "0"))
        if checks >= self._check_max:
            log.warning(
                "transaction %s of producer group %s discarded after %d checks",
                transaction_id,
                half.properties.get(Property.PRODUCER_GROUP),
                checks,
            )
            self.discarded += 1
            await self._record(transaction_id, OP_DISCARD_TAG)
            return 0
        copy = restore(half, drop=())
        copy.topic, copy.queue_id = TRANS_HALF_TOPIC, 0
        copy.properties = {**half.properties, CHECK_TIMES: str(checks + 1), TRANSACTION_ID: transaction_id}
        result = await self._put(copy)
        if not result.status.stored:
            return -1
        placed = result.first
        group = half.properties.get(Property.PRODUCER_GROUP, "")
        record = self._store.commitlog.read(placed.physical_offset, placed.size) or b""
        event = broker_pb2.ServerEvent(
            check_transaction=broker_pb2.CheckTransactionState(
                producer_group=group,
                commit_log_offset=placed.physical_offset,
                msg_id=placed.msg_id,
                transaction_id=transaction_id,
                record=record,
            )
        )
        for client_id in self._clients.producer_clients(group):
            # the stream of this group's producer: a process's producers share a client id, and
            # another group's producer would answer with its own application's records
            session = self._clients.session(client_id, group)
            if session is not None:
                session.push(event)
                self.checks_sent += 1
                return 1
        log.info("no producer of group %s is connected to check transaction %s", group, transaction_id)
        return 0

    @property
    def resolved_count(self) -> int:
        """Ended transactions whose ids are kept (the ``broker_resolved_transactions`` table)."""
        return len(self._resolved)
