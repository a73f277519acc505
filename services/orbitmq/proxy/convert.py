"""Pure conversions between ``apache.rocketmq.v2`` messages and orbitmq's (no I/O).

A v2 message's system properties become orbitmq message properties under RocketMQ's own names,
so an orbitmq consumer sees what a RocketMQ 4 consumer would: ``TAGS``, ``KEYS`` (space
separated), ``UNIQ_KEY`` (the client's message id, so both sides name a message alike),
``__SHARDINGKEY`` (the FIFO message group) and ``TIMER_DELIVER_MS`` (the requested delivery
time). User properties are copied as they are; a user property that would overwrite one of the
names the system uses (:data:`orbitmq.common.properties.SYSTEM_PROPERTIES`, the one list every
entry point refuses) is refused with ``ILLEGAL_MESSAGE_PROPERTY_KEY``, as RocketMQ's proxy does.
The system properties travel in the orbitmq message's ``system_properties``, apart from the
user's.

Delivery at a timestamp: the requested time travels as ``TIMER_DELIVER_MS`` and the broker's
timer (:mod:`orbitmq.broker.timer`) delivers the message at that time, to the millisecond as
asked, up to :data:`TIMER_MAX_DELAY_MS` ahead (RocketMQ's ``timerMaxDelaySec``, 3 days; further
is refused with ``ILLEGAL_DELIVERY_TIME`` here, and a broker configured shorter refuses too). A
timestamp already past is delivered now.

Transaction ids: the proxy is stateless, so the id it hands out carries what ending the
transaction needs, ``<broker name>:<commit-log offset of the half message>:<unique key>``.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from orbitmq.client.message import Message as OrbitMessage
from orbitmq.common.names import InvalidNameError, validate_topic_name
from orbitmq.common.properties import SHARDING_KEY, SYSTEM_PROPERTIES, USER_RULE
from orbitmq.common.topics import KEY_SEPARATOR, Property, split_keys
from orbitmq.rocketmq_v2 import definition_pb2 as v2

TIMER_DELIVER_MS = Property.TIMER_DELIVER_MS
"""RocketMQ 5's property for the requested delivery time (epoch milliseconds)."""
TIMER_MAX_DELAY_MS = 3 * 86_400_000
"""The furthest delivery time accepted: the brokers' default ``timer_max_delay_ms``."""
MAX_MESSAGE_GROUP_CHARS = 64
"""RocketMQ's proxy limit on a message group's length."""
MAX_PROPERTIES_BYTES = 16 * 1024
"""RocketMQ's proxy limit on the total size of a message's user properties (keys + values)."""
NAMESPACE_SEPARATOR = "%"
"""RocketMQ wraps names in a namespace as ``<namespace>%<name>``."""
ALL_TYPES = (v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION)
"""Every orbitmq queue takes every kind of message (a topic has no fixed message type)."""


class Refused(Exception):
    """A request the protocol answers with a non-OK ``Code``; the message names value and rule."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def time_ms(value: Timestamp | Duration, what: str, code: int) -> int:
    """A Timestamp or Duration from a client in milliseconds, or refused with ``code``.

    protobuf's ToMilliseconds checks the fields' ranges (nanos, seconds within 10 000 years) with
    ValueError, and any client can put such values on the wire: called bare, the proxy answered
    INTERNAL and logged a traceback for them."""
    try:
        return value.ToMilliseconds()
    except ValueError as error:
        raise Refused(code, f"{what} is not a valid time: {error}") from None


@dataclass(frozen=True, slots=True)
class Outbound:
    """One v2 message ready for an orbitmq producer."""

    message: OrbitMessage
    message_id: str
    message_type: int
    sharding_key: str | None
    """The FIFO message group: picks the queue by hash, as orbitmq's ordered sends do."""


def real_name(resource: v2.Resource) -> str:
    """The orbitmq name of a v2 resource: ``namespace%name`` in a namespace, else the name."""
    if resource.resource_namespace:
        return f"{resource.resource_namespace}{NAMESPACE_SEPARATOR}{resource.name}"
    return resource.name


def topic_of(resource: v2.Resource) -> str:
    name = real_name(resource)
    try:
        return validate_topic_name(name)
    except InvalidNameError as error:
        raise Refused(v2.ILLEGAL_TOPIC, str(error)) from None


def outbound(
    message: v2.Message,
    now_ms: int,
    delay_levels_ms: Sequence[int],
    max_body_bytes: int,
    max_delay_ms: int = TIMER_MAX_DELAY_MS,
    born_host: str | None = None,
) -> Outbound:
    """The orbitmq message for a v2 ``message``; raises :class:`Refused` naming the bad field.

    ``born_host`` is the sending client's address (``host:port``, from its connection), stored
    as the message's born host as RocketMQ's proxy does, not the proxy's own connection to the
    broker. The client's ``system_properties.born_host`` is its host name, which the record's
    address field cannot hold.

    ``delay_levels_ms`` is no longer read (timed messages go to the broker's timer, not a level);
    it stays until the caller stops passing it."""
    topic = topic_of(message.topic)
    system = message.system_properties
    body = _decoded_body(message.body, system.body_encoding, max_body_bytes)
    if not system.message_id:
        raise Refused(v2.ILLEGAL_MESSAGE_ID, f"message to topic {topic} has no message_id (clients set one)")
    properties = _user_properties(message.user_properties)
    system_properties = {Property.UNIQ_KEY: system.message_id}
    message_type = system.message_type or v2.NORMAL
    group = system.message_group if system.HasField("message_group") else None
    timed = system.HasField("delivery_timestamp")
    _check_type(message_type, group, timed)
    if group is not None:
        if not group.strip() or len(group) > MAX_MESSAGE_GROUP_CHARS:
            raise Refused(
                v2.ILLEGAL_MESSAGE_GROUP,
                f"message group {group!r} must be non-blank and at most {MAX_MESSAGE_GROUP_CHARS} characters",
            )
        system_properties[SHARDING_KEY] = group
    deliver_ms = None
    if timed:
        deliver_ms = max(
            0, time_ms(system.delivery_timestamp, "delivery_timestamp", v2.ILLEGAL_DELIVERY_TIME)
        )
        _check_delivery_time(deliver_ms - now_ms, max_delay_ms)
    return Outbound(
        OrbitMessage(
            topic=topic,
            body=body,
            tags=_tag(system) or None,
            keys=_keys(system.keys) or None,
            properties=properties,
            deliver_at_ms=deliver_ms,
            system_properties=system_properties,
            born_host=born_host,
        ),
        system.message_id,
        message_type,
        group,
    )


def _check_delivery_time(delay_ms: int, max_delay_ms: int) -> None:
    """A delivery timestamp at most ``max_delay_ms`` away (the past is fine: delivered now)."""
    if delay_ms > max_delay_ms:
        raise Refused(
            v2.ILLEGAL_DELIVERY_TIME,
            f"delivery timestamp is {delay_ms / 1000:.0f} s away, beyond the longest timer delay "
            f"({max_delay_ms / 1000:.0f} s, timer_max_delay_ms)",
        )


def _check_type(message_type: int, group: str | None, timed: bool) -> None:
    if message_type not in ALL_TYPES:
        name = v2.MessageType.Name(message_type) if message_type in v2.MessageType.values() else message_type
        raise Refused(v2.UNSUPPORTED, f"message type {name} is not supported; orbitmq takes {_type_names()}")
    conflicts = {
        v2.NORMAL: group is not None or timed,
        v2.FIFO: group is None or timed,
        v2.DELAY: group is not None or not timed,
        v2.TRANSACTION: group is not None or timed,
    }
    if conflicts[message_type]:
        raise Refused(
            v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"a {v2.MessageType.Name(message_type)} message "
            f"{'must' if message_type == v2.FIFO else 'must not'} have a message group and "
            f"{'must' if message_type == v2.DELAY else 'must not'} have a delivery timestamp",
        )


def _type_names() -> str:
    return ", ".join(v2.MessageType.Name(t) for t in ALL_TYPES)


def _decoded_body(body: bytes, encoding: int, max_body_bytes: int) -> bytes:
    if encoding == v2.GZIP:
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as error:
            raise Refused(v2.MESSAGE_CORRUPTED, f"body marked GZIP does not decompress: {error}") from None
    elif encoding not in (v2.ENCODING_UNSPECIFIED, v2.IDENTITY):
        raise Refused(v2.UNSUPPORTED, f"body encoding {encoding} is not supported; use IDENTITY or GZIP")
    if not body:
        raise Refused(v2.MESSAGE_BODY_EMPTY, "message body is empty; a message needs at least one byte")
    if len(body) > max_body_bytes:
        raise Refused(
            v2.MESSAGE_BODY_TOO_LARGE, f"message body of {len(body)} bytes exceeds the limit {max_body_bytes}"
        )
    return body


def _user_properties(user: Mapping[str, str]) -> dict[str, str]:
    size = 0
    for key, value in user.items():
        if not key:
            raise Refused(v2.ILLEGAL_MESSAGE_PROPERTY_KEY, "a user property needs a non-empty name")
        if key in SYSTEM_PROPERTIES:
            raise Refused(
                v2.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"user property {key!r} is reserved for the system: {USER_RULE}",
            )
        size += len(key.encode()) + len(value.encode())
    if size > MAX_PROPERTIES_BYTES:
        raise Refused(
            v2.MESSAGE_PROPERTIES_TOO_LARGE,
            f"user properties take {size} bytes, more than the limit of {MAX_PROPERTIES_BYTES}",
        )
    return dict(user)


def _tag(system: v2.SystemProperties) -> str:
    if not system.HasField("tag"):
        return ""
    tag = system.tag
    if not tag.strip() or "|" in tag:
        raise Refused(v2.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} must be non-blank and must not contain '|'")
    return tag


def _keys(keys: Sequence[str]) -> list[str]:
    for key in keys:
        if not key.strip() or KEY_SEPARATOR in key:
            raise Refused(
                v2.ILLEGAL_MESSAGE_KEY,
                f"key {key!r} must be non-blank without spaces (orbitmq separates keys by spaces)",
            )
    return list(keys)


# -- orbitmq -> v2 (transaction check-backs, later receives) ------------------------------------


def inbound(
    topic: str,
    body: bytes,
    properties: Mapping[str, str],
    *,
    born_timestamp_ms: int,
    born_host: str,
    store_timestamp_ms: int,
    queue_id: int,
    queue_offset: int,
    message_type: int,
    namespace: str = "",
) -> v2.Message:
    """The v2 message a client sees for a stored orbitmq message (system properties restored);
    ``namespace`` is the client's (its prefix is taken off the topic)."""
    message = v2.Message(body=body)
    prefix = f"{namespace}{NAMESPACE_SEPARATOR}" if namespace else ""
    message.topic.name = topic[len(prefix) :] if prefix and topic.startswith(prefix) else topic
    message.topic.resource_namespace = namespace
    system = message.system_properties
    system.message_id = properties.get(Property.UNIQ_KEY, "")
    if Property.TAGS in properties:
        system.tag = properties[Property.TAGS]
    system.keys.extend(split_keys(properties.get(Property.KEYS)))
    if SHARDING_KEY in properties:
        system.message_group = properties[SHARDING_KEY]
    if TIMER_DELIVER_MS in properties and properties[TIMER_DELIVER_MS].isdigit():
        system.delivery_timestamp.FromMilliseconds(int(properties[TIMER_DELIVER_MS]))
    system.body_encoding = v2.IDENTITY
    system.body_digest.type = v2.MD5
    system.body_digest.checksum = body_digest(body)
    system.message_type = message_type
    system.born_timestamp.FromMilliseconds(born_timestamp_ms)
    system.born_host = born_host
    system.store_timestamp.FromMilliseconds(store_timestamp_ms)
    system.queue_id = queue_id
    system.queue_offset = queue_offset
    user = {k: v for k, v in properties.items() if k not in SYSTEM_PROPERTIES}
    message.user_properties.update(user)
    return message


def body_digest(body: bytes) -> str:
    """The body checksum every official client accepts: MD5 as 32 upper-case hex digits.

    The clients compare the string, not the number, and disagree on CRC32's form: Java's is
    ``Long.toHexString`` (no leading zeros, ``8BFF1A9``) while Python pads to 8 digits
    (``08BFF1A9``), so one CRC32 in 16 would be "corrupted" for one of them and redelivered until
    it is dead-lettered. A fixed-width MD5 has one spelling, and is what Apache RocketMQ's own
    proxy sends."""
    return hashlib.md5(body, usedforsecurity=False).hexdigest().upper()


# -- transaction ids ------------------------------------------------------------------------------

TRANSACTION_ID_SEPARATOR = ":"


@dataclass(frozen=True, slots=True)
class TransactionRef:
    """Where a half message lies: what ending its transaction needs."""

    broker_name: str
    commit_log_offset: int
    unique_key: str

    def encode(self) -> str:
        return TRANSACTION_ID_SEPARATOR.join((self.broker_name, str(self.commit_log_offset), self.unique_key))

    @classmethod
    def decode(cls, text: str) -> TransactionRef:
        parts = text.split(TRANSACTION_ID_SEPARATOR, 2)
        if len(parts) != 3 or not parts[0] or not parts[1].isdigit():
            raise Refused(
                v2.INVALID_TRANSACTION_ID,
                f"transaction id {text!r} is not one orbitmq handed out (<broker>:<offset>:<unique key>)",
            )
        return cls(parts[0], int(parts[1]), parts[2])
