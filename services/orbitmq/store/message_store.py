"""The message store: commit log + consume queues + index behind one synchronous API.

This is the storage engine a broker serves (RocketMQ's ``DefaultMessageStore``). It is
synchronous and does no waiting of its own: appends are memory copies, and the blocking work
(fsync, recovery scans) is in methods that :class:`orbitmq.store.service.StoreService` runs in
worker threads, so an asyncio event loop that uses the store never blocks on the disk.

Start-up recovery is the same code after a clean stop and after a crash; what differs is how
much there is to do. The checkpoint says how far the commit log was flushed and how far
consume queues and index were built; the log tail past the flushed point is re-scanned with
CRC checks and cut at the first bad record, consume-queue units that point past the cut are
dropped, and the dispatcher replays the log into consume queues and index from the
checkpoint. An ``abort`` file, present while the store is open, tells a crash from a stop.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import add
from pathlib import Path
from typing import Any

from orbitmq.common.clock import SYSTEM_CLOCK, Clock
from orbitmq.common.errors import OrbitError
from orbitmq.common.names import InvalidNameError, validate_topic_name
from orbitmq.common.procs import command_of, flock_holders
from orbitmq.common.topics import DUE_TIME_TOPICS
from orbitmq.store.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from orbitmq.store.commitlog import AppendedBatch, CommitLog, RecoveryReport
from orbitmq.store.config import BrokerRole, StoreConfig
from orbitmq.store.consume_queue import UNIT, ConsumeQueue, Unit
from orbitmq.store.disk import DiskGuard
from orbitmq.store.dispatcher import Dispatcher
from orbitmq.store.index_file import IndexService
from orbitmq.store.mapped_file import FsyncFn, fsync_directory, list_offset_files
from orbitmq.store.message_filter import MessageFilter
from orbitmq.store.message_id import decode_offset_msg_id
from orbitmq.store.pull_read import PullRead
from orbitmq.store.record import (
    BLANK_MAGIC,
    HEADER,
    MAX_PROPERTIES_BYTES,
    PREFIX,
    RECORD_FIXED_BYTES,
    InboundMessage,
    MessageBatch,
    RecordError,
    ScannedBatch,
    StoredMessage,
    check_properties,
    decode,
    encode_host,
    separators_intact,
)
from orbitmq.store.results import GetResult, GetStatus, PutResult, PutStatus

log = logging.getLogger(__name__)

MAX_QUEUE_ID = 65_535
_HOST_CACHE_SIZE = 100_000
_ALL = 1 << 62
Batch = Sequence[InboundMessage] | MessageBatch | ScannedBatch


class StoreError(OrbitError):
    """The store cannot be opened or used as asked (locked, closed, damaged beyond recovery)."""


class StoreLockedError(StoreError):
    """Another process holds the store's lock; ``holder_pid`` names it when it could be read."""

    retriable = True

    def __init__(self, message: str, holder_pid: int | None = None) -> None:
        super().__init__(message)
        self.holder_pid = holder_pid


def lock_holder(root: Path) -> int | None:
    """The PID of the process holding the store lock in ``root`` now (-1 if it wrote none), or
    None when the lock is free.

    Lets a supervisor name a leftover broker before starting anything (the lock is only probed:
    taken and released at once).
    """
    try:
        fd = os.open(root / "lock", os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_pid(fd) or next(iter(flock_holders(root / "lock")), -1)
    finally:
        os.close(fd)  # closing drops a lock taken just now
    return None


def _read_pid(fd: int) -> int | None:
    """The PID a lock holder wrote into the lock file (None for an older, empty lock file:
    then /proc/locks may still tell)."""
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None


def _locked_message(root: Path, holder: int | None) -> str:
    if holder is None:
        return f"data directory {root} is in use by another process; stop it or choose another directory"
    command = command_of(holder)
    shown = f" ({command})" if command else ""
    return (
        f"data directory {root} is in use by PID {holder}{shown}; one process at a time may use "
        f"a store: stop it (kill {holder}) or choose another directory"
    )


@dataclass(frozen=True, slots=True)
class OpenReport:
    """What start-up found and did; logged, and checked by tests."""

    clean_shutdown: bool
    checkpoint: Checkpoint | None
    commitlog: RecoveryReport
    units_dropped: int
    replayed_bytes: int


class MessageStore:
    def __init__(self, config: StoreConfig, *, clock: Clock = SYSTEM_CLOCK, fsync: FsyncFn = os.fdatasync):
        self.config = config
        self.role = config.broker_role
        """Changes on failover: a slave refuses writes and does not correct offsets by default."""
        self.clock = clock
        self._fsync = fsync
        root = config.data_dir
        self._root = root
        self._consume_queue_dir = root / "consumequeue"
        self._checkpoint_path = root / "checkpoint"
        self._abort_path = root / "abort"
        self._lock_fd = -1
        self.commitlog = CommitLog(root / "commitlog", config.segment_bytes, config.store_host, fsync)
        self.index = IndexService(root / "index", config.index_slot_count, config.index_max_entries)
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.dispatcher = Dispatcher(
            self.commitlog, self._queue_of, self.index.build_batch, config.delay_levels_ms
        )
        self._put_lock = threading.Lock()
        self.disk = DiskGuard(config)
        """The disk's used ratio and whether sends are refused for it (see :mod:`orbitmq.store.disk`)."""
        self.dispatch_on_put = False
        """Dispatch each put's records as part of the put when nothing precedes them (the running
        broker's choice, see :class:`~orbitmq.store.service.StoreService`); off, puts only queue
        them for :meth:`dispatch_pending`, which a library user calls when it likes."""
        self._topic_raw: dict[str, bytes] = {}
        """Validated topic names and their UTF-8 bytes."""
        self._hosts: set[str] = set()
        """Born-host strings known to parse."""
        self._open = False
        self._slave_advice_lag = config.slave_advice_lag_bytes
        self.visible_end: int | None = None
        """Readers (:meth:`get_message`) see only records ending at or below this commit-log
        offset; None: every record. A SYNC_MASTER sets it to what its slave holds
        (:mod:`orbitmq.broker.read_fence`)."""
        self._max_batch_bytes = self.commitlog.max_record_bytes()

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._open

    def open(self) -> OpenReport:
        """Load and recover; blocking (scans files), so async callers run it in a thread."""
        if self._open:
            raise StoreError(f"store {self._root} is already open")
        try:
            self._root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(
                f"data directory {self._root} cannot be created ({error.strerror}): it must be a "
                "directory this user can write, under a parent that exists; choose another (--data-dir)"
            ) from None
        self._acquire_lock()
        try:
            report = self._recover()
        except BaseException:
            self._close_files()
            self._release_lock()
            raise
        self._abort_path.touch()
        fsync_directory(self._root)
        self._open = True
        log.info(
            "store %s open (%s shutdown): log %d..%d, %d queues, replayed %d bytes",
            self._root,
            "clean" if report.clean_shutdown else "unclean",
            self.commitlog.min_offset,
            self.commitlog.max_offset,
            len(self._queues),
            report.replayed_bytes,
        )
        return report

    def _check_segment_size(self) -> None:
        """Segments are named by offset and sized alike, so an existing commit log keeps the
        segment size it was created with: a different setting is a user's mistake, said once."""
        files = list_offset_files(self.commitlog.directory)
        if not files:
            return
        found = files[0][1].stat().st_size
        wanted = self.commitlog.segment_bytes
        if found != wanted:
            raise StoreError(
                f"the commit log in {self.commitlog.directory} has {found}-byte segments but the "
                f"segment size is set to {wanted}: an existing store keeps its segment size; set "
                f"segment_bytes to {found} (--segment-bytes {found}) or use a new data directory"
            )

    def _recover(self) -> OpenReport:
        clean = not self._abort_path.exists()
        checkpoint = read_checkpoint(self._checkpoint_path)
        self._check_segment_size()
        self.commitlog.load()
        self._load_consume_queues()
        index_from = self.index.load(
            None if clean and checkpoint else (checkpoint.index_flushed if checkpoint else 0)
        )
        commitlog_report = self.commitlog.recover(checkpoint.commitlog_flushed if checkpoint else 0)
        dropped = sum(q.truncate_tail(self._unit_checker(q)) for q in self._queues.values())
        for queue in self._queues.values():
            queue.delete_before_physical(self.commitlog.min_offset)
        replay_from = min(checkpoint.consume_queue_flushed if checkpoint else 0, index_from)
        self.dispatcher.dispatched_offset = min(
            max(replay_from, self.commitlog.min_offset), self.commitlog.max_offset
        )
        replayed = self.dispatcher.dispatch_pending(_ALL)
        self.commitlog.queue_offsets = {key: q.max_offset for key, q in self._queues.items()}
        return OpenReport(clean, checkpoint, commitlog_report, dropped, replayed)

    def _load_consume_queues(self) -> None:
        if not self._consume_queue_dir.is_dir():
            return
        for topic_dir in sorted(self._consume_queue_dir.iterdir()):
            for queue_dir in sorted(topic_dir.iterdir()):
                if not queue_dir.name.isdigit():
                    log.warning("ignoring %s: not a queue directory", queue_dir)
                    continue
                queue = self._new_queue(topic_dir.name, int(queue_dir.name))
                queue.load()

    def _unit_checker(self, queue: ConsumeQueue):  # type: ignore[no-untyped-def]
        def is_valid(queue_offset: int, unit: Unit) -> bool:
            physical, size, _ = unit
            record = self.commitlog.read(physical, min(size, HEADER.size))
            if record is None or len(record) < HEADER.size:
                return False
            fields = HEADER.unpack(record)
            return fields[0] == size and fields[3] == queue.queue_id and fields[5] == queue_offset

        return is_valid

    def close(self) -> None:
        """Dispatch and flush everything, write the checkpoint, remove the abort marker; idempotent."""
        if not self._open:
            return
        self._open = False
        self.dispatcher.dispatch_pending(_ALL)
        self.commitlog.flush()
        self.flush_consume_queues()
        self._close_files()
        self._abort_path.unlink(missing_ok=True)
        fsync_directory(self._root)
        self._release_lock()

    def _close_files(self) -> None:
        self.commitlog.close()
        for queue in self._queues.values():
            queue.close()
        self.index.close()

    def _acquire_lock(self) -> None:
        """Take the directory's ``lock`` file (flock: freed by the kernel when the holder dies,
        however it dies) and write our PID into it, so a refused start can name the holder."""
        fd = os.open(self._root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd) or next(iter(flock_holders(self._root / "lock")), None)
            os.close(fd)
            raise StoreLockedError(_locked_message(self._root, holder), holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- writing -------------------------------------------------------------------------------

    def put_message(self, message: InboundMessage, *, bookkeeping: bool = False) -> PutResult:
        return self.put_messages((message,), bookkeeping=bookkeeping)

    def put_messages(self, messages: Sequence[InboundMessage], *, bookkeeping: bool = False) -> PutResult:
        """Append one message or a batch contiguously; validation failures are results, not errors.

        Nothing is written unless every message of the batch is valid. The result does not wait
        for a flush: :class:`~orbitmq.store.service.StoreService` adds that for SYNC_FLUSH.

        ``bookkeeping`` records are the broker's own about messages already stored (POP acks and
        checkpoints, transaction commits and ops, retries, delayed and timed deliveries): a disk
        past ``disk_space_warning_level_ratio`` does not refuse them, so consumers keep acking and
        messages keep being delivered; only a disk with no space left does.
        """
        refused = self._refuses_writes(bookkeeping)
        if refused is not None:
            return refused
        if not messages:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, reason="a batch must hold at least one message")
        topics_raw: list[bytes] = []
        properties_raws: list[bytes] = []
        sizes: list[int] = []
        total = 0
        topic_raw_of = self._topic_raw
        max_body = self.config.max_message_bytes
        overhead = RECORD_FIXED_BYTES
        for message in messages:
            topic_raw = topic_raw_of.get(message.topic)
            body = message.body
            if (
                message.born_host not in self._hosts
                or topic_raw is None
                or type(body) is not bytes
                or len(body) > max_body
                or not 0 <= message.queue_id <= MAX_QUEUE_ID
                or message.reconsume_times < 0
            ):
                refused = self._check(message)
                if refused is not None:
                    return refused
                topic_raw = self._topic_bytes(message.topic)
            properties = message.properties
            if properties:
                properties_raw = "".join([f"{k}\x01{v}\x02" for k, v in properties.items()]).encode()
                if len(properties_raw) > MAX_PROPERTIES_BYTES:
                    return PutResult(
                        PutStatus.PROPERTIES_SIZE_EXCEEDED,
                        reason=f"properties of {len(properties_raw)} bytes exceed the limit of "
                        f"{MAX_PROPERTIES_BYTES} bytes",
                    )
                if not separators_intact(properties_raw, len(properties)):
                    return _illegal(check_properties(properties) or "properties are malformed")
            else:
                properties_raw = b""
            size = overhead + len(topic_raw) + len(properties_raw) + len(body)
            total += size
            topics_raw.append(topic_raw)
            properties_raws.append(properties_raw)
            sizes.append(size)
        refused = self._refuses_size(len(sizes), total)
        if refused is not None:
            return refused
        return self._append(self.commitlog.append, messages, topics_raw, properties_raws, sizes, total)

    def put_batch(self, batch: MessageBatch) -> PutResult:
        """Append a :class:`MessageBatch`: the records, checks and results of :meth:`put_messages`.

        Shared fields are checked once and per-message checks run over whole columns (the
        longest body, the longest properties, the separators of all properties at once); only
        when one fails are the messages checked one by one, to refuse with the same reason
        :meth:`put_messages` gives.
        """
        refused = self._refuses_writes()
        if refused is not None:
            return refused
        bodies, properties = batch.bodies, batch.properties
        count = len(bodies)
        if not count:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, reason="a batch must hold at least one message")
        if len(properties) != count or len(batch.flags) != count:
            return _illegal(f"a batch of {count} bodies needs as many properties and flags")
        topic_raw = self._topic_raw.get(batch.topic)
        if (
            topic_raw is None
            or not self._shared_fields_known(batch)
            or set(map(type, bodies)) != {bytes}
            or max(map(len, bodies)) > self.config.max_message_bytes
        ):
            for index in range(count):
                refused = self._check(batch.message(index))
                if refused is not None:
                    return refused
            topic_raw = self._topic_bytes(batch.topic)
        properties_raw = [
            "".join([f"{k}\x01{v}\x02" for k, v in p.items()]).encode() if p else b"" for p in properties
        ]
        joined = b"".join(properties_raw)
        if max(map(len, properties_raw)) > MAX_PROPERTIES_BYTES or not separators_intact(
            joined, sum(map(len, properties))
        ):
            # Sums over the batch hold exactly when every message's do (see separators_intact);
            # find the first message at fault to refuse it as a single put would.
            for raw, p in zip(properties_raw, properties, strict=True):
                if len(raw) > MAX_PROPERTIES_BYTES:
                    return PutResult(
                        PutStatus.PROPERTIES_SIZE_EXCEEDED,
                        reason=f"properties of {len(raw)} bytes exceed the limit of "
                        f"{MAX_PROPERTIES_BYTES} bytes",
                    )
                if not separators_intact(raw, len(p)):
                    return _illegal(check_properties(p) or "properties are malformed")
        sizes = list(
            map(
                (RECORD_FIXED_BYTES + len(topic_raw)).__add__,
                map(add, map(len, bodies), map(len, properties_raw)),
            )
        )
        total = sum(sizes)
        refused = self._refuses_size(count, total)
        if refused is not None:
            return refused
        return self._append(self.commitlog.append_batch, batch, topic_raw, properties_raw, sizes, total)

    def put_scanned(self, batch: ScannedBatch) -> PutResult:
        """Append a :class:`ScannedBatch` (the C send path): the same records and results as
        :meth:`put_batch` of ``batch.unpacked()``, which takes over whenever a check does not
        pass, so refusals (and their words) have one source."""
        topic_raw, columns = self._topic_raw.get(batch.topic), batch.columns
        if (
            topic_raw is None
            or not self._open
            or self.role is BrokerRole.SLAVE
            or self.disk.refusal is not None
            or batch.topic in DUE_TIME_TOPICS  # units are due times: the dispatcher reads properties
            or not self._shared_fields_known(batch)
            or columns.body_max > self.config.max_message_bytes
            or columns.properties_max > MAX_PROPERTIES_BYTES
        ):
            return self.put_batch(batch.unpacked())
        total = columns.count * (RECORD_FIXED_BYTES + len(topic_raw)) + columns.payload_bytes
        if total > self._max_batch_bytes:
            return self.put_batch(batch.unpacked())
        return self._append(self.commitlog.append_scanned, batch, topic_raw, total)

    def _refuses_writes(self, bookkeeping: bool = False) -> PutResult | None:
        if not self._open:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason="the store is not open")
        if self.role is BrokerRole.SLAVE:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason="a slave does not accept writes")
        refusal = self.disk.refusal
        if refusal is not None and not (bookkeeping and self.disk.has_room):
            self.disk.refused_writes += 1
            return PutResult(PutStatus.DISK_FULL, reason=refusal)
        return None

    def _shared_fields_known(self, batch: MessageBatch | ScannedBatch) -> bool:
        """The fields a batch's messages share are ones already seen valid (the fast check)."""
        return (
            batch.born_host in self._hosts
            and 0 <= batch.queue_id <= MAX_QUEUE_ID
            and batch.reconsume_times >= 0
        )

    def _refuses_size(self, count: int, total: int) -> PutResult | None:
        if total <= self._max_batch_bytes:
            return None
        return PutResult(
            PutStatus.MESSAGE_ILLEGAL,
            reason=f"{count} message(s) of {total} bytes do not fit in one commit-log segment "
            f"({self._max_batch_bytes} bytes usable)",
        )

    def _append(self, append: Callable[..., AppendedBatch], batch: Batch, *args: Any) -> PutResult:
        """``append(batch, *args, store time)`` under the put lock, then hand its records to the
        dispatcher; a failing disk is a result, not an error."""
        with self._put_lock:
            try:
                appended = append(batch, *args, self.clock.now_ms())
            except OSError as error:  # nothing of the batch is in the log (see CommitLog)
                log.error("commit log append failed: %s", error)
                if self.disk.write_failed(error):
                    self.disk.refused_writes += 1
                    return PutResult(PutStatus.DISK_FULL, reason=self.disk.refusal)
                return PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED, reason=str(error))
            try:
                if self.dispatch_on_put:
                    self.dispatcher.dispatch_appended(batch, appended)
                else:
                    self.dispatcher.submit(batch, appended)
            except OSError as error:
                # The records are in the log (so the send succeeded); a consume-queue file could
                # not be created. The dispatch loop builds their units once there is room
                # (units already put are skipped), as after a crash.
                log.error("dispatch of records at %d failed: %s", appended.first_physical_offset, error)
                self.disk.write_failed(error)
                self.dispatcher.submit(batch, appended)
        return PutResult(PutStatus.PUT_OK, appended)

    def _topic_bytes(self, topic: str) -> bytes:
        raw = self._topic_raw.get(topic)
        if raw is None:
            raw = self._topic_raw[topic] = topic.encode()
        return raw

    def _check(self, message: InboundMessage) -> PutResult | None:
        """The refusal for an invalid message, or None. Property text is checked after encoding."""
        if message.topic not in self._topic_raw:
            try:
                validate_topic_name(message.topic)
            except InvalidNameError as error:
                return PutResult(PutStatus.MESSAGE_ILLEGAL, reason=str(error))
        body = message.body
        if not isinstance(body, bytes | bytearray):
            return _illegal(f"body must be bytes, not {type(body).__name__}")
        if len(body) > self.config.max_message_bytes:
            return _illegal(
                f"body of {len(body)} bytes exceeds the maximum message size of "
                f"{self.config.max_message_bytes} bytes"
            )
        if not 0 <= message.queue_id <= MAX_QUEUE_ID:
            return _illegal(f"queue id {message.queue_id} must be between 0 and {MAX_QUEUE_ID}")
        if message.born_host not in self._hosts:
            try:
                encode_host(message.born_host)
            except ValueError as error:
                return _illegal(str(error))
            if len(self._hosts) < _HOST_CACHE_SIZE:
                self._hosts.add(message.born_host)
        if message.reconsume_times < 0:
            return _illegal(f"reconsume times {message.reconsume_times} must not be negative")
        return None

    # -- dispatch and flush (called by the service) --------------------------------------------

    def queue_ids(self, topic: str) -> list[int]:
        """Ids of the consume queues this store holds for ``topic``, in order."""
        return sorted(queue_id for name, queue_id in list(self._queues) if name == topic)

    def _queue_of(self, topic: str, queue_id: int) -> ConsumeQueue:
        return self._queues.get((topic, queue_id)) or self._new_queue(topic, queue_id)

    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = ConsumeQueue(
            self._consume_queue_dir / topic / str(queue_id),
            topic,
            queue_id,
            self.config.consume_queue_units_per_file,
            self._fsync,
        )
        self._queues[(topic, queue_id)] = queue
        return queue

    # -- replication ---------------------------------------------------------------------------

    def append_replicated(self, offset: int, data: bytes) -> None:
        """Whole records copied from the master's log, placed at the same offsets (a slave);
        the dispatcher then builds consume queues and index from them as from local writes."""
        self.commitlog.append_raw(offset, data)

    def replication_span(self, offset: int, max_bytes: int) -> bytes:
        """Whole records (and a segment's closing blank) from ``offset``: what a master streams
        to its slaves. About ``max_bytes``, more only when one record is bigger; never past the
        end of ``offset``'s segment, and empty when nothing is there yet."""
        data = self.commitlog.read_span(offset, max_bytes)
        end = 0
        while end + PREFIX.size <= len(data):
            total, magic = PREFIX.unpack_from(data, end)
            if total <= 0 or end + total > len(data):
                if end == 0 and magic != BLANK_MAGIC and 0 < total <= self.commitlog.segment_bytes:
                    data = self.commitlog.read_span(offset, total)  # one record bigger than max_bytes
                    return data if len(data) == total else b""
                break
            end += total
        return data[:end]

    def become_master(self) -> None:
        """Take writes from now on (a promoted slave): everything replicated is dispatched, and
        the next queue offsets continue from the consume queues the master's records built."""
        self.dispatcher.dispatch_pending(_ALL)
        self.commitlog.queue_offsets = {key: q.max_offset for key, q in self._queues.items()}
        self.role = BrokerRole.ASYNC_MASTER

    def truncate(self, offset: int) -> int:
        """Drop everything from commit-log ``offset`` on: a former master rejoining as a slave
        keeps only what it shares with the new master. Consume-queue units pointing into the cut
        part go too (index entries may stay: every index hit is re-checked against the log).
        Returns the bytes cut. Blocking; call with writes and replication stopped."""
        if offset >= self.commitlog.max_offset:
            return 0
        self.dispatcher.dispatch_pending(_ALL)
        cut = self.commitlog.truncate(offset)
        for queue in self._queues.values():
            queue.truncate_tail(self._unit_checker(queue))
        self.commitlog.queue_offsets = {key: q.max_offset for key, q in self._queues.items()}
        self.dispatcher.dispatched_offset = min(self.dispatcher.dispatched_offset, offset)
        self.flush_consume_queues()
        log.warning("store %s: cut %d bytes of commit log after offset %d", self._root, cut, offset)
        return cut

    def dispatch_pending(self, max_bytes: int | None = None) -> int:
        return self.dispatcher.dispatch_pending(max_bytes or self.config.dispatch_chunk_bytes)

    def flush_commitlog(self) -> int:
        """fsync the commit log; blocking."""
        return self.commitlog.flush()

    def flush_consume_queues(self) -> Checkpoint:
        """fsync consume queues and index, then record the checkpoint; blocking."""
        dispatched = self.dispatcher.dispatched_offset
        for queue in list(self._queues.values()):
            queue.flush()
        self.dispatcher.catch_up_index()
        index_flushed = self.index.flush()
        checkpoint = Checkpoint(
            commitlog_flushed=self.commitlog.flushed_offset,
            consume_queue_flushed=dispatched,
            index_flushed=index_flushed,
            written_at_ms=self.clock.now_ms(),
        )
        write_checkpoint(self._checkpoint_path, checkpoint)
        return checkpoint

    def delete_expired(self, *, forcibly: bool = False) -> int:
        """Apply retention: expired segments, then the consume-queue and index data behind them.

        ``forcibly`` (the disk past ``disk_space_clean_forcibly_ratio``) deletes the oldest
        segments whatever their age, still never one not yet flushed or dispatched, nor the newest."""
        protect_from = min(self.commitlog.flushed_offset, self.dispatcher.dispatched_offset)
        deleted = self.commitlog.delete_expired(
            self.clock.now_ms(),
            0 if forcibly else self.config.file_reserved_time_ms,
            protect_from,
            self.config.delete_segments_per_pass,
        )
        if deleted:
            minimum = self.commitlog.min_offset
            for queue in list(self._queues.values()):
                queue.delete_before_physical(minimum)
            self.index.delete_before(minimum)
        return deleted

    # -- reading -------------------------------------------------------------------------------

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def queues(self) -> list[tuple[str, int]]:
        return sorted(self._queues)

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self._queues.get((topic, queue_id))
        return queue.min_offset if queue else 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self._queues.get((topic, queue_id))
        return queue.max_offset if queue else 0

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        message_filter: MessageFilter | None = None,
    ) -> GetResult:
        """Read up to ``max_count`` messages of a queue from ``offset`` (RocketMQ's getMessage).

        Statuses and the next offset the consumer must use follow docs/architecture.md, "The storage
        engine"; a master corrects the consumer's offset, a slave only if ``offset_check_in_slave``.
        ``group`` is carried for the broker's statistics and filters; the store itself does not use it.
        """
        del group
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, self._correct(offset, 0), 0, 0)
        low, high = queue.min_offset, queue.max_offset
        if high == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, self._correct(offset, 0), low, high)
        if offset < low:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, self._correct(offset, low), low, high)
        if offset == high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, low, high)
        if offset > high:
            corrected = low if low == 0 else self._visible_high(queue, low, high)
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, self._correct(offset, corrected), low, high)
        return self._read_queue(
            queue, offset, max(1, min(max_count, self.config.max_transfer_count)), message_filter
        )

    def _visible_high(self, queue: ConsumeQueue, low: int, high: int) -> int:
        """The queue offset past its last unit a reader may see (:attr:`visible_end`): a reader
        moved there must not step over units that become visible later."""
        fence = self.visible_end
        while fence is not None and low < high:  # units' records lie in log order: bisect
            middle = (low + high) // 2
            raw = queue.units_raw(middle, 1)
            if not raw:
                break
            physical, size, _code = UNIT.unpack(raw)
            if physical + size <= fence:
                low = middle + 1
            else:
                high = middle
        return high

    def _read_queue(
        self, queue: ConsumeQueue, offset: int, max_count: int, message_filter: MessageFilter | None
    ) -> GetResult:
        limit = self.config.max_transfer_bytes
        read = PullRead(self.commitlog, offset, max_count, limit, message_filter, self.visible_end)
        read.read(queue, offset + max(self.config.max_filter_scan_units, max_count))
        records = read.records
        suggest = bool(records) and self.commitlog.max_offset - read.last_physical > self._slave_advice_lag
        return GetResult(
            read.status,
            read.next_offset,  # moving past what was read (or filtered out) is progress, not a correction
            queue.min_offset,
            queue.max_offset,
            records,
            suggest,
        )

    def _correct(self, old: int, new: int) -> int:
        if self.role is not BrokerRole.SLAVE or self.config.offset_check_in_slave:
            return new
        return old

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return 0
        return queue.offset_by_time(timestamp_ms, self.commitlog.store_timestamp_at)

    def message_at(self, physical_offset: int) -> StoredMessage | None:
        """The message whose record starts at ``physical_offset``, or None."""
        record = self.commitlog.read_record(physical_offset)
        if record is None:
            return None
        try:
            return decode(record)
        except RecordError:
            return None

    def message_by_id(self, msg_id: str) -> StoredMessage | None:
        """Look up an offset message id; ids of other brokers are not found here."""
        host, physical_offset = decode_offset_msg_id(msg_id)
        if encode_host(host) != encode_host(self.config.store_host):
            return None
        return self.message_at(physical_offset)

    def query_by_key(
        self, topic: str, key: str, max_count: int = 32, begin_ms: int = 0, end_ms: int = _ALL
    ) -> list[StoredMessage]:
        """Messages of ``topic`` whose key or unique key is ``key``, stored in [begin, end], newest first.

        The index returns candidates by hash; each is decoded and checked, so hash collisions
        never return another key's message.
        """
        found: list[StoredMessage] = []
        for physical in self.index.query(topic, key, max_count * 4 + 16, begin_ms, end_ms):
            message = self.message_at(physical)
            if message is None or message.topic != topic:
                continue
            if not begin_ms <= message.store_timestamp_ms <= end_ms:
                continue  # the index keeps whole seconds; the record has the exact time
            if key in message.keys or message.properties.get("UNIQ_KEY") == key:
                found.append(message)
                if len(found) >= max_count:
                    break
        return found

    def delete_topic(self, topic: str) -> int:
        """Remove a topic's consume queues (its records leave the log with retention)."""
        doomed = [key for key in self._queues if key[0] == topic]
        with self._put_lock:
            for key in doomed:
                self._queues.pop(key).destroy()
                self.commitlog.queue_offsets.pop(key, None)
        topic_dir = self._consume_queue_dir / topic
        for queue_dir in topic_dir.glob("*"):
            queue_dir.rmdir()
        if topic_dir.exists():
            topic_dir.rmdir()
        return len(doomed)

    @property
    def root(self) -> Path:
        return self._root


def _illegal(reason: str) -> PutResult:
    return PutResult(PutStatus.MESSAGE_ILLEGAL, reason=reason)
