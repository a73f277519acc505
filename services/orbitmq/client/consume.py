"""Consume services: run the application's listener on pulled messages (RocketMQ's
ConsumeMessageConcurrentlyService and ConsumeMessageOrderlyService).

Listeners run on a thread pool (or on the loop if they are coroutines), never blocking the
pulls. Concurrent mode consumes any batch any time and commits the smallest offset still in
flight; failures are sent back to the broker for a later retry. Orderly mode runs at most one
batch per queue at a time, under the queue's consume lock, only while the broker lock is held;
a SUSPEND result puts the same messages back and pauses the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from orbitmq.client.consumer_types import ConsumeStatus, MessageModel, MessageVerdicts, OrderlyStatus
from orbitmq.client.process_queue import ProcessQueue
from orbitmq.client.queue import MessageQueue
from orbitmq.store.record import StoredMessage

if TYPE_CHECKING:
    from orbitmq.client.consumer import PushConsumer

log = logging.getLogger(__name__)

Listener = Callable[[list[StoredMessage]], Any]


Request = tuple[MessageQueue, ProcessQueue[StoredMessage], list[StoredMessage]]
"""Messages of one queue for one or more listener calls of ``consume_batch`` each: a whole
pull's while listener calls are quick, else one call's. Each call's list is made when the call
is: a backlog then holds no Python object per message that the cyclic GC must track (lists
waiting in the queue were most of what its full collections walked)."""
MAX_GROUP = 32
"""Most requests one worker takes at once from a backlog."""
QUICK_LISTENER_S = 0.000_2
"""Listener calls faster than this on average are settled in whole pulls and shares of a backlog."""
SHARE_BUDGET_S = 0.05
"""A share's listener calls stop after this long and hand what is left back to the queue, so a
listener that turns slow in the middle of a whole pull gets the other workers' help within
this time."""


Outcome = ConsumeStatus | MessageVerdicts


def _status(result: Any) -> Outcome:
    if isinstance(result, (ConsumeStatus, MessageVerdicts)):
        return result
    return ConsumeStatus.CONSUME_SUCCESS if result is None else ConsumeStatus.RECONSUME_LATER


class Outcomes:
    """The listener calls a share made, in order: each one's result and run time."""

    __slots__ = ("seconds", "statuses")

    def __init__(self) -> None:
        self.statuses: list[Outcome] = []
        self.seconds: list[float] = []


def _call_each(
    listener: Listener, requests: list[list[StoredMessage]], size: int, stopped: Callable[[], bool]
) -> Outcomes:
    """Run the listener on each ``size`` messages of each request in turn (on a pool thread)
    until ``stopped()`` or past the share's budget; an exception fails only its call."""
    outcomes = Outcomes()
    statuses, seconds = outcomes.statuses, outcomes.seconds
    clock = time.perf_counter
    budget_end = clock() + SHARE_BUDGET_S
    for messages in requests:
        for start in range(0, len(messages), size):
            started = clock()
            if stopped() or (statuses and started > budget_end):
                return outcomes
            batch = messages[start : start + size]
            try:
                result = listener(batch)
                status = ConsumeStatus.CONSUME_SUCCESS if result is None else _status(result)
            except Exception:
                log.exception("listener failed on %d message(s); they will be retried", len(batch))
                status = ConsumeStatus.RECONSUME_LATER
            statuses.append(status)
            seconds.append(clock() - started)
    return outcomes


class ConcurrentConsumer:
    """Consume requests go to a queue served by ``consume_threads`` workers, like RocketMQ's
    consume thread pool and its request queue: a backlog costs one small tuple per request
    rather than a task each, and at most that many listener calls run at once.

    While listener calls are quick (:data:`QUICK_LISTENER_S` on average) a pull's messages are
    one request, and a worker takes every request waiting (up to :data:`MAX_GROUP`) and runs
    their listener calls in one pool job, then settles them together: one queue operation per
    pull, one thread hop, process-queue update and offset update per share instead of per
    message, since running quick calls side by side gains nothing. Slower listeners get a
    request per call and a worker only a fair share of those waiting, so listeners waiting on
    I/O keep running in parallel; a share that runs past :data:`SHARE_BUDGET_S` hands its
    remaining calls back to the queue (one request a call once the listener is slow). Each
    call still gets ``consume_batch`` messages and its own result. A request not started when
    the consumer closes is skipped: its messages stay uncommitted and go to whoever consumes
    the queue next.
    """

    def __init__(self, consumer: PushConsumer, listener: Listener, pool: ThreadPoolExecutor) -> None:
        self._consumer = consumer
        self._listener = listener
        self._pool = pool
        self._size = consumer.settings.consume_batch
        self._requests: asyncio.Queue[Request] = asyncio.Queue()
        self._is_coroutine = inspect.iscoroutinefunction(listener)
        self._listener_seconds = QUICK_LISTENER_S
        """Moving average of a listener call's run time (starts at the threshold: spread)."""
        self._workers: list[asyncio.Task[None]] = []
        self._parked: dict[MessageQueue, list[list[StoredMessage]]] = {}
        """Messages that reached a suspended consumer: handed over on resume."""

    def resume(self, mq: MessageQueue, pq: ProcessQueue[StoredMessage]) -> None:
        for messages in self._parked.pop(mq, []):
            self.dispatch(mq, pq, messages)

    def dispatch(
        self, mq: MessageQueue, pq: ProcessQueue[StoredMessage], messages: list[StoredMessage]
    ) -> None:
        if not self._workers:
            loop = asyncio.get_running_loop()
            self._workers = [
                loop.create_task(self._work()) for _ in range(self._consumer.settings.consume_threads)
            ]
        if messages:
            self._queue(mq, pq, messages)

    def _queue(
        self, mq: MessageQueue, pq: ProcessQueue[StoredMessage], messages: list[StoredMessage]
    ) -> None:
        size = self._size
        if self._listener_seconds < QUICK_LISTENER_S or len(messages) <= size:
            self._requests.put_nowait((mq, pq, messages))
        else:
            for start in range(0, len(messages), size):
                self._requests.put_nowait((mq, pq, messages[start : start + size]))

    async def _work(self) -> None:
        workers = len(self._workers)
        while True:
            share = [await self._requests.get()]
            waiting = self._requests.qsize()
            # Quick listeners gain nothing from running side by side: settle what is waiting in
            # one share. Slow ones (I/O) keep the work spread over the workers.
            extra = waiting if self._listener_seconds < QUICK_LISTENER_S else waiting // workers
            for _ in range(min(MAX_GROUP - 1, extra)):
                share.append(self._requests.get_nowait())
            try:
                await self._consume(share)
            except Exception:  # a bug here must not stop the worker
                log.exception("consuming %d request(s) failed", len(share))
            finally:
                for _ in share:
                    self._requests.task_done()

    async def _consume(self, share: list[Request]) -> None:
        consumer = self._consumer
        if consumer.closing:
            return
        if consumer.suspended:
            for mq, _, messages in share:
                self._parked.setdefault(mq, []).append(messages)
            return
        live = [request for request in share if not request[1].dropped]
        for _, pq, messages in live:
            pq.mark_consume_start(messages)
        outcomes = await self._run([messages for _, _, messages in live])
        metrics, size = consumer.metrics, self._size
        average = self._listener_seconds
        for seconds in outcomes.seconds:
            average += (seconds - average) / 16
            metrics.latency.observe(seconds)
        self._listener_seconds = average
        done: dict[MessageQueue, tuple[ProcessQueue[StoredMessage], list[StoredMessage]]] = {}
        success = ConsumeStatus.CONSUME_SUCCESS
        at = 0
        for mq, pq, messages in live:
            calls = -(-len(messages) // size)
            ran = outcomes.statuses[at : at + calls]
            at += len(ran)
            covered = min(len(ran) * size, len(messages))
            if covered < len(messages):  # stopped mid-share
                self._not_run(mq, pq, messages[covered:])
            settled = done.setdefault(mq, (pq, []))[1]
            if ran.count(success) == len(ran):
                if covered:
                    settled.extend(messages[:covered] if covered < len(messages) else messages)
                    metrics.count(mq.topic, success, covered)
                continue
            for call, status in enumerate(ran):
                batch = messages[call * size : call * size + size]
                if status is success:
                    metrics.count(mq.topic, success, len(batch))
                    settled.extend(batch)
                elif isinstance(status, MessageVerdicts):
                    settled.extend(await self._settle_each(mq, pq, batch, status))
                else:
                    metrics.count(mq.topic, status, len(batch))
                    settled.extend(await self._failed(mq, pq, batch))
        for mq, (pq, settled_messages) in done.items():
            if pq.dropped or not settled_messages:
                continue
            offset = pq.remove(settled_messages)
            if offset >= 0:
                consumer.offsets_update(mq, offset)

    def _not_run(
        self, mq: MessageQueue, pq: ProcessQueue[StoredMessage], messages: list[StoredMessage]
    ) -> None:
        """Calls a share did not make: parked while the consumer is suspended, skipped once it
        closes, else queued again (the share ran past its budget): one request a call if the
        listener has turned slow, so idle workers take them."""
        if self._consumer.closing:
            return
        if self._consumer.suspended:
            self._parked.setdefault(mq, []).append(messages)
            return
        self._queue(mq, pq, messages)

    async def _failed(
        self, mq: MessageQueue, pq: ProcessQueue[StoredMessage], batch: list[StoredMessage]
    ) -> list[StoredMessage]:
        """Send back what the listener failed on (clustering); returns the messages to remove
        from the process queue. One whose send-back failed stays: its local retry removes it."""
        consumer = self._consumer
        if consumer.message_model is MessageModel.BROADCASTING:
            log.warning("broadcasting consumption of %s failed; broadcasting does not retry", mq)
            return batch
        return [m for m in batch if await consumer.send_back_or_retry(mq, pq, m)]

    async def _settle_each(
        self,
        mq: MessageQueue,
        pq: ProcessQueue[StoredMessage],
        batch: list[StoredMessage],
        verdicts: MessageVerdicts,
    ) -> list[StoredMessage]:
        """Per-message verdicts: consumed ones removed, failed ones sent back, unconsumed kept."""
        statuses = list(verdicts.statuses)
        if len(statuses) != len(batch):
            log.error(
                "listener gave %d verdict(s) for %d message(s); all will be retried",
                len(statuses),
                len(batch),
            )
            statuses = [ConsumeStatus.RECONSUME_LATER] * len(batch)
        consumed = [m for m, v in zip(batch, statuses, strict=True) if v is ConsumeStatus.CONSUME_SUCCESS]
        # Anything but success or None (not consumed) counts as a failure, as a batch's result does.
        failed = [
            m
            for m, v in zip(batch, statuses, strict=True)
            if v is not None and v is not ConsumeStatus.CONSUME_SUCCESS
        ]
        metrics = self._consumer.metrics
        if consumed:
            metrics.count(mq.topic, ConsumeStatus.CONSUME_SUCCESS, len(consumed))
        if failed:
            metrics.count(mq.topic, ConsumeStatus.RECONSUME_LATER, len(failed))
            consumed += await self._failed(mq, pq, failed)
        return consumed

    async def _run(self, requests: list[list[StoredMessage]]) -> Outcomes:
        """Listener calls: coroutines on the loop one after another, functions in one pool job;
        both stop when the consumer suspends or closes, or past the share's budget."""
        consumer = self._consumer
        size = self._size
        if not self._is_coroutine:
            return await asyncio.get_running_loop().run_in_executor(
                self._pool,
                _call_each,
                self._listener,
                requests,
                size,
                lambda: consumer.suspended or consumer.closing,
            )
        outcomes = Outcomes()
        statuses, seconds = outcomes.statuses, outcomes.seconds
        clock = time.perf_counter
        budget_end = clock() + SHARE_BUDGET_S
        for messages in requests:
            for start in range(0, len(messages), size):
                started = clock()
                # e.g. the listener itself suspended
                if consumer.suspended or consumer.closing or (statuses and started > budget_end):
                    return outcomes
                batch = messages[start : start + size]
                try:
                    result = await self._listener(batch)
                    status = result if result is ConsumeStatus.CONSUME_SUCCESS else _status(result)
                except Exception:
                    log.exception("listener failed on %d message(s); they will be retried", len(batch))
                    status = ConsumeStatus.RECONSUME_LATER
                statuses.append(status)
                seconds.append(clock() - started)
        return outcomes

    async def wait_idle(self, timeout_s: float) -> None:
        """Let running listeners finish (bounded); requests not started are skipped (closing)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._requests.join(), timeout_s)
        for worker in self._workers:
            worker.cancel()
        if self._workers:
            await asyncio.wait(self._workers)


class OrderlyConsumer:
    def __init__(self, consumer: PushConsumer, listener: Listener, pool: ThreadPoolExecutor) -> None:
        self._consumer = consumer
        self._listener = listener
        self._pool = pool
        self._running: dict[MessageQueue, asyncio.Task[None]] = {}

    def resume(self, mq: MessageQueue, pq: ProcessQueue[StoredMessage]) -> None:
        self.dispatch(mq, pq, [])

    def dispatch(
        self, mq: MessageQueue, pq: ProcessQueue[StoredMessage], messages: list[StoredMessage]
    ) -> None:
        task = self._running.get(mq)
        if task is None or task.done():
            self._running[mq] = asyncio.get_running_loop().create_task(self._consume_queue(mq, pq))

    async def _consume_queue(self, mq: MessageQueue, pq: ProcessQueue[StoredMessage]) -> None:
        consumer = self._consumer
        settings = consumer.settings
        while not pq.dropped and not consumer.closing and not consumer.suspended:
            if not pq.locked or pq.is_lock_expired(consumer.clock.now_ms()):
                await asyncio.sleep(settings.orderly_recheck_ms / 1000)
                continue
            batch = pq.take(settings.consume_batch)
            if not batch:
                return
            started = asyncio.get_running_loop().time()
            status = await self._run_locked(pq, batch)
            consumer.metrics.consumed(mq.topic, status, asyncio.get_running_loop().time() - started)
            if status is OrderlyStatus.SUCCESS:
                offset = pq.commit()
                if offset >= 0:
                    consumer.offsets_update(mq, offset)
            else:
                pq.make_available_again(batch)
                await asyncio.sleep(settings.suspend_orderly_ms / 1000)

    async def _run_locked(self, pq: ProcessQueue[StoredMessage], batch: list[StoredMessage]) -> OrderlyStatus:
        """The listener runs under the queue's consume lock, which rebalance takes before a drop."""

        def guarded(messages: list[StoredMessage]) -> Any:
            with pq.consume_lock:
                if inspect.iscoroutinefunction(self._listener):
                    return asyncio.run_coroutine_threadsafe(self._listener(messages), loop).result()
                return self._listener(messages)

        loop = asyncio.get_running_loop()
        try:
            status = await loop.run_in_executor(self._pool, guarded, batch)
        except Exception:
            log.exception("orderly listener failed; the queue pauses and retries the same messages")
            return OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return status if isinstance(status, OrderlyStatus) else OrderlyStatus.SUCCESS

    async def wait_idle(self, timeout_s: float) -> None:
        running = [t for t in self._running.values() if not t.done()]
        if running:
            await asyncio.wait(running, timeout=timeout_s)


ConsumeService = ConcurrentConsumer | OrderlyConsumer
Dispatch = Callable[[MessageQueue, ProcessQueue[StoredMessage], list[StoredMessage]], None]
WaitIdle = Callable[[float], Awaitable[None]]
