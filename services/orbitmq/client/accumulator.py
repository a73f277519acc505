"""Concurrent sends coalesced into batch calls while a call is in flight (RocketMQ 5's producer
``autoBatch``, Kafka's ``linger.ms`` without the linger).

A broker call costs far more than a message in it (on this project's 2-core bench machine, an
unbatched send cost about 1 ms of client and broker CPU, a message in a batch of 128 about
30 µs). So sends to one destination that arrive while a call to it is in flight wait in its
*lane* and leave together, as one ``SendMessage`` batch, when a call returns (or when a lane
has room for another call in flight). Nothing ever waits for company: a send to an idle lane
leaves at once, so latency at low load is that of a single send.

Lanes:

* a round-robin lane per topic: each call picks its queue as a single send would (round robin,
  fault avoidance); up to ``in_flight`` calls at once;
* an ordered lane per (topic, broker, queue) for sends with a sharding key or an explicit
  queue: one call at a time, messages in the order their sends were called, and a failed call's
  messages retried before anything behind them, so per-queue and per-key order holds.

Messages born elsewhere (:attr:`Message.born_host`: the RocketMQ 5 proxy's, each its client's
address) share these lanes with the rest, so concurrent sends of different official clients share
calls. A call whose messages share one born host names it once, in the request, and carries the
messages as they were encoded; only a call mixing born hosts re-encodes each message with its own
(``Message.born_host``, :func:`orbitmq.client.send_wire.with_born_host`), which the broker stores
on its Python path (the C path writes one born host a call): through the proxy, 4 official
clients x 8 in flight made 2.22-2.62 messages a broker call against 1.37-1.67 with a lane per born
host, 8 clients x 1 made 1.45-1.68 against 1.00, and the broker spent 172-205 against 245-268 µs
of CPU a message.

Each message keeps its own result, budget and retries: the reply's i-th id and queue offset
``first + i`` are its own; after a retriable failure each message is retried while its own
budget allows and fails alone (:class:`SendFailed`) when it is spent; a call's wait is bounded
by the tightest budget in it. A batch the broker refuses for good (a message too large, a bad
property, a batch over a segment) is sent again one message at a time, so the refusal reaches
the caller whose message caused it and nobody else.

The per-message state lives on the send's future (:class:`PendingSend`): no other object per
message besides the caller's :class:`Message`.

The lanes themselves (:class:`Lanes`: queue by key, board up to the limits, fly while anything
waits) know nothing of sends: the proxy coalesces acks with them too
(:class:`orbitmq.proxy.coalesce.Coalescer`), delivering each batch its own way.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
import time
from collections import deque
from collections.abc import Collection, Hashable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import grpc

from orbitmq.client.message import SendResult, SendStatus
from orbitmq.client.retry import Failure, SendFailed, SendRetryPolicy, classify
from orbitmq.client.send_wire import with_born_host
from orbitmq.common.rpc import RpcFailure
from orbitmq.common.tasks import TaskSet
from orbitmq.common.tls import TlsError
from orbitmq.v1 import broker_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

if TYPE_CHECKING:
    from orbitmq.client.producer_routes import WriteQueue

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGES = 256
"""Most messages in one coalesced call: large enough that the call's fixed cost is spread thin
(batches of 128 already cost 30 µs a message), small enough that one reply does not hold a
burst of callers back for long."""
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
"""Most encoded bytes in one coalesced call (RocketMQ's default largest message): far below the
channel's 64 MiB and a broker's commit-log segment; a single larger message goes alone."""
DEFAULT_IN_FLIGHT = 2
"""Calls in flight at once per round-robin lane (ordered lanes: always one). Closed-loop senders
share one call whatever the limit (see :meth:`SendAccumulator._fly`); for a window of async sends
1, 2 and 4 measured alike within the noise of a shared 2-core machine (11-46k msg/s, 15-20 µs of
client CPU a message); two let a burst start a second call while the first is out."""


R = TypeVar("R")
K = TypeVar("K", bound=Hashable)


class Pending(asyncio.Future[R]):
    """An item waiting in a lane, or in a call: its caller's future; subclasses add what their
    calls need."""

    __slots__ = ("alone",)

    alone: bool
    """Board this item in a call of its own (after a batch holding it was refused)."""


P = TypeVar("P", bound=Pending[Any])


class PendingSend(Pending[SendResult]):
    """One send waiting in a lane, or in a call: its future and the state its retries need."""

    __slots__ = ("attempts", "born_host", "framed", "msg_id", "policy", "refused", "started")

    framed: bytes
    """The message as field 4 of a ``SendMessageRequest`` (tag, length, ``Message``)."""
    born_host: str | None
    """Where the message was born, if not at this producer (:attr:`Message.born_host`)."""
    msg_id: str
    policy: SendRetryPolicy
    started: float
    """``time.perf_counter()`` when the send was called: its budget runs from there."""
    attempts: int
    refused: frozenset[str]
    """Broker groups that refused it for a reason of their own (a full disk): a round-robin
    send goes to another (:data:`orbitmq.client.retry.MOVING_REASONS`), and fails once all have."""


class Carrier(Protocol):
    """What the accumulator needs from its producer: routes, queue choice and the call."""

    async def _route(self, topic: str) -> list[WriteQueue]: ...

    async def _refresh_quietly(
        self, topic: str, stale: list[WriteQueue] | None
    ) -> list[WriteQueue] | None: ...

    def _lane_target(
        self, topic: str, queues: list[WriteQueue], queue: WriteQueue | None, avoid: Collection[str] = ()
    ) -> WriteQueue: ...

    async def _carry(
        self, target: WriteQueue, topic: str, data: bytes, timeout_s: float
    ) -> broker_pb2.SendMessageResponse: ...

    def _request_head(self, topic: str, queue_id: int, born_host: str | None = None) -> bytes: ...

    def _record_latency(self, broker_name: str, latency_ms: float, *, failed: bool = False) -> None: ...


class Lane(Generic[K, P]):
    """The items of one key waiting for a call, and the calls (flights) carrying them."""

    __slots__ = ("boarding", "cap", "detail", "flights", "key", "waiting")

    def __init__(self, key: K, cap: int, detail: Any) -> None:
        self.key = key
        self.cap = cap
        """Flights at once."""
        self.detail = detail
        """What the lane's calls need of their destination (a send lane's topic and queue)."""
        self.waiting: deque[P] = deque()
        self.flights = 0
        self.boarding = False
        """A flight has started and not yet taken its batch: a new item needs no new flight."""


class Lanes(Generic[K, P]):
    """Items queued by key, carried in batch calls while anything waits (see the module
    docstring); a subclass makes the calls (:meth:`_deliver`) and answers each item.

    Args:
        owner: names the flights' tasks.
        closed: why items fail once :meth:`close` was called.
        max_items, max_bytes: bounds of one batch (:meth:`_size` of an item counts toward
            ``max_bytes``; a first item larger than it still goes, alone).
    """

    def __init__(self, owner: str, closed: str, *, max_items: int, max_bytes: int = sys.maxsize) -> None:
        if max_items < 1 or max_bytes < 1:
            raise ValueError(f"batch limits must be positive (items {max_items}, bytes {max_bytes})")
        self._closed_why = closed
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._lanes: dict[K, Lane[K, P]] = {}
        self._flights = TaskSet(f"{owner}:flights")
        self._closed = False

    def _size(self, pending: P) -> int:
        """What ``pending`` counts toward ``max_bytes``."""
        return 0

    async def _deliver(self, lane: Lane[K, P], batch: list[P]) -> None:
        """One call carrying ``batch``: answer each item, or put it back in ``lane.waiting``
        (at its front, to keep the order) to go again."""
        raise NotImplementedError

    def _put(self, key: K, pending: P, cap: int, detail: Any = None) -> None:
        """Queue ``pending`` in ``key``'s lane (made with ``cap`` flights and ``detail`` if it
        has none) and start a call if the lane has room for one."""
        if self._closed:
            pending.set_exception(RpcFailure(ErrorReason.SERVICE_NOT_AVAILABLE, self._closed_why))
            return
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = Lane(key, cap, detail)
        lane.waiting.append(pending)
        if not lane.boarding and lane.flights < lane.cap:
            lane.flights += 1
            lane.boarding = True
            self._flights.spawn(str(key), self._fly(lane))

    async def close(self) -> None:
        """Stop every call; items still waiting or in flight fail (idempotent)."""
        self._closed = True
        await self._flights.close()
        for lane in self._lanes.values():
            _fail_all(lane.waiting, self._closed_why)
        self._lanes.clear()

    async def _fly(self, lane: Lane[K, P]) -> None:
        """Carry the lane's waiting items, a batch per call, until none is left."""
        batch: list[P] = []
        try:
            while True:
                if not lane.waiting:
                    # The callers just answered often send again at once: one turn of the event
                    # loop lets them join this flight's next call instead of starting another.
                    lane.boarding = True
                    await asyncio.sleep(0)
                    if not lane.waiting:
                        break
                batch = self._board(lane)
                if batch:
                    await self._deliver(lane, batch)
                batch = []
        except Exception:
            # A bug, not a failed call (those are handled per item): nobody is left waiting
            # on a lane whose flights may crash the same way (the task set logs the error).
            _fail_all(lane.waiting, "the call failed unexpectedly")
            raise
        finally:
            lane.flights -= 1
            lane.boarding = False
            if batch:  # cancelled (closing) or crashed mid-call
                _fail_all(batch, self._closed_why if self._closed else "the call failed unexpectedly")
            if not lane.flights and not lane.waiting and self._lanes.get(lane.key) is lane:
                del self._lanes[lane.key]  # keys come and go (the acks' groups): keep none idle

    def _board(self, lane: Lane[K, P]) -> list[P]:
        """The next batch: items from the front of the lane up to the limits."""
        lane.boarding = False
        waiting = lane.waiting
        batch: list[P] = []
        size = 0
        while waiting and len(batch) < self._max_items:
            pending = waiting[0]
            if pending.done():  # its caller gave up (cancelled)
                waiting.popleft()
                continue
            item_size = self._size(pending)
            if batch and (pending.alone or size + item_size > self._max_bytes):
                break
            waiting.popleft()
            batch.append(pending)
            size += item_size
            if pending.alone:
                break
        return batch


SendLaneKey = str | tuple[str, str, int]
"""A topic (round robin), or a topic, broker name and queue id (ordered)."""


class SendAccumulator(Lanes[SendLaneKey, PendingSend]):
    """The lanes of one producer (see the module docstring)."""

    def __init__(
        self,
        carrier: Carrier,
        owner: str,
        *,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        in_flight: int = DEFAULT_IN_FLIGHT,
    ) -> None:
        if max_messages < 1 or max_bytes < 1 or in_flight < 1:
            raise ValueError(
                f"auto batch limits must be positive (messages {max_messages}, bytes {max_bytes}, "
                f"in flight {in_flight})"
            )
        super().__init__(owner, "the producer is closed", max_items=max_messages, max_bytes=max_bytes)
        self._carrier = carrier
        self._in_flight = in_flight

    def submit(self, topic: str, queue: WriteQueue | None, pending: PendingSend) -> None:
        """Queue ``pending`` in its lane (``queue``: the ordered lane's queue, None for round
        robin) and start a call if the lane has room for one; whatever its born host."""
        if queue is None:
            self._put(topic, pending, self._in_flight, (topic, None))
        else:
            self._put((topic, queue.broker_name, queue.queue_id), pending, 1, (topic, queue))

    def _size(self, pending: PendingSend) -> int:
        return len(pending.framed)

    async def _deliver(self, lane: Lane[SendLaneKey, PendingSend], batch: list[PendingSend]) -> None:
        """One call carrying ``batch``; on a failure, what each message does next."""
        carrier = self._carrier
        topic, queue = lane.detail
        target: WriteQueue | None = None
        queues: list[WriteQueue] | None = None
        now = time.perf_counter()
        timeout_s = min(p.policy.attempt_timeout_s((now - p.started) * 1000) for p in batch)
        for pending in batch:
            pending.attempts += 1
        try:
            queues = await carrier._route(topic)
            avoid = frozenset().union(*(p.refused for p in batch))
            target = carrier._lane_target(topic, queues, queue, avoid)
            data = _request(carrier, topic, target.queue_id, batch)
            started = time.perf_counter()
            reply = await carrier._carry(target, topic, data, timeout_s)
        except (grpc.aio.AioRpcError, RpcFailure) as error:
            await self._after_failure(lane, batch, error, target, queues)
            return
        carrier._record_latency(target.broker_name, (time.perf_counter() - started) * 1000)
        _resolve(batch, reply)

    async def _after_failure(
        self,
        lane: Lane[SendLaneKey, PendingSend],
        batch: list[PendingSend],
        error: grpc.aio.AioRpcError | RpcFailure,
        target: WriteQueue | None,
        queues: list[WriteQueue] | None,
    ) -> None:
        """Fail, split or retry the messages of a failed call (see the module docstring)."""
        topic = lane.detail[0]
        failure = classify(error)
        name, address = (target.broker_name, target.address) if target else (None, None)
        if name is not None and failure.retriable:
            self._carrier._record_latency(name, 0, failed=True)
        now = time.perf_counter()
        if failure.moves and name is not None and queues is not None and lane.detail[1] is None:
            self._move_on(lane, batch, failure, target, queues)
            return
        if not failure.retriable:
            if len(batch) > 1 and not isinstance(error, TlsError):
                # Whose message was it? Each goes again alone, in order. (A refused TLS
                # handshake is the broker's, not a message's: it fails them all below.)
                for pending in batch:
                    pending.alone = True
                lane.waiting.extendleft(reversed(batch))
                return
            for pending in batch:
                spent = now - pending.started
                _fail(pending, SendFailed(topic, name, address, failure, spent, pending.attempts))
            return
        survivors: list[PendingSend] = []
        pause_ms: float | None = None
        most_attempts = 0
        for pending in batch:
            elapsed_ms = (now - pending.started) * 1000
            pause = pending.policy.pause_ms(pending.attempts, elapsed_ms, random.random())
            if pause is None:
                spent = SendFailed(topic, name, address, failure, elapsed_ms / 1000, pending.attempts)
                _fail(pending, spent)
            elif pending.attempts > most_attempts:
                # The call's backoff is its most retried message's: sends that joined later do
                # not restart it at the first step.
                survivors.append(pending)
                pause_ms, most_attempts = pause, pending.attempts
            else:
                survivors.append(pending)
        if pause_ms is None:
            return
        log.info(
            "send of %d message(s) to topic %s on broker %s failed (%s: %s); retry in %.0f ms",
            len(survivors),
            topic,
            name or "-",
            failure.label,
            failure.detail,
            pause_ms,
        )
        # The survivors wait here, not in the lane: no other call takes them before the pause,
        # and nothing behind them in an ordered lane leaves first (that lane has one call).
        await asyncio.sleep(pause_ms / 1000)
        await self._carrier._refresh_quietly(topic, queues)
        lane.waiting.extendleft(reversed(survivors))

    def _move_on(
        self,
        lane: Lane[SendLaneKey, PendingSend],
        batch: list[PendingSend],
        failure: Failure,
        target: WriteQueue,
        queues: list[WriteQueue],
    ) -> None:
        """A round-robin call its broker refused for a reason of its own (a full disk): each
        message goes again at once, to a broker group that has not refused it, or fails when
        every group of the route has (see :mod:`orbitmq.client.retry`)."""
        topic, name = lane.detail[0], target.broker_name
        self._carrier._record_latency(name, 0, failed=True)  # other sends keep off it a while
        now = time.perf_counter()
        again: list[PendingSend] = []
        for pending in batch:
            pending.refused = pending.refused | {name}
            if all(q.broker_name in pending.refused for q in queues):
                spent = now - pending.started
                _fail(pending, SendFailed(topic, name, target.address, failure, spent, pending.attempts))
            else:
                again.append(pending)
        if again:
            log.info(
                "send of %d message(s) to topic %s refused by broker %s (%s: %s); trying another broker",
                len(again),
                topic,
                name,
                failure.label,
                failure.detail,
            )
            lane.waiting.extendleft(reversed(again))


def _request(carrier: Carrier, topic: str, queue_id: int, batch: list[PendingSend]) -> bytes:
    """The request bytes of a call carrying ``batch``: its messages' one born host (or none) in
    the request's head before the messages as framed, or, when they were born at different hosts,
    each message's own in the message (the broker takes such a send on its Python path)."""
    born_host = batch[0].born_host
    if all(p.born_host == born_host for p in batch):
        return b"".join([carrier._request_head(topic, queue_id, born_host), *(p.framed for p in batch)])
    return b"".join(
        [
            carrier._request_head(topic, queue_id),
            *(p.framed if p.born_host is None else with_born_host(p.framed, p.born_host) for p in batch),
        ]
    )


def _resolve(batch: list[PendingSend], reply: broker_pb2.SendMessageResponse) -> None:
    """Each message's own result: the reply's i-th offset id, queue offset first + i."""
    status = SendStatus.from_wire(reply.status)
    ids = reply.msg_ids
    first = reply.queue_offset
    broker_name, queue_id = reply.broker_name, reply.queue_id
    for index, pending in enumerate(batch):
        if pending.done():
            continue
        offset_id = ids[index] if index < len(ids) else ""
        pending.set_result(
            SendResult(
                status,
                pending.msg_id,
                offset_id,
                broker_name,
                queue_id,
                first + index,
                pending.msg_id,
                int(offset_id[-16:], 16) if offset_id else 0,
            )
        )


def _fail(pending: Pending[Any], error: BaseException) -> None:
    if not pending.done():
        pending.set_exception(error)


def _fail_all(items: deque[P] | list[P], why: str) -> None:
    for pending in items:
        _fail(pending, RpcFailure(ErrorReason.SERVICE_NOT_AVAILABLE, why))
    items.clear()
