"""Master/slave replication, SYNC_MASTER acknowledgements and role changes with epochs (docs/architecture.md,
"Replication and failover").

* **Master side** — :class:`ReplicaTracker` knows each connected slave's acknowledged offset;
  ``Replicate`` streams whole commit-log records to a slave from the offset it names and
  records its acks; a ``SYNC_MASTER`` send waits until some slave holds it.
* **Slave side** — :class:`ReplicationClient` finds the master (the name servers tell a
  registering slave; a role change may name it), aligns its log with the master's (cutting what
  a former master wrote that the new master never had, found from the two epoch histories),
  appends what arrives at the same offsets and acknowledges it; every few seconds it copies the
  master's topics, groups, consumer offsets and delay progress.
* **Roles** — :class:`RoleState` is the broker's role, id and epoch as last decided, kept in
  ``ha-role.json`` in the store root so a restart keeps the outcome of a failover (it wins over
  the configured role). A role change must carry a newer epoch; a promotion records
  ``(epoch, start offset)`` in the store's epoch file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from orbitmq.broker.transactions import PROGRESS_GROUP
from orbitmq.common.credentials import own_credentials, signed
from orbitmq.common.rpc import RpcFailure
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.common.streams import queued_until
from orbitmq.common.tasks import TaskSet
from orbitmq.common.tls import explain, open_channel
from orbitmq.common.topics import TRANS_HALF_TOPIC
from orbitmq.store.config import BrokerRole
from orbitmq.store.config_store import JsonConfigStore
from orbitmq.store.epoch import EpochEntry, EpochFile, common_point
from orbitmq.v1 import broker_pb2, broker_pb2_grpc
from orbitmq.v1.broker_pb2 import ErrorReason

if TYPE_CHECKING:
    from orbitmq.broker.server import Broker

log = logging.getLogger(__name__)

ROLE_FILE = "ha-role.json"
EPOCH_FILE = "epoch.json"
CHUNK_BYTES = 1024 * 1024
"""Most commit-log bytes per replication message."""
HEARTBEAT_S = 1.0
"""An idle replication stream sends an empty chunk this often (the slave learns the lag)."""
RECONNECT_S = 1.0
PROMOTION_POLL_S = 0.05
"""Retry interval while a candidate master still answers as a slave: a planned switchover names
the new master before promoting it, and its old master must follow quickly (a SYNC_MASTER
acknowledges sends as SLAVE_NOT_AVAILABLE until a slave streams)."""


class NotMasterYet(ValueError):
    """The broker asked for its log still answers as a slave."""


class _Schema(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class RoleRecord(_Schema):
    role: BrokerRole
    broker_id: int = Field(ge=0)
    epoch: int = Field(ge=0)
    master_addr: str = ""


class RoleState:
    """The role this broker acts in now: the configured one until a role change is recorded."""

    def __init__(self, root: Path, role: BrokerRole, broker_id: int) -> None:
        self._store: JsonConfigStore[RoleRecord | None] = JsonConfigStore(
            root / ROLE_FILE,
            RoleRecord | None,
            lambda: None,  # type: ignore[arg-type]
        )
        recorded = self._store.load()
        self.record = recorded or RoleRecord(role=role, broker_id=broker_id, epoch=0)
        if recorded is not None and (recorded.role, recorded.broker_id) != (role, broker_id):
            log.warning(
                "%s says %s with broker id %d (epoch %d), which overrides the configured %s id %d",
                self._store.path,
                recorded.role.value,
                recorded.broker_id,
                recorded.epoch,
                role.value,
                broker_id,
            )

    def change(self, role: BrokerRole, broker_id: int, epoch: int, master_addr: str = "") -> None:
        record = RoleRecord(role=role, broker_id=broker_id, epoch=epoch, master_addr=master_addr)
        self._store.persist(record)
        self.record = record


@dataclass
class SlaveLink:
    address: str
    acked_offset: int


class ReplicaTracker:
    """Master side: connected slaves, their acknowledged offsets, and the sends waiting for them."""

    def __init__(self) -> None:
        self.slaves: dict[int, SlaveLink] = {}
        self._waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self.data = asyncio.Event()
        """Set when the log grows: idle replication streams wake up and send."""
        self.listeners: list[Callable[[], None]] = []
        """Called when a slave attaches, acknowledges more, or goes (the read fence)."""

    @property
    def connected(self) -> bool:
        return bool(self.slaves)

    @property
    def best_acked(self) -> int:
        return max((link.acked_offset for link in self.slaves.values()), default=-1)

    def attach(self, key: int, address: str, offset: int) -> None:
        self.slaves[key] = SlaveLink(address, offset)
        self._wake()

    def detach(self, key: int) -> None:
        if self.slaves.pop(key, None) is not None:
            self._changed()

    def acked(self, key: int, offset: int) -> None:
        link = self.slaves.get(key)
        if link is not None and offset > link.acked_offset:
            link.acked_offset = offset
            self._wake()

    def grew(self, *_: object) -> None:
        """Dispatcher listener: new records are in the log."""
        self.data.set()

    async def wait(self, end: int, timeout_s: float) -> bool:
        """Whether a slave acknowledged everything below ``end`` within ``timeout_s``."""
        if self.best_acked >= end:
            return True
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (end, waiter)
        self._waiters.append(entry)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout_s)
        except TimeoutError:
            return False
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)

    def _wake(self) -> None:
        best = self.best_acked
        for end, waiter in self._waiters:
            if end <= best and not waiter.done():
                waiter.set_result(True)
        self._changed()

    def _changed(self) -> None:
        for listener in self.listeners:
            listener()


class ReplicationClient:
    """Slave side: stream the master's log into the local store, and copy its config tables
    (users and ACLs among them)."""

    def __init__(self, broker: Broker) -> None:
        self.b = broker
        self._tasks = TaskSet(f"replication:{broker.settings.broker_name}")
        self.master_addr = ""
        self.master_max_offset = -1
        self.connected = asyncio.Event()

    @property
    def lag_bytes(self) -> int:
        if self.master_max_offset < 0:
            return 0
        return max(0, self.master_max_offset - self.b.store.commitlog.max_offset)

    def start(self) -> None:
        self._tasks.spawn("stream", self._stream_loop())
        self._tasks.spawn("config", self._config_loop())

    async def close(self) -> None:
        await self._tasks.close()
        self.connected.clear()

    def _candidates(self) -> list[str]:
        """Where the master may be, most specific first: the address the last role change named,
        the one the name servers report, the configured one. A recorded address goes stale when
        the master comes back elsewhere (a pod restarted under a new IP), so each is tried in
        turn; :meth:`_stream` follows only a broker that answers as master."""
        found: list[str] = []
        record = self.b.role.record.master_addr
        for address in (record, self.b.known_master_addr, self.b.settings.master_addr):
            if address and address != self.b.address and address not in found:
                found.append(address)
        return found

    def _master(self) -> str:
        """The master being replicated from, else the first candidate."""
        if self.connected.is_set() and self.master_addr:
            return self.master_addr
        return next(iter(self._candidates()), "")

    async def _stream_loop(self) -> None:
        while True:
            awaiting = False
            for address in self._candidates():
                try:
                    await self._stream(address)
                except NotMasterYet as error:
                    awaiting = True
                    log.debug("replication from %s: %s", address, error)
                except (grpc.aio.AioRpcError, RpcFailure, OSError, ValueError) as error:
                    detail = error.details() if isinstance(error, grpc.aio.AioRpcError) else str(error)
                    refused = await explain(error, address, self.b.settings)  # a TLS mistake, named
                    log.log(
                        logging.WARNING if refused else logging.INFO,
                        "replication from %s stopped: %s",
                        address,
                        refused or detail,
                    )
                followed = self.connected.is_set()
                self.connected.clear()
                if followed:
                    break  # it was the master: start again from the best candidate
            await asyncio.sleep(PROMOTION_POLL_S if awaiting else RECONNECT_S)

    async def _stream(self, address: str) -> None:
        async with signed(
            open_channel(address, self.b.settings, GRPC_OPTIONS), own_credentials(self.b.settings)
        ) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            state = await stub.GetHaState(broker_pb2.GetHaStateRequest(), timeout=5)
            if state.role == BrokerRole.SLAVE.value:
                raise NotMasterYet(f"{address} is a slave, not a master")
            await self.b.align_with_master(state)
            self.b.fence.aligned()
            store = self.b.store
            acks: asyncio.Queue[int] = asyncio.Queue()
            acks.put_nowait(store.commitlog.max_offset)

            ended = asyncio.Event()

            async def ack_stream() -> AsyncIterator[broker_pb2.ReplicaAck]:
                """Acks while this stream lasts (:mod:`orbitmq.common.streams`: one task and
                call kept waiting for every master lost)."""
                async for offset in queued_until(acks, ended):
                    yield broker_pb2.ReplicaAck(
                        slave_addr=self.b.address, max_offset=offset, epoch=self.b.epoch
                    )

            call = stub.Replicate(ack_stream())
            self.master_addr = address
            self.connected.set()
            log.info("replicating from master %s at offset %d", address, store.commitlog.max_offset)
            try:
                async for chunk in call:
                    self.master_max_offset = chunk.master_max_offset
                    if not chunk.data:
                        continue
                    if chunk.offset != store.commitlog.max_offset:
                        raise ValueError(
                            f"master sent offset {chunk.offset}; "
                            f"the local log ends at {store.commitlog.max_offset}"
                        )
                    try:
                        store.append_replicated(chunk.offset, chunk.data)
                    except OSError as error:  # no segment written: copied again after reconnecting
                        if store.disk.write_failed(error):  # shown as disk full until space frees
                            log.error("replication from %s: %s", address, store.disk.refusal)
                        raise
                    self.b.service.wake_dispatcher()
                    acks.put_nowait(store.commitlog.max_offset)
            finally:
                ended.set()
                call.cancel()

    async def _config_loop(self) -> None:
        interval = self.b.settings.replica_config_interval_ms / 1000
        channel: grpc.aio.Channel | None = None
        channel_addr = ""
        try:
            while True:
                address = self._master()
                if address and address != self.b.address:
                    # One channel per master, kept across copies rather than a connection each.
                    if channel is None or channel_addr != address:
                        if channel is not None:
                            await channel.close()
                        channel = signed(
                            open_channel(address, self.b.settings, GRPC_OPTIONS),
                            own_credentials(self.b.settings),
                        )
                        channel_addr = address
                    try:
                        await self.copy_config(broker_pb2_grpc.BrokerStub(channel), address)
                    except (grpc.aio.AioRpcError, OSError, ValueError) as error:
                        detail = error.details() if isinstance(error, grpc.aio.AioRpcError) else error
                        log.info("config copy from %s failed: %s", address, detail)
                await asyncio.sleep(interval)
        finally:
            if channel is not None:
                await channel.close()

    async def copy_config(self, stub: broker_pb2_grpc.BrokerStub, address: str) -> None:
        timeout_s = max(1.0, self.b.settings.replica_config_interval_ms / 1000)
        reply = await stub.GetReplicaConfig(broker_pb2.GetReplicaConfigRequest(), timeout=timeout_s)
        tables = self.b.tables
        source = f"master {address}"
        progress = (PROGRESS_GROUP, TRANS_HALF_TOPIC, 0)
        own = tables.consumer_offsets.query(*progress)
        for table, raw in (
            (tables.topics, reply.topics),
            (tables.subscription_groups, reply.subscription_groups),
            (tables.consumer_offsets, reply.consumer_offsets),
            (tables.delay_offsets, reply.delay_offsets),
        ):
            if raw:
                await asyncio.to_thread(table.import_json, raw, source)
        # The check-back progress is this log's own, moved toward the master's only past what
        # this log shows handled (TransactionService.settle).
        claimed = tables.consumer_offsets.query(*progress)
        if claimed != own:  # the copy brought the master's: keep this log's (no entry: none yet)
            tables.consumer_offsets.commit(*progress, max(own, 0))
        await asyncio.to_thread(self.b.transactions.settle, claimed)
        if reply.auth:  # empty from a master older than the users and ACLs table
            await self.b.auth_store.import_json(reply.auth, source)


def open_epoch_file(root: Path) -> EpochFile:
    epochs = EpochFile(root / EPOCH_FILE)
    epochs.load()
    return epochs


def epochs_to_proto(entries: list[EpochEntry]) -> list[broker_pb2.EpochRecord]:
    return [broker_pb2.EpochRecord(epoch=e.epoch, start_offset=e.start_offset) for e in entries]


def shared_offset(local: list[EpochEntry], local_max: int, state: broker_pb2.HaState) -> int:
    """Where this log and the master's (described by ``state``) stop agreeing."""
    remote = [EpochEntry(r.epoch, r.start_offset) for r in state.epochs]
    return common_point(local, local_max, remote, state.max_offset)


class HaServicer:
    """The replication RPCs of the Broker service (mixed into its servicer)."""

    b: Broker

    async def Replicate(self, request_iterator, context):  # type: ignore[no-untyped-def]
        b = self.b
        if b.is_slave:
            raise RpcFailure(ErrorReason.SLAVE_READ_ONLY, f"{b.address} is a slave and has no slaves")
        first = await anext(aiter(request_iterator))
        store = b.store
        offset = first.max_offset
        if not store.commitlog.min_offset <= offset <= store.commitlog.max_offset:
            raise RpcFailure(
                ErrorReason.INVALID_OFFSET,
                f"slave {first.slave_addr} asks from offset {offset}, but this master holds "
                f"{store.commitlog.min_offset}..{store.commitlog.max_offset}; it must realign first",
            )
        if not store.commitlog.entry_starts_at(offset):
            # Chunks are whole records from here on: from inside one none would ever parse, and
            # the loop below spun on the empty span without yielding, freezing the broker.
            raise RpcFailure(
                ErrorReason.INVALID_OFFSET,
                f"slave {first.slave_addr} asks from offset {offset}, where no record starts",
            )
        tracker = b.replicas
        key = id(context)
        tracker.attach(key, first.slave_addr, offset)
        log.info("slave %s replicating from offset %d", first.slave_addr, offset)

        async def read_acks() -> None:
            async for ack in request_iterator:
                tracker.acked(key, ack.max_offset)

        reader = asyncio.get_running_loop().create_task(read_acks())
        try:
            while not reader.done():
                data = store.replication_span(offset, CHUNK_BYTES)
                if data:
                    yield broker_pb2.ReplicaChunk(
                        offset=offset, data=data, master_max_offset=store.commitlog.max_offset, epoch=b.epoch
                    )
                    offset += len(data)
                    continue
                tracker.data.clear()
                if store.commitlog.max_offset > offset:
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(tracker.data.wait(), HEARTBEAT_S)
                if store.commitlog.max_offset <= offset:
                    yield broker_pb2.ReplicaChunk(
                        offset=offset, master_max_offset=store.commitlog.max_offset, epoch=b.epoch
                    )
        finally:
            reader.cancel()
            tracker.detach(key)
            log.info("slave %s stopped replicating at offset %d", first.slave_addr, offset)

    async def GetReplicaConfig(self, request, context):  # type: ignore[no-untyped-def]
        tables = self.b.tables
        return broker_pb2.ReplicaConfig(
            topics=tables.topics.export_json(),
            subscription_groups=tables.subscription_groups.export_json(),
            consumer_offsets=tables.consumer_offsets.export_json(),
            delay_offsets=tables.delay_offsets.export_json(),
            auth=self.b.auth_store.export_json(),
        )

    async def ChangeRole(self, request, context):  # type: ignore[no-untyped-def]
        try:
            role = BrokerRole(request.role)
        except ValueError:
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT,
                f"role {request.role!r} must be one of {', '.join(r.value for r in BrokerRole)}",
            ) from None
        await self.b.change_role(role, request.epoch, request.broker_id, request.master_addr)
        return self.b.ha_state()

    async def GetHaState(self, request, context):  # type: ignore[no-untyped-def]
        return self.b.ha_state()
