"""Topics and subscription groups of one broker: lookup, auto-creation, permission checks.

Tables live in the store's ``config/`` JSON files (:mod:`orbitmq.store.config_store`); this
module adds the broker's rules: which topics exist implicitly (system, retry and dead-letter
topics), which names a user may not take (:func:`check_user_topic_name`, the one rule for
``topic create`` and for a topic created by its first send), when a topic may be created by its
first send (``auto_create_topic``), and what a permission allows.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from orbitmq.common.names import validate_group_name, validate_topic_name
from orbitmq.common.rpc import RpcFailure
from orbitmq.common.topics import DELAY_LEVELS_MS as _DEFAULT_LEVELS
from orbitmq.common.topics import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TIMER_LOG_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from orbitmq.store.config_store import (
    BrokerConfigTables,
    Permission,
    SubscriptionGroupConfig,
    TopicConfig,
)
from orbitmq.v1 import common_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

RW = Permission.READ | Permission.WRITE
SYSTEM_TOPICS = {
    SCHEDULE_TOPIC: len(_DEFAULT_LEVELS),
    TRANS_HALF_TOPIC: 1,
    TRANS_OP_HALF_TOPIC: 1,
    TIMER_TOPIC: 1,
    TIMER_LOG_TOPIC: 1,
}
"""System topics and their queue counts, created at start-up."""

AUTO_CREATE_TEMPLATE_TOPIC = "TBW102"
"""RocketMQ's template topic for auto-creation: clients may see it, users never create it."""
SYSTEM_TOPIC_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, "RMQ_SYS_", "rmq_sys_")
"""Retry and dead-letter topics are made by the broker for each group; ``RMQ_SYS_`` is RocketMQ's
prefix for its own topics."""

_WRITE, _READ = int(Permission.WRITE), int(Permission.READ)


def check_user_topic_name(topic: str, reserved: Sequence[str]) -> None:
    """Refuse a topic a user makes (``topic create``, or a send to a topic that does not exist)
    whose name the system owns: the auto-creation template, the system topics, retry/dead-letter
    topics (made per group by the broker) and ``reserved`` (the cluster's and the broker's
    names, which RocketMQ also uses as topics). Raises ``INVALID_NAME`` naming the topic."""
    owner = None
    if topic == AUTO_CREATE_TEMPLATE_TOPIC:
        owner = "RocketMQ's auto-creation template topic"
    elif topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIXES):
        owner = "a system topic (delay, transaction, retry and dead-letter topics are made by the broker)"
    elif topic in reserved:
        owner = "the name of this cluster or broker"
    if owner is not None:
        raise RpcFailure(
            ErrorReason.INVALID_NAME,
            f"topic name {topic!r} is reserved: it is {owner}; choose another name",
            topic=topic,
        )


def retry_topic(group: str) -> str:
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}"


def dlq_topic(group: str) -> str:
    return f"{DLQ_GROUP_TOPIC_PREFIX}{group}"


class TopicManager:
    def __init__(
        self,
        tables: BrokerConfigTables,
        *,
        auto_create_topic: bool,
        default_queue_nums: int,
        auto_create_group: bool,
        schedule_levels: int,
        on_created: Callable[[str], None] = lambda topic: None,
        held_topic: Callable[[str], TopicConfig | None] = lambda topic: None,
        reserved_topics: Sequence[str] = (),
    ) -> None:
        self.tables = tables
        self.reserved_topics = tuple(reserved_topics)
        """Names no user topic may take besides the system's: the cluster's and the broker's."""
        self.unsaved = False
        """Whether this manager created a topic or a group that may not be on disk yet: the
        request that caused it makes it durable before answering (a plain attribute, read on
        every send)."""
        self._on_created = on_created
        self._held_topic = held_topic
        """For reads only: a topic not in the table that the broker still serves (see
        :meth:`orbitmq.broker.server.Broker.held_topic`)."""
        """Called when a send, a send-back or a dead letter creates a topic: the name servers
        must learn its route now, since consumers (of %RETRY% topics too) look it up at once."""
        self._auto_create_topic = auto_create_topic
        self._default_queue_nums = default_queue_nums
        self._auto_create_group = auto_create_group
        self._round_robin: dict[str, itertools.count[int]] = {}
        for name, queues in SYSTEM_TOPICS.items():
            if not tables.topics.contains(name):
                nums = schedule_levels if name == SCHEDULE_TOPIC else queues
                tables.topics.put(TopicConfig(topic_name=name, read_queue_nums=nums, write_queue_nums=nums))

    # -- topics --------------------------------------------------------------------------------

    def get(self, topic: str) -> TopicConfig | None:
        return self.tables.topics.get(topic)

    def require(self, topic: str, *, for_read: bool = False) -> TopicConfig:
        config = self.tables.topics.get(topic)
        if config is None:  # a known topic's name was checked when it was created
            validate_topic_name(topic)
        if config is None and for_read:
            config = self._held_topic(topic)
        if config is None:
            raise RpcFailure(
                ErrorReason.TOPIC_NOT_EXIST, f"topic {topic!r} does not exist on this broker", topic=topic
            )
        return config

    def check_new_topic(self, topic: str) -> None:
        """A topic a user creates (by ``topic create`` or by sending to it) follows the naming
        rule and takes no name the system owns; raises ``INVALID_NAME`` naming it."""
        validate_topic_name(topic)
        check_user_topic_name(topic, self.reserved_topics)

    def for_send(self, topic: str, queue_nums: int = 0) -> TopicConfig:
        """The topic a producer sends to, created on first use when ``auto_create_topic`` is on
        (under the same name rules as ``topic create``); else ``TOPIC_NOT_EXIST`` naming it."""
        config = self.tables.topics.get(topic)
        if config is None:  # a known topic's name was checked when it was created
            validate_topic_name(topic)
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # a consumer's send-back fallback
                return self.ensure(topic, 1)
            self.check_new_topic(topic)
            if not self._auto_create_topic:
                raise RpcFailure(
                    ErrorReason.TOPIC_NOT_EXIST,
                    f"topic {topic!r} does not exist and this broker's auto_create_topic is off:"
                    f" create it first (orbitmq admin topic create --topic {topic})",
                    topic=topic,
                )
            nums = queue_nums if 0 < queue_nums <= 1024 else self._default_queue_nums
            config = self.ensure(topic, nums)
        elif topic in SYSTEM_TOPICS:  # the broker's own detours, never a producer's destination
            raise RpcFailure(
                ErrorReason.NO_PERMISSION,
                f"topic {topic!r} is a system topic: producers may not send to it",
                topic=topic,
            )
        if not int(config.perm) & _WRITE:  # int: IntFlag's & is Python code, on every send
            raise RpcFailure(
                ErrorReason.NO_PERMISSION, f"topic {topic!r} is not writable (perm {int(config.perm)})"
            )
        return config

    def for_read(self, topic: str, queue_id: int) -> TopicConfig:
        config = self.require(topic, for_read=True)
        if not int(config.perm) & _READ:
            raise RpcFailure(
                ErrorReason.NO_PERMISSION, f"topic {topic!r} is not readable (perm {int(config.perm)})"
            )
        if not 0 <= queue_id < config.read_queue_nums:
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT,
                f"queue id {queue_id} of topic {topic!r} must be between 0 and {config.read_queue_nums - 1}",
            )
        return config

    def ensure(self, topic: str, queue_nums: int, perm: Permission = RW) -> TopicConfig:
        config = self.tables.topics.get(topic)
        if config is None:
            config = TopicConfig(
                topic_name=topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums, perm=perm
            )
            self.tables.topics.put(config)
            self.unsaved = True
            self._on_created(topic)
        return config

    def pick_queue(self, config: TopicConfig, requested: int) -> int:
        if requested < 0:
            counter = self._round_robin.get(config.topic_name)
            if counter is None:
                counter = self._round_robin[config.topic_name] = itertools.count()
            return next(counter) % config.write_queue_nums
        if requested >= config.write_queue_nums:
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT,
                f"queue id {requested} of topic {config.topic_name!r} must be below its "
                f"{config.write_queue_nums} write queues",
            )
        return requested

    def from_proto(self, proto: common_pb2.TopicConfig) -> TopicConfig:
        """A topic as an admin request asks for it: queue counts and perm of 0 take the defaults."""
        try:
            return TopicConfig(
                topic_name=proto.topic_name,
                read_queue_nums=proto.read_queue_nums or self._default_queue_nums,
                write_queue_nums=proto.write_queue_nums or self._default_queue_nums,
                perm=proto.perm or int(RW),
                order=proto.order,
                attributes=dict(proto.attributes),
            )
        except ValueError as error:
            raise RpcFailure(ErrorReason.INVALID_ARGUMENT, _first_line(error)) from None

    def delete(self, topic: str) -> bool:
        validate_topic_name(topic)
        return self.tables.topics.delete(topic)

    def user_topics(self) -> list[TopicConfig]:
        return [t for t in self.tables.topics.list() if t.topic_name not in SYSTEM_TOPICS]

    # -- subscription groups -------------------------------------------------------------------

    def group(self, group: str, *, create: bool = True, record: bool = True) -> SubscriptionGroupConfig:
        """The group's config. A group the broker does not know is created (with the defaults)
        when ``create`` and ``auto_create_subscription_group`` allow it, else refused with
        ``SUBSCRIPTION_GROUP_NOT_EXIST``. ``record=False`` gives such a group its defaults
        without recording it: a pull that commits nothing (a Spark batch read, the dead-letter
        viewer) leaves no group behind; a commit or a heartbeat records it."""
        config = self.tables.subscription_groups.get(group)
        if config is None:  # a known group's name was checked when it was created
            validate_group_name(group)
            if not (create and self._auto_create_group):
                raise RpcFailure(
                    ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group {group!r} does not exist"
                )
            config = SubscriptionGroupConfig(group_name=group)
            if record:
                self.tables.subscription_groups.put(config)
                self.unsaved = True
        return config

    def create_or_update_group(self, config: SubscriptionGroupConfig) -> None:
        self.tables.subscription_groups.put(config)

    def delete_group(self, group: str) -> bool:
        validate_group_name(group)
        return self.tables.subscription_groups.delete(group)


def topic_to_proto(config: TopicConfig) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(
        topic_name=config.topic_name,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=int(config.perm),
        order=config.order,
        attributes=config.attributes,
    )


def _first_line(error: Exception) -> str:
    return " ".join(str(error).split())
