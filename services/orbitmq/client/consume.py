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
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from orbitmq.client.consumer_types import ConsumeStatus, MessageModel, OrderlyStatus
from orbitmq.client.process_queue import ProcessQueue
from orbitmq.client.queue import MessageQueue
from orbitmq.store.record import StoredMessage

if TYPE_CHECKING:
    from orbitmq.client.consumer import PushConsumer

log = logging.getLogger(__name__)

Listener = Callable[[list[StoredMessage]], Any]


async def run_listener(
    listener: Listener, pool: ThreadPoolExecutor, batch: list[StoredMessage], is_coroutine: bool
) -> Any:
    """Run the listener: a coroutine function on the loop, anything else on the pool."""
    if is_coroutine:
        return await listener(batch)
    result = await asyncio.get_running_loop().run_in_executor(pool, listener, batch)
    if inspect.isawaitable(result):
        return await result
    return result


class ConcurrentConsumer:
    """Consume requests (a batch of one queue) go to a queue served by ``consume_threads``
    workers, like RocketMQ's consume thread pool and its request queue: a backlog costs one
    small tuple per batch rather than a task each, and at most that many listeners run at once.
    A request not started when the consumer closes is skipped: its messages stay uncommitted
    and are delivered again to whoever consumes the queue next."""

    def __init__(self, consumer: PushConsumer, listener: Listener, pool: ThreadPoolExecutor) -> None:
        self._consumer = consumer
        self._listener = listener
        self._pool = pool
        self._requests: asyncio.Queue[tuple[MessageQueue, ProcessQueue[StoredMessage], list[StoredMessage]]]
        self._requests = asyncio.Queue()
        self._is_coroutine = inspect.iscoroutinefunction(listener)
        self._workers: list[asyncio.Task[None]] = []
        self._parked: dict[MessageQueue, list[list[StoredMessage]]] = {}
        """Batches that reached a suspended consumer: handed over on resume."""

    def resume(self, mq: MessageQueue, pq: ProcessQueue[StoredMessage]) -> None:
        for batch in self._parked.pop(mq, []):
            self.dispatch(mq, pq, batch)

    def dispatch(
        self, mq: MessageQueue, pq: ProcessQueue[StoredMessage], messages: list[StoredMessage]
    ) -> None:
        if not self._workers:
            loop = asyncio.get_running_loop()
            self._workers = [
                loop.create_task(self._work()) for _ in range(self._consumer.settings.consume_threads)
            ]
        size = self._consumer.settings.consume_batch
        for start in range(0, len(messages), size):
            self._requests.put_nowait((mq, pq, messages[start : start + size]))

    async def _work(self) -> None:
        while True:
            mq, pq, batch = await self._requests.get()
            try:
                await self._consume(mq, pq, batch)
            except Exception:  # a bug here must not stop the worker
                log.exception("consuming %d message(s) of %s failed", len(batch), mq)
            finally:
                self._requests.task_done()

    async def _consume(
        self, mq: MessageQueue, pq: ProcessQueue[StoredMessage], batch: list[StoredMessage]
    ) -> None:
        consumer = self._consumer
        if pq.dropped or consumer.closing:
            return
        if consumer.suspended:
            self._parked.setdefault(mq, []).append(batch)
            return
        pq.mark_consume_start(batch)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            status = await run_listener(self._listener, self._pool, batch, self._is_coroutine)
        except Exception:
            log.exception("listener failed on %d message(s) of %s; they will be retried", len(batch), mq)
            status = ConsumeStatus.RECONSUME_LATER
        if not isinstance(status, ConsumeStatus):
            status = ConsumeStatus.CONSUME_SUCCESS if status is None else ConsumeStatus.RECONSUME_LATER
        consumer.metrics.consumed(mq.topic, status, loop.time() - started, len(batch))
        if status is not ConsumeStatus.CONSUME_SUCCESS:
            if consumer.message_model is MessageModel.BROADCASTING:
                log.warning("broadcasting consumption of %s failed; broadcasting does not retry", mq)
            else:
                # A message whose send-back failed stays in flight: its local retry removes it.
                batch = [m for m in batch if await consumer.send_back_or_retry(mq, pq, m)]
        if pq.dropped:
            return
        offset = pq.remove(batch)
        if offset >= 0:
            consumer.offsets_update(mq, offset)

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
