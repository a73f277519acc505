"""The store's asyncio runtime: group commit, periodic flushes, dispatch and retention.

:class:`StoreService` owns a :class:`MessageStore` and runs its background work as guarded
tasks on the event loop. Everything that blocks on the disk — fsync, recovery scans — runs in
a worker thread through ``asyncio.to_thread``; appends and dispatch are memory copies and run
on the loop.

SYNC_FLUSH uses *group commit* (RocketMQ's GroupCommitService): a writer appends, then waits
for the flushed offset to pass the end of its record. A dedicated thread runs fsyncs back to
back while anyone waits; everything appended while one fsync runs is covered by the next, so
sixteen concurrent writers share an fsync instead of queueing for sixteen. A thread of its own
(rather than ``asyncio.to_thread`` per fsync) lets the next fsync start the moment the last
one ends, overlapping the disk with the event loop's work instead of taking turns with it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Sequence

from orbitmq.common.clock import SYSTEM_CLOCK, Clock
from orbitmq.common.tasks import TaskSet
from orbitmq.store.config import FlushMode, StoreConfig
from orbitmq.store.dispatcher import QueueGrowthListener
from orbitmq.store.mapped_file import FsyncFn
from orbitmq.store.message_store import MessageStore, OpenReport
from orbitmq.store.record import InboundMessage, MessageBatch, ScannedBatch
from orbitmq.store.results import PutResult, PutStatus

log = logging.getLogger(__name__)


class GroupCommitThread:
    """Runs ``flush`` whenever asked, back to back, and reports each flushed offset.

    It blocks on an event between requests (it never polls). A failed fsync is logged and
    the thread keeps serving; writers waiting on it time out with FLUSH_DISK_TIMEOUT.
    """

    def __init__(self, flush: Callable[[], int], report: Callable[[int], object]) -> None:
        self._flush = flush
        self._report = report
        self._wanted = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="orbitmq-group-commit", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self) -> None:
        if not self._wanted.is_set():  # set() takes a lock; most requests find it set already
            self._wanted.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping = True
        self._wanted.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            if self._stopping:
                return
            self._wanted.clear()
            try:
                flushed = self._flush()
            except Exception:
                log.exception("group commit fsync failed")
                continue
            try:
                self._report(flushed)
            except RuntimeError:  # the event loop closed under us
                return


class StoreService:
    def __init__(self, config: StoreConfig, *, clock: Clock = SYSTEM_CLOCK, fsync: FsyncFn = os.fdatasync):
        self.config = config
        self.store = MessageStore(config, clock=clock, fsync=fsync)
        self.store.dispatch_on_put = True  # a send's units exist (and held pulls wake) before its reply
        self._tasks = TaskSet(f"store:{config.data_dir.name}")
        self._dispatch_wakeup = asyncio.Event()
        self._group_commit: GroupCommitThread | None = None
        self._flush_waiters: list[tuple[int, float, asyncio.Future[bool]]] = []
        """(end offset, deadline on the loop clock, future answered True when flushed)."""
        self._sync_flush_timeout_s = config.sync_flush_timeout_ms / 1000
        self.waits_for_flush = config.flush_mode is FlushMode.SYNC_FLUSH
        """A put is durable only after an fsync (SYNC_FLUSH): :meth:`durable` waits for it."""
        self._closed = False
        self.open_report: OpenReport | None = None

    async def start(self) -> OpenReport:
        self.open_report = await asyncio.to_thread(self.store.open)
        self._tasks.spawn("dispatch", self._dispatch_loop())
        if self.config.flush_mode is FlushMode.SYNC_FLUSH:
            loop = asyncio.get_running_loop()
            self._group_commit = GroupCommitThread(
                self.store.flush_commitlog,
                lambda flushed: loop.call_soon_threadsafe(self._on_flushed, flushed),
            )
            self._group_commit.start()
            self._tasks.spawn("flush-timeouts", self._flush_timeout_loop())
        else:
            self._tasks.spawn("flush", self._periodic_flush_loop())
        self._tasks.spawn("flush-consume-queues", self._consume_queue_flush_loop())
        self._tasks.spawn("retention", self._retention_loop())
        self._tasks.spawn("disk", self._disk_loop())
        return self.open_report

    async def close(self) -> None:
        """Stop the loops, then dispatch, flush and checkpoint everything; idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._tasks.close()
        if self._group_commit is not None:
            await asyncio.to_thread(self._group_commit.stop)
        await asyncio.to_thread(self.store.close)  # flushes everything still waiting
        for _, _, waiter in self._flush_waiters:
            if not waiter.done():
                waiter.set_result(True)
        self._flush_waiters.clear()

    async def __aenter__(self) -> StoreService:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # -- writing -------------------------------------------------------------------------------

    async def put_message(self, message: InboundMessage, *, bookkeeping: bool = False) -> PutResult:
        return await self.put_messages((message,), bookkeeping=bookkeeping)

    async def put_messages(
        self, messages: Sequence[InboundMessage], *, bookkeeping: bool = False
    ) -> PutResult:
        """Append, then (SYNC_FLUSH) wait for the fsync that covers the appended records;
        ``bookkeeping``: see :meth:`MessageStore.put_messages`."""
        return await self.durable(self.append_messages(messages, bookkeeping=bookkeeping))

    async def put_batch(self, batch: MessageBatch | ScannedBatch) -> PutResult:
        """:meth:`put_messages` for the messages of one send."""
        return await self.durable(self.append_batch(batch))

    def append_messages(self, messages: Sequence[InboundMessage], *, bookkeeping: bool = False) -> PutResult:
        """The append of :meth:`put_messages`, without its wait: see :meth:`durable`."""
        if self._closed:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason="the store is closing")
        return self._appended(self.store.put_messages(messages, bookkeeping=bookkeeping))

    def append_batch(self, batch: MessageBatch | ScannedBatch) -> PutResult:
        """The append of :meth:`put_batch` (:meth:`MessageStore.put_batch`, or for a batch the
        C path scanned :meth:`MessageStore.put_scanned`), without its wait: see :meth:`durable`.

        Appending is synchronous so that a send that needs no fsync wait (ASYNC_FLUSH, the
        default) costs its caller no coroutine of the store's own."""
        if self._closed:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason="the store is closing")
        if type(batch) is ScannedBatch:
            return self._appended(self.store.put_scanned(batch))
        return self._appended(self.store.put_batch(batch))  # type: ignore[arg-type]

    def _appended(self, result: PutResult) -> PutResult:
        if self.store.dispatcher.pending:  # records the put could not dispatch itself
            self._dispatch_wakeup.set()
        return result

    async def durable(self, result: PutResult) -> PutResult:
        """``result`` once its records are on the disk: at once under ASYNC_FLUSH, after the
        group commit's fsync under SYNC_FLUSH (see :attr:`waits_for_flush`)."""
        if result.ok and self.waits_for_flush:
            return await self._wait_flushed(result)
        return result

    async def _wait_flushed(self, result: PutResult) -> PutResult:
        end = result.end_offset
        if self.store.commitlog.flushed_offset >= end:
            return result
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._flush_waiters.append((end, loop.time() + self._sync_flush_timeout_s, waiter))
        assert self._group_commit is not None
        self._group_commit.request()
        if await waiter:
            return result
        log.warning("flush of offset %d did not finish in %d ms", end, self.config.sync_flush_timeout_ms)
        return result.with_status(
            PutStatus.FLUSH_DISK_TIMEOUT, f"fsync did not finish in {self.config.sync_flush_timeout_ms} ms"
        )

    def wake_dispatcher(self) -> None:
        """Tell the dispatcher new bytes are in the log (replication appends raw data)."""
        self._dispatch_wakeup.set()

    def add_queue_listener(self, listener: QueueGrowthListener) -> None:
        self.store.dispatcher.add_listener(listener)

    # -- background loops ----------------------------------------------------------------------

    async def _dispatch_loop(self) -> None:
        store = self.store
        dispatcher = store.dispatcher
        while True:
            await self._dispatch_wakeup.wait()
            self._dispatch_wakeup.clear()
            # Yield to the loop between chunks so a big backlog cannot starve requests; a pass
            # that caught up needs no second look (the usual case: one send, one pass).
            try:
                while store.dispatch_pending() > 0 and dispatcher.lag_bytes > 0:  # noqa: ASYNC110
                    await asyncio.sleep(0)
            except OSError as error:  # a consume-queue or index file the disk refused: retry later
                log.error("dispatch failed, retrying in %d ms: %s", self.config.disk_check_interval_ms, error)
                store.disk.write_failed(error)
                await asyncio.sleep(self.config.disk_check_interval_ms / 1000)
                self._dispatch_wakeup.set()

    def _on_flushed(self, flushed: int) -> None:
        """Runs on the loop after each group-commit fsync: answer the writers it covered."""
        pending = []
        for entry in self._flush_waiters:
            if entry[0] <= flushed:
                if not entry[2].done():
                    entry[2].set_result(True)
            else:
                pending.append(entry)
        self._flush_waiters = pending

    async def _flush_timeout_loop(self) -> None:
        """Answer writers whose fsync is late; one timer for all instead of one per put."""
        period = self._sync_flush_timeout_s / 4
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for _, deadline, waiter in self._flush_waiters:
                if deadline <= now and not waiter.done():
                    waiter.set_result(False)

    async def _periodic_flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_interval_ms / 1000)
            if self.store.commitlog.max_offset > self.store.commitlog.flushed_offset:
                await self._flush_or_log(self.store.flush_commitlog)

    async def _consume_queue_flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.consume_queue_flush_interval_ms / 1000)
            await self._flush_or_log(self.store.flush_consume_queues)

    async def _flush_or_log(self, flush: Callable[[], object]) -> None:
        """Run ``flush`` in a thread; a disk that refuses (no space for the checkpoint or a new
        index file) is logged and tried again next period, rather than ending the loop for good."""
        try:
            await asyncio.to_thread(flush)
        except OSError as error:
            log.error("store flush failed, trying again next period: %s", error)
            self.store.disk.write_failed(error)

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.clean_interval_ms / 1000)
            self._delete_expired(forcibly=False)

    def _delete_expired(self, *, forcibly: bool) -> int:
        deleted = self.store.delete_expired(forcibly=forcibly)
        if deleted:
            log.info("retention deleted %d commit-log segment(s)%s", deleted, " forcibly" if forcibly else "")
        return deleted

    async def _disk_loop(self) -> None:
        """Read the disk's used ratio every ``disk_check_interval_ms``: clean at once past
        ``disk_max_used_space_ratio``, forcibly past ``disk_space_clean_forcibly_ratio``, and let
        the store refuse sends past ``disk_space_warning_level_ratio`` (see :mod:`orbitmq.store.disk`)."""
        disk = self.store.disk
        while True:
            state = disk.check()
            if state.clean_now and self._delete_expired(forcibly=state.clean_forcibly):
                disk.check()  # space freed: sends may resume before the next period
            await asyncio.sleep(self.config.disk_check_interval_ms / 1000)
