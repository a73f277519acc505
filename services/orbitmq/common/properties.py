"""The message property names the system uses, in one list, and the rule that keeps them out of
user properties.

On the wire a message carries one property map (``common.proto``'s ``Message.properties``, as
RocketMQ 4's one properties string): the producer library writes the system properties there
from a message's fields (``tags`` -> ``TAGS``, ``keys`` -> ``KEYS``, its unique key ->
``UNIQ_KEY``, ``delay_level`` -> ``DELAY``, ...) beside the application's own. So an application
property named like a system one would change what the system does: ``UNIQ_KEY=myid`` became
the message id, ``DELAY=2`` delayed the message, ``TAGS=x`` set its tag. Every entry point
therefore refuses user properties whose name is in :data:`SYSTEM_PROPERTIES`, naming it: the
client library (:class:`orbitmq.client.message.Message`), ``orbitmq produce --property``, the
sidecar, the RocketMQ 5 proxy (``ILLEGAL_MESSAGE_PROPERTY_KEY``, as RocketMQ's own proxy) and the
broker.

The broker sees only the one map, so it tells them apart by who may write a name: a send may
carry the names a producer library writes (:data:`PRODUCER_PROPERTIES`); the rest
(:data:`BROKER_PROPERTIES`: ``REAL_TOPIC``, ``RETRY_TOPIC``, ``PGROUP``, ...) only the broker
writes, on its own paths (delays, the timer, transactions, retries, dead letters, POP revives),
which never pass through a send, so a send carrying one is refused.

The list is RocketMQ's (``MessageConst.STRING_HASH_SET`` and the other ``PROPERTY_`` names of
``MessageConst``) plus the names orbitmq itself reads or writes; the name rule is exact (a
``TIMER_`` name not listed is a user property, as in RocketMQ).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from orbitmq.common.errors import OrbitError
from orbitmq.common.topics import Property

SHARDING_KEY = "__SHARDINGKEY"
"""RocketMQ's property for a FIFO message's group (``MessageConst.PROPERTY_SHARDING_KEY``)."""
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
"""How often the broker asked a producer about a half message (RocketMQ's name)."""
TRANSACTION_ID = "__transactionId__"
"""A half message's transaction id (RocketMQ's ``PROPERTY_TRANSACTION_ID``)."""
BORN_HOST = "__BORNHOST"
"""Not stored as a property (the record has a born-host field); reserved so users cannot set it."""

ROCKETMQ_SYSTEM_PROPERTIES = frozenset(
    {
        # MessageConst.STRING_HASH_SET
        "TRACE_ON",
        "MSG_REGION",
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        "__BORNHOST",
        "BORN_TIMESTAMP",
        # MessageConst's other PROPERTY_ names
        "INNER_NUM",
        "INNER_BASE",
        "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "__transactionId__",
        "TRANSACTION_CHECK_TIMES",
        "__SHARDINGKEY",
        "PROPERTY_FORWARD_QUEUE_ID",
        "REDIRECT",
        "INNER_MULTI_DISPATCH",
        "TRACE_CONTEXT",
        # RocketMQ 4's start-deliver time (ONS), and the sharding key's spelling in its docs
        "__STARTDELIVERTIME",
        "SHARDING_KEY",
    }
)
"""The property names RocketMQ reserves for itself."""

ORBITMQ_SYSTEM_PROPERTIES = frozenset(
    {
        *(value for name, value in vars(Property).items() if name.isupper()),
        SHARDING_KEY,
        TRANSACTION_CHECK_TIMES,
        TRANSACTION_ID,
        BORN_HOST,
    }
)
"""The names orbitmq reads or writes itself (``Property``: ``TIMER_DELAY_MS`` is orbitmq's own;
the rest are RocketMQ's names)."""

SYSTEM_PROPERTIES = ROCKETMQ_SYSTEM_PROPERTIES | ORBITMQ_SYSTEM_PROPERTIES
"""Every name a user property may not have."""

PRODUCER_PROPERTIES = frozenset(
    {
        Property.TAGS,
        Property.KEYS,
        Property.UNIQ_KEY,
        Property.DELAY,
        Property.TIMER_DELIVER_MS,
        Property.TIMER_DELAY_MS,
        Property.TIMER_DELAY_SEC,
        Property.TRANSACTION_PREPARED,
        Property.WAIT_STORE_MSG_OK,
        SHARDING_KEY,
    }
)
"""The system properties a producer library writes from a message's fields (and the proxy from
a RocketMQ 5 message's system properties): a send to the broker may carry these."""

BROKER_PROPERTIES = SYSTEM_PROPERTIES - PRODUCER_PROPERTIES
"""The system properties only the broker writes: a send carrying one is refused."""


class SystemPropertyError(OrbitError, ValueError):
    """A user property has a system property's name; the message names it and the rule."""

    def __init__(self, name: str, rule: str) -> None:
        self.name = name
        self.rule = rule
        super().__init__(f"property {name!r} is reserved for the system: {rule}")


USER_RULE = (
    "a user property may not have a system property's name (set tags, keys, a delay or a delivery "
    "time through their own fields; orbitmq.common.properties.SYSTEM_PROPERTIES lists the names)"
)
SEND_RULE = "a send may carry only the system properties a producer writes; the broker sets this one itself"


def check_user_properties(names: Iterable[str]) -> None:
    """Raise :class:`SystemPropertyError` naming the first (sorted) of ``names`` that is a
    system property name."""
    reserved = SYSTEM_PROPERTIES.intersection(names)
    if reserved:
        raise SystemPropertyError(min(reserved), USER_RULE)


def check_sent_properties(properties: Mapping[str, str]) -> None:
    """Raise :class:`SystemPropertyError` for a send's property only the broker may write."""
    reserved = BROKER_PROPERTIES.intersection(properties)
    if reserved:
        raise SystemPropertyError(min(reserved), SEND_RULE)
