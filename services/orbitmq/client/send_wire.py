"""A send's request bytes, built without a protobuf object per message.

A coalesced call (:mod:`orbitmq.client.accumulator`) is a ``SendMessageRequest`` whose messages
were encoded one by one, each when its send was called (so a bad message is refused to its own
caller, before it joins anyone): protobuf concatenates repeated fields, so the request is its
header (:func:`request_head`) followed by each message as a length-delimited field 4
(:func:`frame`). The messages are encoded in C (``_native.frame_message``) when the extension
is loaded, else by protobuf; both give the same ``Message``.
"""

from __future__ import annotations

from orbitmq.client.message import Message
from orbitmq.common.properties import SYSTEM_PROPERTIES, check_user_properties
from orbitmq.common.topics import KEY_SEPARATOR, Property
from orbitmq.native import NATIVE
from orbitmq.v1 import broker_pb2

DETOUR_PROPERTIES = frozenset(
    {
        Property.DELAY,
        Property.TRANSACTION_PREPARED,
        Property.TIMER_DELIVER_MS,
        Property.TIMER_DELAY_MS,
        Property.TIMER_DELAY_SEC,
    }
)
"""System properties that send a message on a detour (schedule, timer, half topic): the broker
stores such a batch message by message, not contiguously in one queue."""

_MESSAGES_TAG = b"\x22"  # field 4 (SendMessageRequest.messages), wire type 2
_BORN_HOST_TAG = b"\x2a"  # field 5 (Message.born_host), wire type 2


def coalescable(message: Message) -> bool:
    """Whether ``message`` may share a call with other sends: not delayed, timed or prepared
    (those the broker stores one by one, each on its detour)."""
    return (
        not message.delay_level
        and message.deliver_at_ms is None
        and message.delay_ms is None
        and (not message.system_properties or DETOUR_PROPERTIES.isdisjoint(message.system_properties))
    )


_FRAME = getattr(NATIVE, "frame_message", None)
"""The C encoder; None without the extension (or with a build from before it)."""


def frame(message: Message, unique_key: str) -> bytes:
    """``message`` as a request's field 4; raises ``ValueError`` as :meth:`Message.to_proto`."""
    if _FRAME is None or message.system_properties or not coalescable(message):
        return frame_by_protobuf(message, unique_key)
    properties = message.properties
    if properties and not SYSTEM_PROPERTIES.isdisjoint(properties):
        check_user_properties(properties)
    keys = message.keys
    if keys and not isinstance(keys, str):
        keys = KEY_SEPARATOR.join(keys)
    return _FRAME(  # type: ignore[no-any-return]
        message.topic,
        message.body,
        message.flag,
        properties or None,
        message.tags or None,
        keys or None,
        unique_key,
    )


def frame_by_protobuf(message: Message, unique_key: str) -> bytes:
    """:func:`frame` through :meth:`Message.to_proto` (timed messages, system properties, no C)."""
    raw = message.to_proto(unique_key).SerializeToString()
    return b"".join((_MESSAGES_TAG, varint(len(raw)), raw))


def request_head(
    producer_group: str,
    topic: str,
    queue_id: int,
    born_timestamp_ms: int,
    default_topic_queue_nums: int,
    born_host: str | None = None,
) -> bytes:
    """A ``SendMessageRequest`` without its messages (``born_host``: the messages' when they
    were born elsewhere, see :attr:`Message.born_host`)."""
    return broker_pb2.SendMessageRequest(
        producer_group=producer_group,
        topic=topic,
        queue_id=queue_id,
        born_timestamp_ms=born_timestamp_ms,
        born_host=born_host or "",
        default_topic_queue_nums=default_topic_queue_nums,
    ).SerializeToString()


def with_born_host(framed: bytes, born_host: str) -> bytes:
    """``framed`` (a :func:`frame` result) with ``born_host`` as its ``Message.born_host``: for
    a call whose messages were born at different hosts, which one request field cannot say.

    The field is appended to the encoded message (a ``Message`` has no born host of its own
    when framed) and the message framed again with its new length::

        0x22 <varint n> <Message: n bytes>  ->  0x22 <varint n + k> <Message> 0x2a <varint h> <host: h bytes>
    """
    if framed[:1] != _MESSAGES_TAG:
        raise ValueError(f"not a framed message: starts with {framed[:1]!r}")
    length, start = _read_varint(framed, 1)
    if start + length != len(framed):
        raise ValueError(f"a framed message of {length} bytes has {len(framed) - start}")
    host = born_host.encode()
    field = b"".join((_BORN_HOST_TAG, varint(len(host)), host))
    return b"".join((_MESSAGES_TAG, varint(length + len(field)), framed[start:], field))


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``data[at:]`` and the position after it."""
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative ``value``."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
