"""Transactional messages of v2 clients: half messages, their ends, and check-backs.

v2 has no producer groups, orbitmq's brokers check a transaction back with a *producer group*
(any member with an open session). The proxy maps each topic to one group, ``%V2TX%<topic>``:
half messages of the topic are sent in that group, and every proxy that has a live v2 producer
of the topic is a member (it heartbeats the group to every master and keeps a session with
each). So a check-back reaches a proxy that can ask a producer of the topic, whichever proxy
took the original send, and even after that proxy or producer is gone (RocketMQ's behaviour:
any producer of the topic may answer). The proxy forwards it on the producer's telemetry stream
as a ``RecoverOrphanedTransactionCommand``; the producer answers with ``EndTransaction``
(source ``SOURCE_SERVER_CHECK``), which the proxy passes to the broker.

The transaction id handed to the client carries the broker name and the half message's
commit-log offset (:class:`orbitmq.proxy.convert.TransactionRef`), so ending it needs no state
here; the broker's own op log makes a second end of the same transaction a no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
from prometheus_client import Counter

from orbitmq.client.channels import Channels
from orbitmq.client.message import SendResult
from orbitmq.client.producer import Producer, client_id
from orbitmq.client.session import BrokerSessions
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.common.tasks import TaskSet
from orbitmq.common.topics import TRANS_HALF_TOPIC, Property
from orbitmq.proxy import convert
from orbitmq.proxy.clients import ClientRegistry
from orbitmq.proxy.convert import Refused, TransactionRef
from orbitmq.proxy.settings import ProxySettings
from orbitmq.rocketmq_v2 import definition_pb2 as v2
from orbitmq.rocketmq_v2 import service_pb2
from orbitmq.store.message_id import encode_offset_msg_id
from orbitmq.store.record import StoredMessage, decode
from orbitmq.v1 import broker_pb2, nameserver_pb2
from orbitmq.v1.broker_pb2 import TransactionResolution

log = logging.getLogger(__name__)

GROUP_PREFIX = "%V2TX%"
MASTER_ID = 0
END_TIMEOUT_S = 5.0
HALF_PROPERTIES = frozenset({Property.REAL_TOPIC, Property.REAL_QUEUE_ID, Property.TRANSACTION_PREPARED})
"""Properties the half-message detour adds; a check-back shows the message without them."""

RESOLUTIONS = {
    v2.COMMIT: TransactionResolution.COMMIT,
    v2.ROLLBACK: TransactionResolution.ROLLBACK,
}


def group_of(topic: str) -> str:
    """The orbitmq producer group of ``topic``'s v2 transactions."""
    return f"{GROUP_PREFIX}{topic}"


class Transactions:
    """Sends half messages, ends transactions and forwards check-backs (module docstring).

    Args:
        settings: send budget, heartbeat period.
        channels: the proxy's channels to name servers and brokers.
        clients: the live v2 clients, to find a producer of a topic for a check-back.
        forwarded: counts check-backs pushed to a producer.
    """

    def __init__(
        self, settings: ProxySettings, channels: Channels, clients: ClientRegistry, forwarded: Counter
    ) -> None:
        self._settings = settings
        self._channels = channels
        self._clients = clients
        self.client_id = f"{client_id()}#v2-proxy"
        """This proxy as a member of the producer groups (apart from its senders' ids)."""
        self._sessions = BrokerSessions(channels, self.client_id, self._on_event)
        self._producers: dict[str, Producer] = {}
        self._producer_lock = asyncio.Lock()
        self._groups: set[str] = set()
        self._masters: dict[str, str] = {}
        self._changed = asyncio.Event()
        self._tasks = TaskSet("proxy-transactions")
        self._forwarded = forwarded

    async def start(self) -> None:
        self._tasks.spawn("heartbeat", self._heartbeat_loop())

    async def close(self) -> None:
        await self._tasks.close()
        await self._sessions.close()
        for producer in self._producers.values():
            await producer.close()
        self._producers.clear()

    # -- membership ----------------------------------------------------------------------------

    def serve(self, topics: set[str]) -> None:
        """Be a member of the groups of ``topics`` (a v2 producer of them is connected here)."""
        groups = {group_of(t) for t in topics}
        if not groups <= self._groups:
            self._groups |= groups
            self._changed.set()

    async def _heartbeat_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self._settings.heartbeat_ms / 1000)
            self._changed.clear()
            if not self._groups:
                continue
            try:
                await self._heartbeat_all()
            except (grpc.aio.AioRpcError, RpcFailure) as error:
                log.warning("proxy heartbeat of %d transaction groups failed: %s", len(self._groups), error)

    async def _heartbeat_all(self) -> None:
        await self._refresh_masters()
        request = broker_pb2.HeartbeatRequest(
            client_id=self.client_id,
            producers=[broker_pb2.ProducerData(group=g) for g in sorted(self._groups)],
        )
        for name, address in sorted(self._masters.items()):
            try:
                await self._channels.broker(address).Heartbeat(request, timeout=3)
            except grpc.aio.AioRpcError as error:
                log.info("proxy heartbeat to %s (%s) failed: %s", name, address, error.code().name)
                continue
            self._sessions.ensure(address)

    async def _refresh_masters(self) -> None:
        info = await self._channels.namesrv_call("GetClusterInfo", nameserver_pb2.GetClusterInfoRequest())
        self._masters = {
            name: data.broker_addrs[MASTER_ID]
            for name, data in info.broker_addr_table.items()  # type: ignore[attr-defined]
            if MASTER_ID in data.broker_addrs
        }

    async def master_of(self, broker_name: str) -> str:
        if broker_name not in self._masters:
            await self._refresh_masters()
        address = self._masters.get(broker_name)
        if address is None:
            raise RpcFailure(
                broker_pb2.ErrorReason.SERVICE_NOT_AVAILABLE,
                f"broker {broker_name} has no registered master; retry once it has one",
            )
        return address

    # -- half messages and ends ----------------------------------------------------------------

    async def send_half(
        self, outbound: convert.Outbound, timeout_ms: int
    ) -> tuple[SendResult, TransactionRef]:
        topic = outbound.message.topic
        self.serve({topic})
        producer = await self._producer(topic)
        outbound.message.system_properties[Property.TRANSACTION_PREPARED] = "true"
        result = await producer.send(outbound.message, timeout_ms=timeout_ms)
        return result, TransactionRef(result.broker_name, result.commit_log_offset, outbound.message_id)

    async def _producer(self, topic: str) -> Producer:
        producer = self._producers.get(topic)
        if producer is None:
            async with self._producer_lock:
                producer = self._producers.get(topic)
                if producer is None:
                    producer = Producer(
                        group_of(topic),
                        self._channels.namesrv_addrs,
                        send_timeout_ms=self._settings.send_timeout_ms,
                        default_topic_queue_nums=self._settings.default_topic_queue_nums,
                        credentials=self._channels.credentials,
                    )
                    await producer.start()
                    self._producers[topic] = producer
        return producer

    async def end(self, topic: str, transaction_id: str, resolution: int, from_check: bool) -> None:
        """Commit or roll back; raises :class:`Refused` for an id or resolution that is not valid."""
        ref = TransactionRef.decode(transaction_id)
        if resolution not in RESOLUTIONS:
            raise Refused(v2.BAD_REQUEST, f"transaction resolution {resolution} must be COMMIT or ROLLBACK")
        address = await self.master_of(ref.broker_name)
        request = broker_pb2.EndTransactionRequest(
            producer_group=group_of(topic),
            commit_log_offset=ref.commit_log_offset,
            transaction_id=ref.unique_key,
            resolution=RESOLUTIONS[resolution],
            from_check=from_check,
        )
        await self._channels.broker(address).EndTransaction(request, timeout=END_TIMEOUT_S)

    async def half_topic(self, transaction_id: str) -> str:
        """The topic the half message of ``transaction_id`` was sent to, read from its master
        (auth checks ``Pub`` on it: the id is the client's to write, so naming one topic in the
        request and another's half message in the id must not end that other transaction).
        Raises :class:`Refused` ``INVALID_TRANSACTION_ID`` when no half message lies there."""
        ref = TransactionRef.decode(transaction_id)
        address = await self.master_of(ref.broker_name)
        request = broker_pb2.ViewMessageRequest(msg_id=encode_offset_msg_id(address, ref.commit_log_offset))
        try:
            reply = await self._channels.broker(address).ViewMessage(request, timeout=END_TIMEOUT_S)
        except grpc.aio.AioRpcError as error:
            if failure_of(error) is None:
                raise
            reply = broker_pb2.QueryMessageResponse()
        half = decode(reply.records[0]) if reply.records else None
        if half is None or half.topic != TRANS_HALF_TOPIC or Property.REAL_TOPIC not in half.properties:
            raise Refused(
                v2.INVALID_TRANSACTION_ID,
                f"transaction {transaction_id!r}: no half message at offset {ref.commit_log_offset} "
                f"of {ref.broker_name}",
            )
        return half.properties[Property.REAL_TOPIC]

    # -- check-backs ---------------------------------------------------------------------------

    async def _on_event(self, address: str, event: broker_pb2.ServerEvent) -> None:
        if not event.HasField("check_transaction"):
            return
        check = event.check_transaction
        half = decode(check.record)
        topic = half.properties.get(Property.REAL_TOPIC, check.producer_group.removeprefix(GROUP_PREFIX))
        broker_name = next((n for n, a in self._masters.items() if a == address), None)
        streams = self._clients.publishers(topic)
        if broker_name is None or not streams:
            log.info(
                "no v2 producer of topic %s is connected to check transaction %s", topic, check.transaction_id
            )
            return
        ref = TransactionRef(broker_name, check.commit_log_offset, check.transaction_id)
        for stream in streams:
            info = self._clients.get(stream.client_id)
            namespace = info.namespace if info else ""
            command = service_pb2.TelemetryCommand(
                recover_orphaned_transaction_command=service_pb2.RecoverOrphanedTransactionCommand(
                    message=_checked_message(half, topic, namespace), transaction_id=ref.encode()
                )
            )
            if stream.push(command):
                self._forwarded.inc()
                return


def _checked_message(half: StoredMessage, topic: str, namespace: str) -> v2.Message:
    """The half message as its producer sent it, for the producer's transaction checker."""
    properties = {k: v for k, v in half.properties.items() if k not in HALF_PROPERTIES}
    return convert.inbound(
        topic,
        half.body,
        properties,
        born_timestamp_ms=half.born_timestamp_ms,
        born_host=half.born_host,
        store_timestamp_ms=half.store_timestamp_ms,
        queue_id=int(half.properties.get(Property.REAL_QUEUE_ID, "0") or 0),
        queue_offset=half.queue_offset,
        message_type=v2.TRANSACTION,
        namespace=namespace,
    )
