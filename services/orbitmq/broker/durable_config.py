"""When the broker's config tables reach the disk, and what a store without them still holds.

A topic, group or offset change made through an RPC is on disk before the RPC answers, as
RocketMQ persists its topic config on every update: ``topic create`` followed by a crash within
the periodic flush interval lost the topic, the next send re-created it with the default 4
queues, and the messages acknowledged in queues 4..7 were never read again. Each write is
:meth:`~orbitmq.store.config_store.JsonConfigStore.persist`'s (temporary file, fsync, rename,
fsync of the directory), run in a worker thread. The periodic flush (``_persist_loop``) stays
for what consumers commit on every pull, which RocketMQ also writes on a timer only; it also
retries a write the disk refused and writes the copies a slave receives from its master.

The other half is for stores that lack a topic's config anyway (written by an older broker, a
lost ``topics.json``, a slave promoted before the master's config copy came): a topic whose
consume queues are on disk is adopted with as many queues as the highest queue id it holds, so
no queue holding messages is left outside the route.
"""

from __future__ import annotations

import asyncio
import builtins
from typing import Any

from orbitmq.broker.topics import SYSTEM_TOPICS, TopicManager
from orbitmq.common.rpc import RpcFailure
from orbitmq.common.topics import DLQ_GROUP_TOPIC_PREFIX
from orbitmq.store.config_store import ConfigPersistError, Permission, TopicConfig
from orbitmq.store.message_store import MessageStore
from orbitmq.v1.broker_pb2 import ErrorReason

INTERNAL_TOPIC_PREFIXES = ("RMQ_SYS_", "rmq_sys_")
"""Topics the broker writes for itself (POP log, timer log, transactions): never adopted as
routable topics; the system topics among them are created at start-up."""
DLQ_PERM = Permission.READ
"""Dead letters can be read by consumers and tools but not produced to (the broker writes them)."""


async def persist_now(*tables: Any) -> None:
    """Write each changed table durably before the caller answers; blocks a worker thread,
    never the event loop. A disk that refuses is a retriable ``SERVICE_NOT_AVAILABLE`` (the
    change stays in memory and the periodic flush tries again)."""
    try:
        await asyncio.to_thread(_persist, tables)
    except ConfigPersistError as error:
        raise RpcFailure(
            ErrorReason.SERVICE_NOT_AVAILABLE,
            f"the broker could not write its config: {error} (retried every config_persist_interval_ms)",
        ) from None


def _persist(tables: tuple[Any, ...]) -> None:
    for table in tables:
        table.persist()


def stored_topic(store: MessageStore, topic: str, perm: Permission) -> TopicConfig | None:
    """A topic as its consume queues on disk show it: as many queues as the highest id held."""
    queue_ids = store.queue_ids(topic)
    if not queue_ids:
        return None
    nums = queue_ids[-1] + 1
    return TopicConfig(topic_name=topic, read_queue_nums=nums, write_queue_nums=nums, perm=perm)


def adoptable(topic: str) -> bool:
    """Whether a topic found only on disk becomes a routable topic: user, retry and dead-letter
    topics do; the broker's internal topics do not."""
    return topic not in SYSTEM_TOPICS and not topic.startswith(INTERNAL_TOPIC_PREFIXES)


def adopt_stored_topics(store: MessageStore, topics: TopicManager) -> builtins.list[str]:
    """Give every topic this store holds consume queues of, but has no config for, a config
    with the queues it holds (read-write; dead-letter topics read-only, as the broker makes
    them). Returns the adopted names; the caller logs them and persists the table."""
    adopted = []
    for topic in sorted({name for name, _ in store.queues()}):
        if topics.get(topic) is not None or not adoptable(topic):
            continue
        perm = DLQ_PERM if topic.startswith(DLQ_GROUP_TOPIC_PREFIX) else Permission.READ | Permission.WRITE
        config = stored_topic(store, topic, perm)
        if config is not None:
            topics.tables.topics.put(config)
            adopted.append(topic)
    return adopted
