"""Administration of a cluster (RocketMQ's mqadmin operations) over name servers and brokers.

Every operation finds its brokers through the name servers: cluster-wide changes go to every
master of the cluster, topic-scoped reads go to the brokers in the topic's route.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from orbitmq.client.channels import Channels
from orbitmq.common.names import validate_group_name, validate_topic_name
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.store.message_id import decode_offset_msg_id
from orbitmq.store.record import StoredMessage, decode
from orbitmq.v1 import broker_pb2, common_pb2, nameserver_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

MASTER_ID = 0


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    cluster: str
    broker_name: str
    broker_id: int
    address: str


class Admin:
    def __init__(self, namesrv: str | list[str]) -> None:
        self._channels = Channels(namesrv)

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channels.close()

    # -- discovery -----------------------------------------------------------------------------

    async def cluster_info(self) -> nameserver_pb2.ClusterInfo:
        return await self._channels.namesrv_call("GetClusterInfo", nameserver_pb2.GetClusterInfoRequest())  # type: ignore[return-value]

    async def brokers(self, cluster: str | None = None) -> list[BrokerInfo]:
        info = await self.cluster_info()
        found = []
        for name, data in sorted(info.broker_addr_table.items()):
            if cluster and data.cluster != cluster:
                continue
            for broker_id, address in sorted(data.broker_addrs.items()):
                found.append(BrokerInfo(data.cluster, name, broker_id, address))
        return found

    async def masters(self, cluster: str | None = None) -> list[BrokerInfo]:
        masters = [b for b in await self.brokers(cluster) if b.broker_id == MASTER_ID]
        if not masters:
            where = f"cluster {cluster!r}" if cluster else "any cluster"
            raise RpcFailure(ErrorReason.SERVICE_NOT_AVAILABLE, f"no master broker is registered in {where}")
        return masters

    async def route(self, topic: str) -> common_pb2.TopicRoute:
        validate_topic_name(topic)
        return await self._channels.namesrv_call("QueryRoute", nameserver_pb2.QueryRouteRequest(topic=topic))  # type: ignore[return-value]

    async def _route_masters(self, topic: str) -> list[tuple[str, str]]:
        route = await self.route(topic)
        return [
            (d.broker_name, d.broker_addrs[MASTER_ID])
            for d in route.broker_datas
            if MASTER_ID in d.broker_addrs
        ]

    async def topic_list(self) -> list[str]:
        reply = await self._channels.namesrv_call("GetTopicList", nameserver_pb2.GetTopicListRequest())
        return sorted(reply.topics)  # type: ignore[attr-defined]

    # -- topics --------------------------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        *,
        read_queue_nums: int = 4,
        write_queue_nums: int = 4,
        perm: int = 6,
        order: bool = False,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """Create or update a topic on one broker or every master of a cluster; returns brokers."""
        validate_topic_name(topic)
        config = common_pb2.TopicConfig(
            topic_name=topic,
            read_queue_nums=read_queue_nums,
            write_queue_nums=write_queue_nums,
            perm=perm,
            order=order,
        )
        targets = [broker_addr] if broker_addr else [b.address for b in await self.masters(cluster)]
        for address in targets:
            await self._channels.broker(address).CreateTopic(
                broker_pb2.CreateTopicRequest(topic=config), timeout=10
            )
        return targets

    async def delete_topic(self, topic: str, cluster: str | None = None) -> list[str]:
        validate_topic_name(topic)
        deleted = []
        for broker in await self.masters(cluster):
            try:
                await self._channels.broker(broker.address).DeleteTopic(
                    broker_pb2.DeleteTopicRequest(topic=topic)
                )
                deleted.append(broker.address)
            except Exception as error:  # a broker without the topic is fine
                if not _is_reason(error, ErrorReason.TOPIC_NOT_EXIST):
                    raise
        await self._channels.namesrv_call(
            "DeleteTopic", nameserver_pb2.DeleteTopicInNameServerRequest(topic=topic)
        )
        return deleted

    async def topic_status(self, topic: str) -> list[tuple[str, broker_pb2.QueueOffsets]]:
        rows = []
        for name, address in await self._route_masters(topic):
            stats = await self._channels.broker(address).GetTopicStats(
                broker_pb2.GetTopicStatsRequest(topic=topic)
            )
            rows.extend((name, q) for q in stats.queues)
        return rows

    # -- groups --------------------------------------------------------------------------------

    async def create_group(
        self,
        group: str,
        *,
        retry_max_times: int = 16,
        consume_broadcast_enable: bool = True,
        cluster: str | None = None,
    ) -> list[str]:
        validate_group_name(group)
        config = broker_pb2.SubscriptionGroupConfig(
            group_name=group,
            consume_enable=True,
            consume_from_min_enable=True,
            consume_broadcast_enable=consume_broadcast_enable,
            retry_queue_nums=1,
            retry_max_times=retry_max_times,
        )
        targets = [b.address for b in await self.masters(cluster)]
        for address in targets:
            await self._channels.broker(address).CreateSubscriptionGroup(
                broker_pb2.CreateSubscriptionGroupRequest(group=config)
            )
        return targets

    async def delete_group(self, group: str, cluster: str | None = None) -> list[str]:
        validate_group_name(group)
        deleted = []
        for broker in await self.masters(cluster):
            try:
                await self._channels.broker(broker.address).DeleteSubscriptionGroup(
                    broker_pb2.DeleteSubscriptionGroupRequest(group_name=group)
                )
                deleted.append(broker.address)
            except Exception as error:
                if not _is_reason(error, ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST):
                    raise
        return deleted

    async def groups(self, cluster: str | None = None) -> dict[str, broker_pb2.SubscriptionGroupConfig]:
        found = {}
        for broker in await self.masters(cluster):
            reply = await self._channels.broker(broker.address).ListSubscriptionGroups(
                broker_pb2.ListSubscriptionGroupsRequest()
            )
            found.update({g.group_name: g for g in reply.groups})
        return found

    async def consume_progress(self, group: str, topic: str | None = None) -> list[broker_pb2.QueueProgress]:
        validate_group_name(group)
        rows: list[broker_pb2.QueueProgress] = []
        if topic:
            targets = [address for _, address in await self._route_masters(topic)]
        else:
            targets = [b.address for b in await self.masters()]
        for address in targets:
            stats = await self._channels.broker(address).GetConsumeStats(
                broker_pb2.GetConsumeStatsRequest(consumer_group=group, topic=topic or "")
            )
            rows.extend(stats.queues)
        return rows

    async def reset_offset(
        self, group: str, topic: str, *, timestamp_ms: int | None = None, offset: int | None = None
    ) -> dict[str, dict[int, int]]:
        if (timestamp_ms is None) == (offset is None):
            raise ValueError("reset needs exactly one of a timestamp or an offset")
        result = {}
        for name, address in await self._route_masters(topic):
            request = broker_pb2.ResetOffsetRequest(consumer_group=group, topic=topic)
            if timestamp_ms is not None:
                request.timestamp_ms = timestamp_ms
            else:
                request.offset = offset  # type: ignore[assignment]
            reply = await self._channels.broker(address).ResetOffset(request)
            result[name] = dict(reply.offsets)
        return result

    # -- brokers and messages ------------------------------------------------------------------

    async def broker_status(self, address: str) -> dict[str, str]:
        reply = await self._channels.broker(address).GetRuntimeInfo(broker_pb2.GetRuntimeInfoRequest())
        return dict(reply.entries)

    async def messages_by_key(self, topic: str, key: str, max_num: int = 32) -> list[StoredMessage]:
        found = []
        for _, address in await self._route_masters(topic):
            reply = await self._channels.broker(address).QueryMessageByKey(
                broker_pb2.QueryMessageByKeyRequest(topic=topic, key=key, max_num=max_num)
            )
            found.extend(decode(r) for r in reply.records)
        return sorted(found, key=lambda m: m.store_timestamp_ms)

    async def message_by_id(self, msg_id: str) -> StoredMessage:
        host, _ = decode_offset_msg_id(msg_id)
        reply = await self._channels.broker(host).ViewMessage(broker_pb2.ViewMessageRequest(msg_id=msg_id))
        return decode(reply.records[0])

    async def dead_letters(self, group: str, max_num: int = 100) -> list[StoredMessage]:
        """Messages in the group's dead-letter queue, oldest first."""
        validate_group_name(group)
        topic = f"%DLQ%{group}"
        messages: list[StoredMessage] = []
        try:
            masters = await self._route_masters(topic)
        except Exception as error:
            if _is_reason(error, ErrorReason.TOPIC_NOT_EXIST):
                return []
            raise
        for _, address in masters:
            stub = self._channels.broker(address)
            offset = (await stub.GetMinOffset(broker_pb2.QueueRequest(topic=topic, queue_id=0))).offset
            while len(messages) < max_num:
                reply = await stub.PullMessage(
                    broker_pb2.PullMessageRequest(
                        consumer_group=f"{group}-dlq-viewer",
                        topic=topic,
                        queue_id=0,
                        queue_offset=offset,
                        max_msg_nums=min(32, max_num - len(messages)),
                        commit_offset=-1,
                    )
                )
                if not reply.records:
                    break
                messages.extend(decode(r) for r in reply.records)
                offset = reply.next_begin_offset
        return messages


def _is_reason(error: Exception, reason: int) -> bool:
    if isinstance(error, RpcFailure):
        return error.reason == reason
    failure = failure_of(error) if isinstance(error, grpc.aio.AioRpcError) else None
    return failure is not None and failure.reason == reason
