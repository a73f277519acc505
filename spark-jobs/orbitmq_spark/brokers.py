"""Talking to the cluster from Spark's Python processes: queue listings and offsets (driver),
reading one queue range and sending batches (executors).

Spark calls a data source from plain synchronous code in separate Python workers, and pickles
readers and writers between them, so no client lives in a reader or writer object: each method
here opens the project's asyncio client through :class:`orbitmq.client.Blocking` (its own event
loop on a daemon thread), runs what it needs as one coroutine — per-queue look-ups run
concurrently — and closes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import grpc

from orbitmq.client.blocking import Blocking
from orbitmq.client.message import Message, SendResult, SendStatus
from orbitmq.client.producer import Producer, sharding_queue
from orbitmq.client.pull_consumer import PullConsumer, PullStatus
from orbitmq.client.queue import MessageQueue
from orbitmq.common.errors import OrbitError
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.common.tls import TlsError
from orbitmq.store.message_filter import TagFilter
from orbitmq.v1.broker_pb2 import ErrorReason
from orbitmq_spark.offsets import DataLossError, QueueBounds, QueueRange, describe, skip_lost
from orbitmq_spark.options import OptionError, QueueKey, ReadOptions, WriteOptions

log = logging.getLogger(__name__)
T = TypeVar("T")

LOOKUP_TIMEOUT_S = 60
"""Bound on one driver-side look-up (every queue's offsets at once)."""


def _explain(error: Exception, namesrv: str) -> Exception:
    """Cluster failures at planning time as option errors: which option, which rule."""
    if isinstance(error, grpc.aio.AioRpcError):
        error = failure_of(error) or error
    if isinstance(error, RpcFailure) and error.reason == ErrorReason.TOPIC_NOT_EXIST:
        return OptionError("topic", f"{error.message} on the name servers {namesrv} (the topic must exist)")
    if isinstance(error, RpcFailure) and error.reason == ErrorReason.SERVICE_NOT_AVAILABLE:
        return OptionError("namesrv", f"{error.message} (the name servers must answer)")
    if isinstance(error, TlsError):
        return OptionError("tls.ca", f"{error.message} (options tls.ca, tls.cert, tls.key)")
    if isinstance(error, RpcFailure) and error.reason == ErrorReason.NO_PERMISSION:
        return OptionError("accessKey", f"{error.message} (options accessKey and secretKey)")
    return error


class ClusterView:
    """Driver-side look-ups of a read: queues of the topics and their offsets."""

    def __init__(self, options: ReadOptions) -> None:
        self._options = options
        self._client: Blocking[PullConsumer] = Blocking(
            lambda: PullConsumer(
                options.pull_group,
                options.namesrv,
                tls=options.access.tls,
                credentials=options.access.credentials,
            )
        )

    def close(self) -> None:
        self._client.close()

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        try:
            return self._client.run(coroutine, timeout=LOOKUP_TIMEOUT_S)
        except (OrbitError, ValueError, grpc.aio.AioRpcError) as error:
            raise _explain(error, self._options.namesrv) from None

    def queues(self, *, refresh: bool = False) -> list[MessageQueue]:
        """Every readable queue of the topics (raises OptionError for an unknown topic)."""
        consumer = self._client.client

        async def listing() -> list[MessageQueue]:
            found = []
            for topic in self._options.topics:
                found.extend(await consumer.queues(topic, refresh=refresh))
            return found

        return self._run(listing())

    def bounds(self, queues: Sequence[MessageQueue]) -> dict[QueueKey, QueueBounds]:
        consumer = self._client.client

        async def one(mq: MessageQueue) -> QueueBounds:
            low, high = await asyncio.gather(consumer.min_offset(mq), consumer.max_offset(mq))
            return QueueBounds(low, high)

        return self._per_queue(queues, one)

    def committed(self, queues: Sequence[MessageQueue]) -> dict[QueueKey, int]:
        """The ``group`` option's committed offsets (-1 where it never committed)."""
        return self._per_queue(queues, self._client.client.committed_offset)

    def offsets_at(self, queues: Sequence[MessageQueue], timestamp_ms: int) -> dict[QueueKey, int]:
        consumer = self._client.client
        return self._per_queue(queues, lambda mq: consumer.offset_at(mq, timestamp_ms))

    def _per_queue(
        self, queues: Sequence[MessageQueue], call: Callable[[MessageQueue], Any]
    ) -> dict[QueueKey, Any]:
        async def every() -> list[Any]:
            return await asyncio.gather(*(call(mq) for mq in queues))

        values = self._run(every())
        return {key_of(mq): value for mq, value in zip(queues, values, strict=True)}


def key_of(mq: MessageQueue) -> QueueKey:
    return (mq.topic, mq.broker_name, mq.queue_id)


PULLS_IN_FLIGHT = 4
"""Pulls a range read keeps in flight: the broker serves the next ones while this process
decodes and converts the current one (a broker returns at most its transfer cap per pull,
32 messages by default, so one pull at a time leaves both sides idle half the time)."""


def takes_raw(options: ReadOptions) -> bool:
    """Whether a read can take the pulls' records undecoded (``read_range(raw=True)``): the
    broker alone decides what matches (``*`` or SQL92); a tag expression needs the client's
    check of the decoded tag text."""
    return options.sql or TagFilter(options.expression).matches_all


def read_range(options: ReadOptions, piece: QueueRange, *, raw: bool = False) -> Iterator[Sequence[Any]]:
    """The messages of ``piece`` (queue slots ``[start, end)``) in queue order, one list per
    pull; the broker applies the tag or SQL92 filter.

    With ``raw`` (only where :func:`takes_raw`) each list holds the pull's whole records,
    undecoded, and may hold records outside the range: the caller keeps ``[start, end)``
    (``rows.records_to_batch`` does, in C).

    The next pull is always in flight while the caller converts this one. Once a pull returns
    a message for every slot it read (no filter skipped any), its slot count is taken as the
    broker's stride and up to :data:`PULLS_IN_FLIGHT` pulls are sent ahead at that stride. A
    result is used only when its pull started exactly where the previous one ended; otherwise
    (fewer slots, a filter skipping ahead, a retention gap) the pulls ahead are dropped and the
    read goes on from the true next offset, so every slot is read once and in order."""
    mq = MessageQueue(piece.topic, piece.broker, piece.queue_id)
    key = piece.key
    with _opened(
        lambda: PullConsumer(
            options.pull_group,
            options.namesrv,
            tls=options.access.tls,
            credentials=options.access.credentials,
        )
    ) as client:
        consumer = client.client

        async def pull(at: int, count: int) -> Any:
            return await consumer.pull(
                mq,
                at,
                expression=options.expression,
                sql=options.sql,
                max_nums=min(count, piece.end - at),
                raw=raw,
            )

        offset = piece.start
        stride = 0  # slots per pull once a pull took every slot it read; 0: one pull ahead
        ahead: deque[tuple[int, Any]] = deque()  # (offset pulled, future), in offset order

        def send_ahead() -> None:
            if not ahead and offset < piece.end:
                ahead.append((offset, client.submit(pull(offset, options.pull_batch_size))))
            at = ahead[-1][0] + stride if ahead else piece.end
            while stride and len(ahead) < PULLS_IN_FLIGHT and at < piece.end:
                ahead.append((at, client.submit(pull(at, stride))))
                at += stride

        send_ahead()
        while ahead:
            _, pending = ahead.popleft()  # the pull that starts at offset
            result = pending.result()
            if result.status is PullStatus.OFFSET_ILLEGAL:
                if offset < result.min_offset:  # retention removed what this range still needed
                    offset = skip_lost(key, offset, result.min_offset, options.fail_on_data_loss)
                else:
                    raise DataLossError(
                        f"{describe(key)}: offset {offset} is beyond the queue's max offset "
                        f"{result.max_offset} (the queue was truncated or recreated)"
                    )
            elif result.status is PullStatus.NO_NEW_MSG:
                raise DataLossError(
                    f"{describe(key)}: no message at offset {offset} although the read was planned up to "
                    f"{piece.end} (max offset now {result.max_offset}; the queue was truncated?)"
                )
            else:
                step = max(offset + 1, result.next_begin_offset) - offset
                got = len(result.records) if raw else len(result.messages)
                if not stride and step == got:  # no slot filtered out or missing
                    stride = step
                offset += step
            if ahead and ahead[0][0] != offset:  # the pulls ahead guessed wrong: start again here
                ahead.clear()
                stride = 0
            send_ahead()  # before handing this pull over: the broker works while the caller does
            if raw:
                if result.records:
                    yield result.records
                continue
            messages = [m for m in result.messages if piece.start <= m.queue_offset < piece.end]
            if messages:
                yield messages


class _Session(Blocking[T]):
    def submit(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Start ``coroutine`` on the client's loop; returns a concurrent future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)


@contextmanager
def _opened(factory: Callable[[], T]) -> Iterator[_Session[T]]:
    session = _Session(factory)
    try:
        yield session
    finally:
        session.close()


class SendFailedError(RuntimeError):
    """A batch send the broker did not store as asked: the task fails so Spark retries it."""


class BatchSender:
    """Sends the rows of one Spark task as batch sends, one buffer per target queue.

    Rows with a sharding key go to the queue the producer's ordered-send rule picks for it
    (crc32 of the key, modulo the write queues), in row order, so per-key order survives;
    rows without one fill a shared buffer that each send places round robin.
    """

    def __init__(self, options: WriteOptions) -> None:
        self._options = options
        self._session: _Session[Producer] = _Session(
            lambda: Producer(
                options.producer_group,
                options.namesrv,
                tls=options.access.tls,
                credentials=options.access.credentials,
            )
        )
        self._queues = self._session.run(self._session.client.write_queues(options.topic))
        self._buffers: dict[int | None, list[Message]] = {}
        self._bytes: dict[int | None, int] = {}
        self.sent = 0
        self.batches = 0

    def add(self, message: Message, sharding_key: str | None) -> None:
        slot = None if sharding_key is None else sharding_queue(sharding_key, len(self._queues))
        buffer = self._buffers.setdefault(slot, [])
        size = len(message.body) + sum(len(k) + len(v) for k, v in message.properties.items())
        if buffer and self._bytes.get(slot, 0) + size > self._options.batch_bytes:
            self._flush(slot)
            buffer = self._buffers.setdefault(slot, [])
        buffer.append(message)
        self._bytes[slot] = self._bytes.get(slot, 0) + size
        if len(buffer) >= self._options.batch_size:
            self._flush(slot)

    def finish(self) -> None:
        for slot in list(self._buffers):
            self._flush(slot)

    def close(self) -> None:
        self._session.close()

    def _flush(self, slot: int | None) -> None:
        messages = self._buffers.pop(slot, [])
        self._bytes.pop(slot, None)
        if not messages:
            return
        queue = None if slot is None else self._queues[slot]
        result: SendResult = self._session.run(self._session.client.send_batch(messages, queue=queue))
        if result.status is not SendStatus.SEND_OK:
            where = f"queue {result.broker_name}:{result.queue_id}"
            raise SendFailedError(
                f"batch of {len(messages)} messages to topic {self._options.topic} {where} returned "
                f"{result.status.value}, not SEND_OK"
            )
        self.sent += len(messages)
        self.batches += 1


def check_topic_exists(options: WriteOptions) -> None:
    """A write goes to an existing topic only: a misspelt name must not auto-create a new one."""
    from orbitmq.client.channels import Channels
    from orbitmq.client.routes import fetch_read_route

    async def look() -> None:
        channels = Channels(options.namesrv, tls=options.access.tls, credentials=options.access.credentials)
        try:
            route = await fetch_read_route(channels, options.topic)
        finally:
            await channels.close()
        if route is None:
            raise RpcFailure(ErrorReason.TOPIC_NOT_EXIST, f"topic {options.topic!r} does not exist")

    try:
        asyncio.run(look())
    except (OrbitError, ValueError, grpc.aio.AioRpcError) as error:
        raise _explain(error, options.namesrv) from None
