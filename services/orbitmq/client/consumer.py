"""The push consumer (RocketMQ's DefaultMQPushConsumer): "push is a wrapped pull".

Rebalance decides which queues this client consumes (at start, every 20 s, and at once when
the broker pushes a membership change); each assigned queue gets a process queue and a pull
task that long-polls its broker, applies flow control, and hands messages to the consume
service. Offsets go to the broker every 5 s and on each pull (clustering) or to a local
``offsets.json`` (broadcasting). Orderly consumption only pulls queues locked on the broker
and renews the locks every 20 s. Shutdown persists offsets, unlocks, unregisters, then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from orbitmq.client.allocation import AllocateAveragely, AllocateStrategy
from orbitmq.client.channels import Channels
from orbitmq.client.consume import ConcurrentConsumer, Listener, OrderlyConsumer
from orbitmq.client.consumer_metrics import ConsumerMetrics
from orbitmq.client.consumer_types import ConsumeFromWhere, ConsumerSettings, MessageModel
from orbitmq.client.offset_store import (
    DEFAULT_INSTANCE_NAME,
    LocalFileOffsetStore,
    OffsetFileInUseError,
    RemoteOffsetStoreState,
    local_client_id,
)
from orbitmq.client.process_queue import ProcessQueue
from orbitmq.client.producer import client_id
from orbitmq.client.queue import MessageQueue
from orbitmq.client.routes import ReadRoute, fetch_read_route
from orbitmq.client.session import BrokerSessions
from orbitmq.common.clock import MONOTONIC_CLOCK, Clock
from orbitmq.common.credentials import Credentials
from orbitmq.common.errors import OrbitError
from orbitmq.common.names import validate_group_name, validate_topic_name
from orbitmq.common.tasks import TaskSet
from orbitmq.common.tls import ClientTls, explain, may_be_handshake
from orbitmq.common.topics import RETRY_GROUP_TOPIC_PREFIX, Property
from orbitmq.store.message_filter import TagFilter
from orbitmq.store.record import StoredMessage, decode_all
from orbitmq.v1 import broker_pb2, common_pb2
from orbitmq.v1.broker_pb2 import PullStatus

log = logging.getLogger(__name__)

MISSING_TOPIC_WARN_MS = 30_000
"""How often a subscribed topic that does not exist is logged again."""


class PushConsumer:
    def __init__(
        self,
        group: str,
        namesrv: str | None = None,
        *,
        listener: Listener | None = None,
        orderly: bool = False,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        allocate: AllocateStrategy | None = None,
        settings: ConsumerSettings | None = None,
        offsets_dir: Path | None = None,
        instance_name: str | None = None,
        clock: Clock = MONOTONIC_CLOCK,
        metrics: ConsumerMetrics | None = None,
        credentials: Credentials | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        """``credentials``: what calls are signed with (None: ``ORBITMQ_ACCESS_KEY``/``_SECRET_KEY``);
        ``tls``: TLS toward the cluster (None: ``ORBITMQ_TLS_*``, plaintext when unset).

        ``instance_name`` (RocketMQ's instanceName, ``DEFAULT`` when None) also names a
        broadcasting consumer's offsets file, ``<offsets_dir>/<host>@<instance_name>/<group>/
        offsets.json`` (``offsets_dir`` None: ``$ORBITMQ_LOCAL_OFFSETS_DIR``, else
        ``~/.orbitmq_offsets``), so a restarted consumer resumes from it; two broadcasting
        consumers of one group on one host need different instance names (the second to start
        is refused)."""
        validate_group_name(group)
        if orderly and message_model is MessageModel.BROADCASTING:
            raise ValueError("orderly consumption needs clustering: broadcasting has no queue locks")
        self.group = group
        self.instance_name = instance_name
        self.client_id = f"{client_id()}@{instance_name}" if instance_name else f"{client_id()}@{id(self):x}"
        self.orderly = orderly
        self.message_model = message_model
        self.consume_from = consume_from
        self.consume_timestamp_ms = consume_timestamp_ms
        self.settings = settings or ConsumerSettings()
        self.clock = clock
        self.metrics = metrics or ConsumerMetrics(group, self.client_id)
        self._allocate = allocate or AllocateAveragely()
        self._listener = listener
        self._channels = Channels(namesrv, tls=tls, credentials=credentials)
        self._subscriptions: dict[str, common_pb2.Subscription] = {}
        self._tag_filters: dict[str, TagFilter] = {}
        self._routes: dict[str, ReadRoute] = {}
        self._missing_topics: dict[str, int] = {}
        """Subscribed topics without a route -> when that was last logged (ms)."""
        self._read_from_slave: set[MessageQueue] = set()
        """Queues whose master advised reading from a slave (it is far behind)."""
        self._unreachable_until: dict[str, float] = {}
        self._tls_refused: set[str] = set()
        """Brokers whose TLS handshake refusal was logged (once, until a call there succeeds)."""
        """Broker addresses that failed with UNAVAILABLE, and until when reads avoid them."""
        self._process_queues: dict[MessageQueue, ProcessQueue[StoredMessage]] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._max_offsets: dict[MessageQueue, int] = {}
        self._offsets: LocalFileOffsetStore | RemoteOffsetStoreState = (
            RemoteOffsetStoreState()
            if message_model is MessageModel.CLUSTERING
            else LocalFileOffsetStore.for_client(local_client_id(instance_name), group, offsets_dir)
        )
        self._tasks = TaskSet(f"consumer:{group}")
        self._locked_round = asyncio.Event()
        """Set (and replaced) when a round of lock requests ends: an orderly pull loop waiting
        for its queue's lock wakes then, not at its next recheck (a new queue's pull loop starts
        before the rebalance locks it: the first message of a new orderly consumer came 3 s late)."""
        self._rebalance_now = asyncio.Event()
        self._pool = ThreadPoolExecutor(self.settings.consume_threads, thread_name_prefix=f"consume-{group}")
        self._sessions = BrokerSessions(
            self._channels, self.client_id, self._on_event, consumer_groups=(group,)
        )
        self.closing = False
        self.suspended = False
        """Set by :meth:`suspend`: no pulls, no new listener calls; offsets stay where they are."""
        self._started = False

    # -- configuration -------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*", *, sql: bool = False) -> None:
        """Tag expression (``*``, ``A || B``) or, with ``sql=True``, a SQL92 property condition."""
        validate_topic_name(topic)
        if sql:
            from orbitmq.filter.sql92 import validate_sql92

            validate_sql92(expression)
        else:
            self._tag_filters[topic] = TagFilter(expression)
        self._subscriptions[topic] = common_pb2.Subscription(
            topic=topic,
            expression=expression,
            expression_type=common_pb2.SQL92 if sql else common_pb2.TAG,
            version=int(time.time() * 1000),
        )

    def register_listener(self, listener: Listener) -> None:
        self._listener = listener

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._listener is None or not self._subscriptions:
            raise ValueError("a consumer needs a listener and at least one subscription before start()")
        if self.message_model is MessageModel.CLUSTERING:
            retry = f"{RETRY_GROUP_TOPIC_PREFIX}{self.group}"
            self._subscriptions.setdefault(retry, common_pb2.Subscription(topic=retry, expression="*"))
        elif isinstance(self._offsets, LocalFileOffsetStore):
            await asyncio.to_thread(self._load_local_offsets, self._offsets)
        service = OrderlyConsumer if self.orderly else ConcurrentConsumer
        self._consume = service(self, self._listener, self._pool)
        self._started = True
        await self._refresh_routes()  # heartbeats every broker it finds
        await self._refresh_routes()  # the first heartbeat may have created the retry topic
        await self.rebalance()
        self._tasks.spawn("rebalance", self._rebalance_loop())
        self._tasks.spawn("heartbeat", self._every(self.settings.heartbeat_ms, self._heartbeat))
        self._tasks.spawn("routes", self._route_loop())
        self._tasks.spawn("persist", self._every(self.settings.persist_ms, self.persist_offsets))
        if not self.orderly:
            self._tasks.spawn("expiry", self._every(self.settings.expiry_scan_ms, self._clean_expired))
        if self.orderly:
            self._tasks.spawn("locks", self._every(self.settings.lock_renew_ms, self._lock_all))

    def _load_local_offsets(self, store: LocalFileOffsetStore) -> None:
        """Claim this instance's offsets file, then read it (blocks on the disk)."""
        try:
            store.claim()
        except OffsetFileInUseError as error:
            raise OffsetFileInUseError(
                f"broadcasting consumer of group {self.group!r} with instance name "
                f"{self.instance_name or DEFAULT_INSTANCE_NAME!r} cannot start: {error}. Each broadcasting "
                "consumer of a group on one host keeps its offsets in a file named by its "
                "instance name: give each one its own instance_name (orbitmq consume "
                "--instance-name, the sidecar's instance_name)",
                error.holder_pid,
            ) from None
        try:
            store.load()
        except BaseException:
            store.release()
            raise

    def suspend(self) -> None:
        """Stop pulling and stop handing messages to the listener (RocketMQ's suspend()).

        Messages already pulled but not yet handed over stay uncommitted, so they are delivered
        again after :meth:`resume`, or to whoever consumes the queue after :meth:`close`.
        Safe to call from a listener.
        """
        self.suspended = True

    def resume(self) -> None:
        """Undo :meth:`suspend`: pulls resume and held messages go to the listener."""
        self.suspended = False
        for mq, pq in list(self._process_queues.items()):
            self._consume.resume(mq, pq)

    async def close(self) -> None:
        """Stop pulling, let consumption finish (bounded), persist, unlock, leave; idempotent."""
        if not self._started or self.closing:
            return
        self.closing = True
        for task in self._pull_tasks.values():
            task.cancel()
        await self._consume.wait_idle(self.settings.shutdown_timeout_ms / 1000)
        await self._tasks.close()
        try:
            await self.persist_offsets()
        finally:
            if isinstance(self._offsets, LocalFileOffsetStore):
                self._offsets.release()
        if self.orderly:
            await self._unlock(list(self._process_queues))
        for address in self._broker_addresses():
            with contextlib.suppress(grpc.aio.AioRpcError):
                await self._channels.broker(address).UnregisterClient(
                    broker_pb2.UnregisterClientRequest(client_id=self.client_id, consumer_group=self.group),
                    timeout=2,
                )
        await self._sessions.close()
        await self._channels.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _every(self, period_ms: int, work: Any) -> None:
        while True:
            await asyncio.sleep(period_ms / 1000)
            try:
                await work()
            except (grpc.aio.AioRpcError, OrbitError, OSError, ValueError) as error:
                log.warning("consumer %s: %s failed: %s", self.group, getattr(work, "__name__", work), error)

    # -- routes, heartbeats, sessions ----------------------------------------------------------

    async def _route_loop(self) -> None:
        """Refresh routes every ``route_refresh_ms``; every second while a subscribed topic has
        none yet (a topic created after the consumer started is consumed soon, not in 30 s)."""
        while True:
            missing = any(
                topic not in self._routes
                for topic in self._subscriptions
                if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
            )
            period = min(1_000, self.settings.route_refresh_ms) if missing else self.settings.route_refresh_ms
            await asyncio.sleep(period / 1000)
            try:
                await self._refresh_routes()
            except (grpc.aio.AioRpcError, OrbitError, OSError) as error:
                log.warning("consumer %s: route refresh failed: %s", self.group, error)
                continue
            if missing:
                self._rebalance_now.set()

    async def _refresh_routes(self) -> None:
        known = self._broker_addresses()
        for topic in list(self._subscriptions):
            try:
                route = await fetch_read_route(self._channels, topic)
            except grpc.aio.AioRpcError as error:
                log.warning("route of %s: %s", topic, error.details())
                continue
            if route is not None:
                if self._missing_topics.pop(topic, None) is not None:
                    log.info("consumer %s: topic %s now has a route", self.group, topic)
                self._routes[topic] = route
            elif not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                self._warn_missing(topic)
        for address in self._broker_addresses():
            self._sessions.ensure(address)
        if new := self._broker_addresses() - known:
            # A broker this consumer has not told of itself yet (a topic created after it
            # started, a promoted master): heartbeat it now, or the rebalance that follows
            # finds the group's list without this client and waits a whole rebalance_ms.
            await self._heartbeat(new)

    def _warn_missing(self, topic: str) -> None:
        """A subscribed topic no name server knows: say so at once and every half minute while
        it lasts (the consumer keeps looking, as RocketMQ's does: the topic may be created
        later), so a typo in a topic name does not look like an idle topic."""
        now = self.clock.now_ms()
        last = self._missing_topics.get(topic)
        if last is not None and now - last < MISSING_TOPIC_WARN_MS:
            return
        self._missing_topics[topic] = now
        log.warning(
            "consumer %s: topic %r does not exist (no name server has a route for it); still "
            "looking every %d ms. Check the name, or create it: orbitmq admin topic create --topic %s",
            self.group,
            topic,
            min(1_000, self.settings.route_refresh_ms),
            topic,
        )

    def _broker_addresses(self) -> set[str]:
        return {address for route in self._routes.values() for address in route.masters.values()}

    def _address(self, mq: MessageQueue) -> str:
        return self._routes[mq.topic].masters[mq.broker_name]

    def _read_address(self, mq: MessageQueue) -> str:
        """Where to pull ``mq`` from: its master, unless the master advised a slave or has just
        been unreachable and a slave is known (docs/architecture.md, "Replication and failover"); back to the
        master as soon as it
        answers again or stops advising otherwise."""
        route = self._routes[mq.topic]
        master = route.masters[mq.broker_name]
        slaves = route.slaves.get(mq.broker_name, [])
        if not slaves:
            return master
        down = self._unreachable_until.get(master, 0) > time.monotonic()
        if down or mq in self._read_from_slave:
            return next((a for a in slaves if self._unreachable_until.get(a, 0) <= time.monotonic()), master)
        return master

    async def _heartbeat(self, addresses: set[str] | None = None) -> None:
        """Tell ``addresses`` (default: every broker of the routes) about this consumer."""
        model = (
            common_pb2.CLUSTERING
            if self.message_model is MessageModel.CLUSTERING
            else common_pb2.BROADCASTING
        )
        request = broker_pb2.HeartbeatRequest(
            client_id=self.client_id,
            consumers=[
                broker_pb2.ConsumerData(
                    group=self.group,
                    consume_type=common_pb2.CONSUME_PASSIVELY,
                    message_model=model,
                    subscriptions=list(self._subscriptions.values()),
                    orderly=self.orderly,
                )
            ],
        )
        for address in self._broker_addresses() if addresses is None else addresses:
            try:
                await self._channels.broker(address).Heartbeat(request, timeout=3)
            except grpc.aio.AioRpcError as error:
                log.info("heartbeat to %s failed: %s", address, error.code().name)

    async def _on_event(self, address: str, event: broker_pb2.ServerEvent) -> None:
        kind = event.WhichOneof("event")
        if kind == "consumer_ids_changed":
            self._rebalance_now.set()
        elif kind == "reset_offset":
            notice = event.reset_offset
            reset = []
            for mq in [m for m in self._process_queues if m.topic == notice.topic]:
                if (
                    mq.queue_id in notice.offsets
                    and self._routes[mq.topic].masters.get(mq.broker_name) == address
                ):
                    self._drop(mq)
                    self._offsets.update(mq, notice.offsets[mq.queue_id], increase_only=False)
                    reset.append(mq)
            # Commit the reset ourselves: a pull or a periodic commit sent before this event
            # may have written the old offset back over the broker's reset.
            await self.persist_offsets(reset)
            self._rebalance_now.set()

    # -- rebalance -----------------------------------------------------------------------------

    async def _rebalance_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._rebalance_now.wait(), self.settings.rebalance_ms / 1000)
            self._rebalance_now.clear()
            try:
                await self.rebalance()
            except (grpc.aio.AioRpcError, OrbitError, OSError) as error:
                log.warning("rebalance of %s failed: %s", self.group, error)

    async def rebalance(self) -> None:
        started = time.perf_counter()
        for topic in list(self._subscriptions):
            if topic not in self._routes:
                continue
            queues, masters = self._routes[topic].queues, self._routes[topic].masters
            if self.message_model is MessageModel.BROADCASTING:
                mine = list(queues)
            else:
                clients = await self._consumer_ids(masters)
                if clients is None:  # keep the queues, their offsets and pulls (from a slave)
                    kept = sum(1 for mq in self._process_queues if mq.topic == topic)
                    self.metrics.rebalanced(topic, "no_client_list", kept)
                    continue
                mine = self._allocate.allocate(self.group, self.client_id, queues, clients)
            await self._apply(topic, set(mine))
            self.metrics.rebalanced(topic, "ok", len(mine))
        if self.orderly:
            await self._lock_all()
        self.metrics.rebalance_seconds.labels(self.group, self.client_id).observe(
            time.perf_counter() - started
        )

    async def _consumer_ids(self, masters: dict[str, str]) -> list[str] | None:
        """The group's client ids from the first master that lists this client; None when no
        master answered or none knows this client yet (a new master before our heartbeat).

        "Unknown" is not "nobody": allocating from an empty list would drop every queue and
        forget its in-memory offset, so after a failover the queues would restart from the new
        master's copy of the offsets, up to a config-copy interval old or missing (then from
        the consume-from rule, e.g. the first offset). RocketMQ likewise skips a rebalance whose
        client list it could not get.
        """
        for address in masters.values():
            try:
                reply = await self._channels.broker(address).GetConsumerList(
                    broker_pb2.GetConsumerListRequest(consumer_group=self.group), timeout=3
                )
            except grpc.aio.AioRpcError as error:
                log.info("client list of %s from %s failed: %s", self.group, address, error.code().name)
                await self._name_tls_refusal(address, error)
                continue
            self._tls_refused.discard(address)
            if self.client_id in reply.client_ids:
                return list(reply.client_ids)
            log.info("%s does not list %s in %s yet", address, self.client_id, self.group)
        log.warning(
            "consumer %s: no master lists the group's clients with this one in (%s); keeping the "
            "current queues until the next rebalance",
            self.group,
            ", ".join(masters.values()) or "no master",
        )
        return None

    async def _apply(self, topic: str, mine: set[MessageQueue]) -> None:
        current = {mq for mq in self._process_queues if mq.topic == topic}
        for mq in current - mine:
            await self._release(mq)
        for mq in sorted(mine - current):
            try:
                offset, committed = await self._pull_from_where(mq)
            except grpc.aio.AioRpcError as error:
                log.warning("cannot start %s: %s", mq, error.details())
                continue
            pq: ProcessQueue[StoredMessage] = ProcessQueue(self.clock)
            self._process_queues[mq] = pq
            self._offsets.update(mq, offset, increase_only=False)
            if committed and isinstance(self._offsets, RemoteOffsetStoreState):
                self._offsets.mark_persisted(mq, offset)  # the broker has it already
            self._pull_tasks[mq] = asyncio.get_running_loop().create_task(self._pull_loop(mq, pq, offset))
            log.info("consumer %s now consumes %s from offset %d", self.client_id, mq, offset)

    async def _release(self, mq: MessageQueue) -> None:
        """A queue went to another client: persist its offset, then free its lock."""
        pq = self._process_queues.get(mq)
        if pq is not None and self.orderly:
            await asyncio.to_thread(pq.consume_lock.acquire, True, 1.0)  # not mid-listener
            with contextlib.suppress(RuntimeError):
                pq.consume_lock.release()
        self._drop(mq)
        await self.persist_offsets([mq])
        if self.message_model is MessageModel.CLUSTERING:
            self._offsets.remove(mq)  # the broker holds it; the next owner reads it there
        if self.orderly:
            await self._unlock([mq])

    def _drop(self, mq: MessageQueue) -> None:
        pq = self._process_queues.pop(mq, None)
        if pq is not None:
            pq.drop()
        task = self._pull_tasks.pop(mq, None)
        if task is not None:
            task.cancel()

    async def _pull_from_where(self, mq: MessageQueue) -> tuple[int, bool]:
        """RocketMQ's computePullFromWhere: the offset to start ``mq`` at, and whether it is the
        group's committed one (else it came from the consume-from rule and is committed as the
        group's starting point, so a run that stops before reaching this queue does not move
        the start to wherever "last" is next time)."""
        if self.message_model is MessageModel.BROADCASTING:
            known = self._offsets.read(mq, from_memory=True)
            if known >= 0:
                return known, True
        stub = self._channels.broker(self._read_address(mq))  # a slave answers while the master is away
        if self.message_model is MessageModel.CLUSTERING:
            reply = await stub.QueryConsumerOffset(
                broker_pb2.QueryConsumerOffsetRequest(
                    consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id
                )
            )
            if reply.offset >= 0:
                return reply.offset, True
        queue = broker_pb2.QueueRequest(topic=mq.topic, queue_id=mq.queue_id)
        if self.consume_from is ConsumeFromWhere.FIRST_OFFSET or mq.topic.startswith(
            RETRY_GROUP_TOPIC_PREFIX
        ):
            return (await stub.GetMinOffset(queue)).offset, False
        if self.consume_from is ConsumeFromWhere.TIMESTAMP:
            when = self.consume_timestamp_ms or int(time.time() * 1000) - 30 * 60_000
            reply = await stub.SearchOffset(
                broker_pb2.SearchOffsetRequest(topic=mq.topic, queue_id=mq.queue_id, timestamp_ms=when)
            )
            return reply.offset, False
        return (await stub.GetMaxOffset(queue)).offset, False

    # -- pulling -------------------------------------------------------------------------------

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue[StoredMessage], offset: int) -> None:
        s = self.settings
        first_after_lock = True
        while not pq.dropped and not self.closing:
            if self.suspended:
                await asyncio.sleep(s.flow_control_delay_ms / 1000)
                continue
            if self._flow_controlled(pq):
                await asyncio.sleep(s.flow_control_delay_ms / 1000)
                continue
            if self.orderly:
                if not pq.locked:
                    first_after_lock = True
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._locked_round.wait(), s.orderly_recheck_ms / 1000)
                    continue
                if first_after_lock:  # the previous owner may have moved the offset
                    with contextlib.suppress(grpc.aio.AioRpcError):
                        stored, committed = await self._pull_from_where(mq)
                        if committed:
                            offset = stored
                    first_after_lock = False
            try:
                offset = await self._pull_once(mq, pq, offset)
            except grpc.aio.AioRpcError as error:
                if error.code() is grpc.StatusCode.CANCELLED and (pq.dropped or self.closing):
                    return
                log.info("pull of %s failed: %s %s", mq, error.code().name, error.details())
                await asyncio.sleep(s.exception_delay_ms / 1000)
            except KeyError:  # the route lost this broker: rebalance will drop the queue
                await asyncio.sleep(s.exception_delay_ms / 1000)

    async def _name_tls_refusal(self, address: str, error: grpc.aio.AioRpcError) -> None:
        """Log why a broker refuses the TLS handshake, once per broker until a call there
        succeeds: rebalances and pulls are retried in the background, and UNAVAILABLE alone
        does not say that a wrong CA or an expired certificate keeps the queues from being read.
        When the client's TLS files changed instead, the channel is opened again with them."""
        if not may_be_handshake(error) or self._channels.renew_if_rotated(address):
            return  # not the handshake, or the TLS files changed: the next call uses them
        if address in self._tls_refused:
            return
        refused = await explain(error, address, self._channels.tls)
        if refused is not None:
            self._tls_refused.add(address)
            log.warning("consumer %s cannot read from %s: %s", self.group, address, refused.message)

    def _flow_controlled(self, pq: ProcessQueue[StoredMessage]) -> bool:
        s = self.settings
        for reason, over in (
            ("count", pq.count > s.cached_messages_per_queue),
            ("size", pq.size_bytes > s.cached_mib_per_queue * 1024 * 1024),
            ("span", not self.orderly and pq.span > s.max_span),
        ):
            if over:
                self.metrics.flow_pauses.labels(self.group, reason).inc()
                return True
        return False

    async def _pull_once(self, mq: MessageQueue, pq: ProcessQueue[StoredMessage], offset: int) -> int:
        s = self.settings
        commit = self._offsets.read(mq, True) if self.message_model is MessageModel.CLUSTERING else -1
        address = self._read_address(mq)
        count = self._pull_count(mq, pq, offset)
        try:
            reply = await self._pull_rpc(address, mq, offset, commit, count)
        except grpc.aio.AioRpcError as error:
            if error.code() is grpc.StatusCode.UNAVAILABLE:
                self._unreachable_until[address] = time.monotonic() + s.exception_delay_ms / 1000 + 5
                await self._name_tls_refusal(address, error)
                if self._read_address(mq) != address:  # a slave can serve it right away
                    reply = await self._pull_rpc(self._read_address(mq), mq, offset, commit, count)
                else:
                    raise
            else:
                raise
        self._unreachable_until.pop(address, None)
        self._tls_refused.discard(address)
        if reply.suggest_which_broker_id:
            self._read_from_slave.add(mq)
        else:
            self._read_from_slave.discard(mq)
        pq.mark_pulled()
        if pq.dropped:
            return offset
        self._max_offsets[mq] = reply.max_offset
        return await self._handle_pull(mq, pq, offset, reply)

    def _pull_count(self, mq: MessageQueue, pq: ProcessQueue[StoredMessage], offset: int) -> int:
        """How many messages to ask for: ``pull_batch``, or while the queue has a backlog the
        bulk allowance ``pull_batch_backlog`` within the room flow control leaves (so a pull
        overshoots the cached-message limit by at most ``pull_batch``, as before)."""
        s = self.settings
        backlog = self._max_offsets.get(mq, 0) - offset
        if backlog <= s.pull_batch:
            return s.pull_batch
        room = s.cached_messages_per_queue - pq.count
        if not self.orderly:
            room = min(room, s.max_span - pq.span)
        return max(s.pull_batch, min(s.pull_batch_backlog, backlog, room))

    async def _pull_rpc(
        self, address: str, mq: MessageQueue, offset: int, commit: int, count: int
    ) -> broker_pb2.PullMessageResponse:
        s = self.settings
        return await self._channels.broker(address).PullMessage(
            broker_pb2.PullMessageRequest(
                consumer_group=self.group,
                topic=mq.topic,
                queue_id=mq.queue_id,
                queue_offset=offset,
                max_msg_nums=count,
                suspend_timeout_ms=s.suspend_timeout_ms,
                commit_offset=commit,
                subscription=self._subscriptions.get(mq.topic),
            ),
            timeout=s.suspend_timeout_ms / 1000 + 5,
        )

    async def _handle_pull(
        self,
        mq: MessageQueue,
        pq: ProcessQueue[StoredMessage],
        offset: int,
        reply: broker_pb2.PullMessageResponse,
    ) -> int:
        """Hand found messages to the consume service; the next offset to pull."""
        if reply.status == PullStatus.FOUND:
            messages = decode_all(reply.records, check_crc=self.settings.verify_body_crc)
            if mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                messages = [_as_delivered(m) for m in messages]
            tag_filter = self._tag_filters.get(mq.topic)
            if tag_filter is not None and not tag_filter.matches_all:  # the broker matched hashes
                messages = [m for m in messages if tag_filter.matches_tag(m.tags)]
            if messages:
                pq.put(messages)
                self._consume.dispatch(mq, pq, messages)
            elif pq.count == 0:
                self.offsets_update(mq, reply.next_begin_offset)
            return reply.next_begin_offset
        if reply.status == PullStatus.OFFSET_ILLEGAL:
            log.warning("offset %d of %s is illegal; moving to %d", offset, mq, reply.next_begin_offset)
            self.offsets_update(mq, reply.next_begin_offset, increase_only=False)
            self._drop(mq)
            await self.persist_offsets([mq])
            self._rebalance_now.set()
            return reply.next_begin_offset
        if pq.count == 0 and reply.next_begin_offset > offset:
            self.offsets_update(mq, reply.next_begin_offset)
        return reply.next_begin_offset

    # -- offsets -------------------------------------------------------------------------------

    def offsets_update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        """Record ``offset`` as ``mq``'s next offset to consume (never lower unless told).

        Called per consumed batch, so it only touches memory: gauges follow in :meth:`persist_offsets`.
        """
        self._offsets.update(mq, offset, increase_only)

    def _publish_offsets(self) -> None:
        """Committed-offset and lag gauges of every queue this client holds."""
        for mq, committed in self._offsets.snapshot().items():
            labels = (self.group, mq.topic, mq.broker_name, str(mq.queue_id))
            self.metrics.committed.labels(*labels).set(committed)
            known = self._max_offsets.get(mq)
            if known is not None:
                self.metrics.lag.labels(*labels).set(max(0, known - committed))

    def committed_offsets(self) -> dict[MessageQueue, int]:
        return self._offsets.snapshot()

    async def persist_offsets(self, mqs: list[MessageQueue] | None = None) -> None:
        """Broadcasting: write ``offsets.json``. Clustering: commit to the broker what it has not seen."""
        self._publish_offsets()
        targets = list(self._offsets.snapshot()) if mqs is None else mqs
        if isinstance(self._offsets, LocalFileOffsetStore):
            await asyncio.to_thread(self._offsets.persist, targets)
            return
        for mq, offset in self._offsets.persist(targets).items():
            try:
                await self._channels.broker(self._address(mq)).UpdateConsumerOffset(
                    broker_pb2.UpdateConsumerOffsetRequest(
                        consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, offset=offset
                    ),
                    timeout=3,
                )
                self._offsets.mark_persisted(mq, offset)
            except (grpc.aio.AioRpcError, KeyError) as error:
                log.warning("offset of %s not persisted: %s", mq, error)

    async def _clean_expired(self) -> None:
        """Send back messages whose listener has run longer than the consume timeout, so one
        hung listener does not hold the committed offset back forever (RocketMQ's cleanExpireMsg)."""
        now = self.clock.now_ms()
        timeout = self.settings.consume_timeout_ms
        for mq, pq in list(self._process_queues.items()):
            for message in pq.expired(now, timeout):
                log.warning(
                    "consuming %s of %s took over %d ms; sending it back", message.msg_id, mq, timeout
                )
                if await self.send_back_or_retry(mq, pq, message, retry_locally=False):
                    offset = pq.remove([message])
                    if offset >= 0:
                        self.offsets_update(mq, offset)

    # -- retries and locks ---------------------------------------------------------------------

    async def send_back_or_retry(
        self,
        mq: MessageQueue,
        pq: ProcessQueue[StoredMessage],
        message: StoredMessage,
        *,
        retry_locally: bool = True,
    ) -> bool:
        """Return a failed message to the broker; if that fails, consume it again here (False)."""
        try:
            await self._channels.broker(self._address(mq)).SendBack(
                broker_pb2.SendBackRequest(
                    consumer_group=self.group,
                    commit_log_offset=message.physical_offset,
                    origin_msg_id=message.msg_id,
                    origin_topic=message.topic,
                    max_reconsume_times=self.settings.max_reconsume_times,
                ),
                timeout=5,
            )
            return True
        except (grpc.aio.AioRpcError, KeyError) as error:
            log.warning("send back of %s failed: %s", message.msg_id, error)
            if retry_locally:
                await asyncio.sleep(self.settings.exception_delay_ms / 1000)
                self._consume.dispatch(mq, pq, [message])
            return False

    async def _lock_all(self) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in self._process_queues:
            by_broker.setdefault(self._address(mq), []).append(mq)
        for address, mqs in by_broker.items():
            try:
                reply = await self._channels.broker(address).LockBatch(
                    broker_pb2.LockBatchRequest(
                        consumer_group=self.group,
                        client_id=self.client_id,
                        queues=[m.to_proto() for m in mqs],
                    ),
                    timeout=3,
                )
            except grpc.aio.AioRpcError as error:
                log.warning("locking on %s failed: %s", address, error.code().name)
                continue
            held = {MessageQueue.from_proto(q) for q in reply.locked}
            for mq in mqs:
                pq = self._process_queues.get(mq)
                if pq is not None:
                    pq.set_locked(mq in held)
                    if mq in held and pq.count:
                        self._consume.dispatch(mq, pq, [])
        self._locked_round.set()
        self._locked_round = asyncio.Event()
        for topic in {mq.topic for mq in self._process_queues}:
            count = sum(1 for mq, pq in self._process_queues.items() if mq.topic == topic and pq.locked)
            self.metrics.locked.labels(self.group, topic, self.client_id).set(count)

    async def _unlock(self, mqs: list[MessageQueue]) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            with contextlib.suppress(KeyError):
                by_broker.setdefault(self._address(mq), []).append(mq)
        for address, queues in by_broker.items():
            with contextlib.suppress(grpc.aio.AioRpcError):
                await self._channels.broker(address).UnlockBatch(
                    broker_pb2.UnlockBatchRequest(
                        consumer_group=self.group,
                        client_id=self.client_id,
                        queues=[m.to_proto() for m in queues],
                    ),
                    timeout=3,
                )


def _as_delivered(message: StoredMessage) -> StoredMessage:
    """A message pulled from a retry topic is shown to the listener under its original topic
    (RocketMQ's resetRetryAndNamespace); its queue offset stays that of the retry queue."""
    if not message.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return message
    original = message.properties.get(Property.RETRY_TOPIC)
    return dataclasses.replace(message, topic=original) if original else message
