"""A broker process: storage, services, background loops and name-server registration.

:class:`Broker` opens the store and config tables, serves :class:`BrokerServicer` on a
:class:`~orbitmq.common.server.GrpcServer`, and runs its loops as guarded tasks: delay
and timer delivery, transaction checks, sweeping expired clients and locks, persisting config tables,
and registering with every name server. ``close`` reverses it: stop taking requests (health
NOT_SERVING, held pulls answered), unregister, stop the server within the grace period,
persist, close the store.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import sys

from orbitmq.auth.tables import AuthTables
from orbitmq.broker.auth_store import AuthStore
from orbitmq.broker.consumers import ClientRegistry
from orbitmq.broker.durable_config import DLQ_PERM, adopt_stored_topics, persist_now, stored_topic
from orbitmq.broker.ha import (
    ReplicationClient,
    ReplicaTracker,
    RoleState,
    epochs_to_proto,
    open_epoch_file,
    shared_offset,
)
from orbitmq.broker.locks import LockTable
from orbitmq.broker.long_polling import PullHolds
from orbitmq.broker.metrics import (
    BrokerMetrics,
    BrokerStateCollector,
    ConsumerGroupCollector,
    PopCollector,
    TimerCollector,
)
from orbitmq.broker.pop.service import PopService
from orbitmq.broker.read_fence import ReadFence
from orbitmq.broker.registration import Registrar
from orbitmq.broker.reput import detour
from orbitmq.broker.schedule import ScheduleService
from orbitmq.broker.servicer import BrokerServicer
from orbitmq.broker.settings import BrokerSettings
from orbitmq.broker.timer.service import TimerService
from orbitmq.broker.topics import TopicManager, dlq_topic, retry_topic, topic_to_proto
from orbitmq.broker.transactions import TransactionService
from orbitmq.common.clock import MONOTONIC_CLOCK, SYSTEM_CLOCK, Clock
from orbitmq.common.credentials import own_credentials
from orbitmq.common.guard import broker_guard
from orbitmq.common.heap import freeze_startup_heap
from orbitmq.common.rpc import RpcFailure
from orbitmq.common.server import GrpcServer, split_host_port
from orbitmq.common.tasks import TaskSet
from orbitmq.common.topics import DLQ_GROUP_TOPIC_PREFIX, SCHEDULE_TOPIC, Property
from orbitmq.store.config import BrokerRole
from orbitmq.store.config_store import BrokerConfigTables, Permission, TopicConfig
from orbitmq.store.message_filter import TagFilter
from orbitmq.store.record import InboundMessage, MessageBatch, ScannedBatch
from orbitmq.store.results import PutResult, PutStatus
from orbitmq.store.service import StoreService
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2, nameserver_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

log = logging.getLogger(__name__)


class Broker:
    def __init__(
        self, settings: BrokerSettings, *, clock: Clock = SYSTEM_CLOCK, lease_clock: Clock = MONOTONIC_CLOCK
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.lease_clock = lease_clock
        """What client heartbeats and queue locks are timed by: not the wall clock (see
        :class:`~orbitmq.common.clock.MonotonicClock`)."""
        self.closing = False
        self._closed = False
        self.grpc = GrpcServer(
            f"broker {settings.broker_name}",
            settings.listen,
            metrics_listen=settings.metrics_listen,
            tls=settings,
            guard=broker_guard(self),
        )
        self.metrics = BrokerMetrics(self.grpc.registry, settings.broker_name)
        self._tasks = TaskSet(f"broker:{settings.broker_name}")
        self.clients = ClientRegistry(lease_clock, settings.channel_expiry_ms)
        self.locks = LockTable(lease_clock, settings.lock_expiry_ms)
        self.holds = PullHolds()
        self.address = ""
        self.replicas = ReplicaTracker()
        self.replication: ReplicationClient | None = None
        self.known_master_addr = ""
        """The master the name servers named in their last registration answer."""
        self._registrar = Registrar(
            settings.namesrv_addrs,
            build_request=self._registration,
            on_reply=self._registered,
            is_waiting=lambda: self.is_slave and not self.known_master_addr,
            interval_s=settings.register_interval_ms / 1000,
            clock=clock,
            owner=settings.broker_name,
            tls=settings,
            credentials=own_credentials(settings),
            auth=self._auth_tables if settings.auth_enabled else None,
        )
        self._master_tasks = TaskSet(f"broker-master:{settings.broker_name}")
        self._role_lock = asyncio.Lock()

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve and register; a failed start frees the port and the store lock before raising."""
        try:
            await self._start()
        except BaseException:
            await self._abort_start()
            raise

    async def _abort_start(self) -> None:
        self._closed = True
        await self.grpc.stop(0)
        await self._stop_replication()
        await self._master_tasks.close()
        await self._tasks.close()
        await self._registrar.close()
        if hasattr(self, "service"):
            await self.service.close()

    async def _start(self) -> None:
        settings = self.settings
        self.servicer = BrokerServicer(self)
        self.grpc.add_service(
            "orbitmq.v1.Broker", lambda s: broker_pb2_grpc.add_BrokerServicer_to_server(self.servicer, s)
        )
        port = self.grpc.bind()
        host, _ = split_host_port(settings.listen)
        self.address = settings.advertise_addr or f"{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"
        self.service = StoreService(
            settings.store_config(settings.store_host or self.address), clock=self.clock
        )
        await self.service.start()
        self.store = self.service.store
        self.role = RoleState(self.store.root, settings.broker_role, settings.broker_id)
        self.epochs = await asyncio.to_thread(open_epoch_file, self.store.root)
        self.store.role = self.role.record.role
        if not self.is_slave and self.epochs.current is None:
            # The first master's lineage is epoch 0 from the start of its log, so a later
            # failover can tell what two brokers share from their histories alone.
            await asyncio.to_thread(self.epochs.begin, 0, self.store.commitlog.min_offset)
        self.delay_levels = len(self.service.config.delay_levels_ms)
        self.tables = await asyncio.to_thread(
            BrokerConfigTables.open, self.store.root, max_delay_level=self.delay_levels, clock=self.clock
        )
        self.offsets = self.tables.consumer_offsets
        self.auth_store = await asyncio.to_thread(
            AuthStore, self.store.root, on_change=self.registration_changed
        )
        self.topics = TopicManager(
            self.tables,
            auto_create_topic=settings.auto_create_topic,
            default_queue_nums=settings.default_topic_queue_nums,
            auto_create_group=settings.auto_create_subscription_group,
            schedule_levels=self.delay_levels,
            on_created=lambda topic: self.registration_changed(),
            held_topic=self.held_topic,
            reserved_topics=(settings.cluster, settings.broker_name),
        )
        if not self.is_slave:  # a slave serves what it holds read-only (held_topic) until promoted
            self._adopt_stored_topics("found on disk at start-up")
        await self.save_config()  # the system topics, and what was adopted
        self.schedule = ScheduleService(
            self.store,
            self.tables.delay_offsets,
            self.delay_levels,
            self.clock,
            self._put_one,
            settings.schedule_tick_ms,
        )
        self.transactions = TransactionService(
            self.store,
            self.offsets,
            self.clients,
            self.clock,
            self._put_one,
            timeout_ms=settings.transaction_timeout_ms,
            check_max=settings.transaction_check_max,
            check_interval_ms=settings.transaction_check_interval_ms,
        )
        self.transactions.load()
        self.pop = PopService(
            self.store,
            self._pop_put,
            self.clock,
            settings.broker_name,
            snapshot_interval_ms=settings.pop_snapshot_limit_ms,
        )
        self.timer = TimerService(
            self.store, self.clock, self._put_bookkeeping, precision_ms=settings.timer_precision_ms
        )
        if not self.is_slave:  # a slave's POP and timer state is rebuilt when it is promoted
            await asyncio.to_thread(self.pop.load)
            await asyncio.to_thread(self.timer.load)
        self.fence = ReadFence(self.store, self.replicas)  # readers see what a slave holds
        self.fence.reset(self.broker_role is BrokerRole.SYNC_MASTER)
        self.fence.relay(self.holds.on_queue_grow)
        self.service.add_queue_listener(self.fence.on_queue_grow)
        self.service.add_queue_listener(self._pop_appended)
        self.service.add_queue_listener(self.timer.notify_append)
        self.service.add_queue_listener(self.replicas.grew)
        self.grpc.registry.register(BrokerStateCollector(self))
        self.grpc.registry.register(ConsumerGroupCollector(settings.broker_name, self.clients, self.locks))
        self.grpc.registry.register(PopCollector(self))
        self.grpc.registry.register(TimerCollector(self))
        tables = self.grpc.runtime
        tables.table("broker_clients", self.clients.client_count)
        tables.table("broker_client_sessions", self.clients.session_count)
        tables.table("broker_queue_locks", self.locks.entries)
        tables.table("broker_held_pulls", lambda: self.holds.held)
        tables.table("broker_resolved_transactions", lambda: self.transactions.resolved_count)
        await self.grpc.start()
        if not self.is_slave:
            self._start_master_work()
        self._tasks.spawn("sweep", self._sweep_loop())
        self._tasks.spawn("persist-config", self._persist_loop())
        await self._registrar.register_at_start()  # routable before anyone is told it is up
        self._registrar.start()
        if self.is_slave:
            self._start_replication()
        log.info(
            "broker %s (%s, id %d, epoch %d) serving on %s",
            settings.broker_name,
            self.broker_role.value,
            self.broker_id,
            self.epoch,
            self.address,
        )

    # -- roles ---------------------------------------------------------------------------------

    @property
    def broker_role(self) -> BrokerRole:
        return self.role.record.role

    @property
    def is_slave(self) -> bool:
        return self.role.record.role is BrokerRole.SLAVE

    def held_topic(self, topic: str) -> TopicConfig | None:
        """A slave reads a topic whose messages it holds before the master's config arrives.

        Topics reach a slave with the next config copy (``replica_config_interval_ms``), data
        with the log stream, usually first. A topic created on the master just before it died
        would otherwise be unreadable on the slave exactly when consumers fall back to it.
        The stand-in is read-only and not stored: the master's own config replaces it.
        """
        if not self.is_slave:
            return None
        return stored_topic(self.store, topic, Permission.READ)

    def _adopt_stored_topics(self, when: str) -> list[str]:
        """Topics this broker holds consume queues of but has no config for become its own,
        with the queues it holds (:func:`~orbitmq.broker.durable_config.adopt_stored_topics`).

        At start-up: a ``topics.json`` lost or written by an older broker. On promotion: topics
        created on the old master within one config-copy interval of its death. Without this
        the broker would answer TOPIC_NOT_EXIST for messages it has, or a first send would
        re-create the topic with the default queue count and hide the queues beyond it. The
        old master's config, should it come back as a slave, is replaced by this one (config
        flows from master to slave)."""
        adopted = adopt_stored_topics(self.store, self.topics)
        if adopted:
            log.warning(
                "broker %s adopted %d topic(s) %s, with the queues it holds messages in, having no "
                "config for them: %s",
                self.settings.broker_name,
                len(adopted),
                when,
                ", ".join(f"{t} ({self.tables.topics.get(t).read_queue_nums} queues)" for t in adopted),  # type: ignore[union-attr]
            )
        return adopted

    async def save_config(self) -> None:
        """Make topic and subscription-group changes durable before an RPC answers (see
        :mod:`orbitmq.broker.durable_config`); offsets have their own calls."""
        await persist_now(self.tables.topics, self.tables.subscription_groups)
        self.topics.unsaved = self.tables.topics.dirty or self.tables.subscription_groups.dirty

    async def save_created_config(self) -> None:
        """:meth:`save_config` when the request being served created a topic or group on the
        fly (a send, a pull, a heartbeat, a dead letter); otherwise an attribute read, well
        under a microsecond of a send's cost."""
        if self.topics.unsaved:
            await self.save_config()

    @property
    def broker_id(self) -> int:
        return self.role.record.broker_id

    @property
    def epoch(self) -> int:
        current = self.epochs.current
        return max(self.role.record.epoch, current.epoch if current else 0)

    def _start_master_work(self) -> None:
        self._master_tasks.spawn("schedule", self.schedule.run())
        self._master_tasks.spawn("timer", self.timer.run())
        self._master_tasks.spawn("transaction-check", self.transactions.run())
        self._master_tasks.spawn("pop-snapshot", self.pop.run())

    def _start_replication(self) -> None:
        self.replication = ReplicationClient(self)
        self.replication.start()

    async def _stop_replication(self) -> None:
        if self.replication is not None:
            await self.replication.close()
            self.replication = None

    async def change_role(self, role: BrokerRole, epoch: int, broker_id: int, master_addr: str = "") -> None:
        """Promote or demote, refusing a stale decision: a promotion needs an epoch newer than
        ours; a demotion one at least as new (two masters under one epoch: one steps down)."""
        async with self._role_lock:
            newest = self.epoch
            if epoch < newest or (epoch == newest and (role is not BrokerRole.SLAVE or self.is_slave)):
                raise RpcFailure(
                    ErrorReason.STALE_EPOCH,
                    f"role change to {role.value} carries epoch {epoch}; broker "
                    f"{self.settings.broker_name} at {self.address} is already at epoch {newest}",
                )
            if role is BrokerRole.SLAVE:
                if broker_id < 1:
                    raise RpcFailure(
                        ErrorReason.INVALID_ARGUMENT, f"a slave needs broker id >= 1, not {broker_id}"
                    )
                await self._master_tasks.close()
                self._master_tasks = TaskSet(f"broker-master:{self.settings.broker_name}")  # reusable
                self.store.role = BrokerRole.SLAVE
                await asyncio.to_thread(self.role.change, role, broker_id, epoch, master_addr)
                self.fence.demote()  # until its log is cut to what the new master holds
                self.known_master_addr = master_addr or ""
                await self._stop_replication()
                self._start_replication()
                self.metrics.role_changes.labels(self.settings.broker_name, "demoted").inc()
            else:
                if broker_id != 0:
                    raise RpcFailure(
                        ErrorReason.INVALID_ARGUMENT, f"a master has broker id 0, not {broker_id}"
                    )
                await self._stop_replication()
                await asyncio.to_thread(self.store.become_master)
                # The POP records replicated so far are the state the old master served:
                # rebuilt before this broker answers POP requests as master.
                await asyncio.to_thread(self.pop.load)
                await asyncio.to_thread(self.timer.load)  # the timers and deliveries it replicated
                self._adopt_stored_topics("on promotion")
                await self.save_config()
                self.store.role = role
                start = self.store.commitlog.max_offset
                await asyncio.to_thread(self._begin_epoch, epoch, start)
                await asyncio.to_thread(self.role.change, role, 0, epoch)
                self.fence.reset(role is BrokerRole.SYNC_MASTER)
                if not len(self._master_tasks):
                    self._start_master_work()
                self.metrics.role_changes.labels(self.settings.broker_name, "promoted").inc()
            log.warning(
                "broker %s at %s is now %s (id %d) at epoch %d, log end %d",
                self.settings.broker_name,
                self.address,
                role.value,
                broker_id,
                epoch,
                self.store.commitlog.max_offset,
            )
        self.registration_changed()

    def _begin_epoch(self, epoch: int, start: int) -> None:
        self.epochs.truncate_after(start)
        self.epochs.begin(epoch, start)

    async def align_with_master(self, state: broker_pb2.HaState) -> None:
        """Before replicating: cut what this log holds that the master's does not, and adopt
        the master's epoch history up to the shared point."""
        local = self.epochs.entries
        shared = shared_offset(local, self.store.commitlog.max_offset, state)
        if shared < self.store.commitlog.max_offset:
            log.warning(
                "broker %s: log %d..%d diverges from master %s after offset %d; cutting",
                self.settings.broker_name,
                self.store.commitlog.min_offset,
                self.store.commitlog.max_offset,
                state.master_addr,
                shared,
            )
            await asyncio.to_thread(self.store.truncate, shared)
            await asyncio.to_thread(self.transactions.forget)
        last = self.epochs.current

        def adopt() -> None:
            self.epochs.truncate_after(shared)
            for record in state.epochs:
                current = self.epochs.current
                if (current is None or record.epoch > current.epoch) and record.start_offset >= (
                    current.start_offset if current else 0
                ):
                    self.epochs.begin(record.epoch, record.start_offset)

        await asyncio.to_thread(adopt)
        if self.epochs.current != last:
            log.info(
                "broker %s adopted the master's epochs: %s", self.settings.broker_name, self.epochs.entries
            )

    def ha_state(self) -> broker_pb2.HaState:
        replication = self.replication
        if self.is_slave:
            slaves = []
            master = replication.master_addr if replication else ""
            lag = replication.lag_bytes if replication else 0
        else:
            end = self.store.commitlog.max_offset
            slaves = [
                broker_pb2.SlaveState(
                    address=link.address,
                    acked_offset=link.acked_offset,
                    lag_bytes=max(0, end - link.acked_offset),
                )
                for link in self.replicas.slaves.values()
            ]
            master, lag = self.address, 0
        return broker_pb2.HaState(
            broker_name=self.settings.broker_name,
            broker_id=self.broker_id,
            role=self.broker_role.value,
            epoch=self.epoch,
            max_offset=self.store.commitlog.max_offset,
            epochs=epochs_to_proto(self.epochs.entries),
            slaves=slaves,
            master_addr=master,
            replication_lag_bytes=lag,
        )

    async def close(self) -> None:
        """Graceful stop; idempotent."""
        if self._closed:
            return
        self._closed = True
        self.closing = True
        await self.grpc.set_serving(False)
        self.holds.wake_all()
        await self._unregister()
        await self.grpc.stop(self.settings.grace_ms / 1000)
        await self._stop_replication()
        await self._master_tasks.close()
        await self._tasks.close()
        await self._registrar.close()
        await asyncio.to_thread(self.tables.persist_all)
        await self.service.close()

    # -- writing -------------------------------------------------------------------------------

    async def put(self, messages: list[InboundMessage], *, bookkeeping: bool = False) -> PutResult:
        """Store and acknowledge; ``bookkeeping`` records (the broker's own, about messages already
        stored) go on past the disk's warning ratio (see :meth:`MessageStore.put_messages`)."""
        return await self.acknowledged(self.service.append_messages(messages, bookkeeping=bookkeeping))

    async def _put_bookkeeping(self, messages: list[InboundMessage]) -> PutResult:
        return await self.put(messages, bookkeeping=True)

    async def put_batch(self, batch: MessageBatch | ScannedBatch) -> PutResult:
        return await self.acknowledged(self.service.append_batch(batch))

    @property
    def waits_after_append(self) -> bool:
        """Whether a put is acknowledged later than its append (see :meth:`acknowledged`); a
        hot path appends, and awaits only then."""
        return self.service.waits_for_flush or self.broker_role is BrokerRole.SYNC_MASTER

    async def acknowledged(self, result: PutResult) -> PutResult:
        """``result`` once the send may be acknowledged: at once by default, after its fsync
        under SYNC_FLUSH, and on a SYNC_MASTER once a slave holds it (docs/architecture.md, "Replication and
        failover")."""
        if result.ok and self.service.waits_for_flush:
            result = await self.service.durable(result)
        if result.ok and self.broker_role is BrokerRole.SYNC_MASTER:
            return await self._replicated(result)
        return result

    async def _replicated(self, result: PutResult) -> PutResult:
        if not self.replicas.connected:
            return result.with_status(
                PutStatus.SLAVE_NOT_AVAILABLE, "no slave is replicating from this master"
            )
        timeout_ms = self.settings.slave_ack_timeout_ms
        if await self.replicas.wait(result.end_offset, timeout_ms / 1000):
            return result
        return result.with_status(
            PutStatus.FLUSH_SLAVE_TIMEOUT, f"no slave acknowledged within {timeout_ms} ms"
        )

    def _pop_appended(self, topic: str, queue_id: int, max_offset: int) -> None:
        self.pop.notify_append(topic, queue_id)

    async def _pop_put(self, messages: list[InboundMessage]) -> PutResult:
        """POP records and dead letters, acknowledged as sends are; a dead-letter topic is
        created (read-only, as ``send_back`` creates it) before its first message."""
        for message in messages:
            if message.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
                self.topics.ensure(message.topic, 1, DLQ_PERM)
        await self.save_created_config()
        return await self.put(messages, bookkeeping=True)

    async def _put_one(self, message: InboundMessage) -> PutResult:
        return await self.service.put_message(message, bookkeeping=True)

    async def send_back(self, request: broker_pb2.SendBackRequest) -> None:
        """A consumer failed a message: retry it later, or move it to the dead letters."""
        group = self.topics.group(request.consumer_group)
        message = self.store.message_at(request.commit_log_offset)
        if message is None:
            raise RpcFailure(
                ErrorReason.INVALID_OFFSET, f"commit log offset {request.commit_log_offset} holds no message"
            )
        max_times = request.max_reconsume_times or group.retry_max_times
        reconsume = message.reconsume_times + 1
        properties = dict(message.properties)
        properties.setdefault(Property.RETRY_TOPIC, message.topic)
        properties.setdefault(Property.ORIGIN_MESSAGE_ID, request.origin_msg_id or message.msg_id)
        properties.pop(Property.DELAY, None)
        properties.pop(Property.REAL_TOPIC, None)
        properties.pop(Property.REAL_QUEUE_ID, None)
        if request.delay_level < 0 or reconsume > max_times:
            topic = dlq_topic(group.group_name)
            self.topics.ensure(topic, 1, DLQ_PERM)
            target = InboundMessage(topic=topic, body=message.body, queue_id=0, properties=properties)
        else:
            topic = retry_topic(group.group_name)
            self.topics.ensure(topic, max(1, group.retry_queue_nums))
            level = request.delay_level or 3 + message.reconsume_times
            properties[Property.DELAY] = str(min(level, self.delay_levels))
            retry = InboundMessage(topic=topic, body=message.body, queue_id=0, properties=properties)
            target = detour(retry, SCHEDULE_TOPIC, min(level, self.delay_levels) - 1)
        target.reconsume_times = reconsume
        target.born_timestamp_ms = message.born_timestamp_ms
        target.born_host = message.born_host
        target.flag = message.flag
        await self.save_created_config()  # a new retry or dead-letter topic (or group) first
        result = await self.service.put_message(target, bookkeeping=True)
        if not result.status.stored:
            raise RpcFailure(ErrorReason.SERVICE_NOT_AVAILABLE, f"send back failed: {result.reason}")

    # -- consumers -----------------------------------------------------------------------------

    def membership_changed(self, groups: set[str]) -> None:
        """Tell the members of groups whose membership changed to rebalance (counted per group
        by the registry, as the broker's rebalance-notification metric)."""
        self.clients.notify_changed(groups)

    def client_gone(self, client_id: str) -> None:
        """A session closed: the client leaves its groups now rather than after expiry."""
        self.membership_changed(self.clients.remove_client(client_id))

    @functools.lru_cache(maxsize=1024)  # noqa: B019 - one broker per process lifetime
    def tag_filter(self, expression: str) -> TagFilter:
        return TagFilter(expression)

    def queue_progress(self, group: str, topic: str, queue_id: int) -> broker_pb2.QueueProgress:
        broker_offset = self.store.max_offset_in_queue(topic, queue_id)
        consumer_offset = self.offsets.query(group, topic, queue_id)
        lag = broker_offset - consumer_offset if consumer_offset >= 0 else broker_offset
        return broker_pb2.QueueProgress(
            topic=topic,
            broker_name=self.settings.broker_name,
            queue_id=queue_id,
            broker_offset=broker_offset,
            consumer_offset=consumer_offset,
            lag=max(0, lag),
            last_timestamp_ms=self.last_store_time(topic, queue_id, max(consumer_offset, 0) - 1),
        )

    def last_store_time(self, topic: str, queue_id: int, offset: int | None = None) -> int:
        queue = self.store.consume_queue(topic, queue_id)
        if queue is None:
            return 0
        at = queue.max_offset - 1 if offset is None else offset
        unit = queue.unit_at(at) if at >= queue.min_offset else None
        return (self.store.commitlog.store_timestamp_at(unit[0]) or 0) if unit else 0

    def runtime_info(self) -> broker_pb2.RuntimeInfo:
        """Figures for ``admin broker status``, typed on the wire (numbers stay numbers)."""
        store, settings = self.store, self.settings
        return broker_pb2.RuntimeInfo(
            broker_name=settings.broker_name,
            broker_id=self.broker_id,
            cluster=settings.cluster,
            address=self.address,
            broker_role=self.broker_role.value,
            epoch=self.epoch,
            flush_mode=settings.flush_mode.value,
            pid=os.getpid(),
            commit_log_min_offset=store.commitlog.min_offset,
            commit_log_max_offset=store.commitlog.max_offset,
            commit_log_flushed_offset=store.commitlog.flushed_offset,
            dispatch_lag_bytes=store.dispatcher.lag_bytes,
            topic_count=len(self.topics.user_topics()),
            consumer_groups_online=len(self.clients.consumer_groups()),
            long_polls_held=self.holds.held,
            # timed messages too: a drain must wait for them as for delay levels
            delayed_messages_waiting=sum(self.schedule.pending().values()) + self.timer.pending,
            schedule_delivered=self.schedule.delivered,
            transactions_committed=self.transactions.committed,
            transactions_rolled_back=self.transactions.rolled_back,
            transaction_checks_sent=self.transactions.checks_sent,
        )

    # -- loops ---------------------------------------------------------------------------------

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.scan_interval_ms / 1000)
            _, changed = self.clients.sweep()
            self.membership_changed(changed)
            self.locks.sweep()

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.config_persist_interval_ms / 1000)
            await asyncio.to_thread(self.tables.persist_all)

    def registration_changed(self) -> None:
        """Topics or the role changed: register with every name server now, in the background.

        Never awaited by a request: the change is answered once it is held here, and a hung
        name server must not slow the client (see :mod:`orbitmq.broker.registration`)."""
        self._registrar.request()

    def _registration(self) -> nameserver_pb2.RegisterBrokerRequest:
        """This broker's registration as of now (topics, role, epoch)."""
        settings = self.settings
        return nameserver_pb2.RegisterBrokerRequest(
            cluster=settings.cluster,
            broker_name=settings.broker_name,
            broker_addr=self.address,
            broker_id=self.broker_id,
            epoch=self.epoch,
            topic_configs={t.topic_name: topic_to_proto(t) for t in self.tables.topics.list()},
            data_version=common_pb2.DataVersion(
                timestamp_ms=self.tables.topics.data_version.timestamp,
                counter=self.tables.topics.data_version.counter,
            ),
            heartbeat_timeout_ms=settings.heartbeat_timeout_ms,
        )

    def _auth_tables(self) -> AuthTables:
        """The users and ACLs the name servers are told of (registration.py)."""
        return self.auth_store.tables

    def _registered(self, reply: nameserver_pb2.RegisterBrokerResponse) -> None:
        if reply.master_addr and reply.master_addr != self.address:
            self.known_master_addr = reply.master_addr

    async def _unregister(self) -> None:
        settings = self.settings
        request = nameserver_pb2.UnregisterBrokerRequest(
            cluster=settings.cluster,
            broker_name=settings.broker_name,
            broker_addr=self.address,
            broker_id=self.broker_id,
        )
        await self._registrar.unregister(request)


async def run(settings: BrokerSettings) -> None:
    """Run a broker until SIGTERM or SIGINT, then stop gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (
        signal.SIGTERM,
        signal.SIGINT,
    ):  # before start: a signal during start-up still stops cleanly
        loop.add_signal_handler(signum, stop.set)
    broker = Broker(settings)
    await broker.start()
    freeze_startup_heap()  # full GC passes walk only what serving builds (25-32 ms -> under 2)
    print(
        f"broker {settings.broker_name} listening on {broker.address} metrics {broker.grpc.metrics_url}",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await broker.close()
        print(f"broker {settings.broker_name} stopped", file=sys.stderr, flush=True)
