"""Where a send asking for a delivery time goes: the timer topic, or its real topic now.

The request may name the time (``TIMER_DELIVER_MS``, epoch ms, RocketMQ 5's property) or a
wait (``TIMER_DELAY_MS`` / ``TIMER_DELAY_SEC``, counted from when the broker takes the
message); a wait becomes ``TIMER_DELIVER_MS`` here, so the dispatcher and a restart see one
absolute time. The request's properties are kept, and ``TIMER_DELIVER_MS`` stays on the
delivered message (the RocketMQ 5 proxy reports it as the delivery timestamp).
"""

from __future__ import annotations

from orbitmq.broker.reput import detour
from orbitmq.common.rpc import RpcFailure
from orbitmq.common.topics import TIMER_TOPIC, Property
from orbitmq.store.record import InboundMessage
from orbitmq.v1.broker_pb2 import ErrorReason

TIMER_KEYS = frozenset({Property.TIMER_DELIVER_MS, Property.TIMER_DELAY_MS, Property.TIMER_DELAY_SEC})
_UNIT_MS = {Property.TIMER_DELIVER_MS: 1, Property.TIMER_DELAY_MS: 1, Property.TIMER_DELAY_SEC: 1000}


def timed(message: InboundMessage, now_ms: int, max_delay_ms: int) -> InboundMessage:
    """``message`` detoured through the timer topic, or as it is when its time has come.

    Raises :class:`RpcFailure` (MESSAGE_ILLEGAL) naming the property, its value and the rule:
    more than one way of timing, a value that is not a whole number, or a time further than
    ``max_delay_ms`` ahead (the broker's ``timer_limit_ms``).
    """
    properties = message.properties
    asked = sorted(TIMER_KEYS.intersection(properties))
    if Property.DELAY in properties:
        asked.append(Property.DELAY)
    if len(asked) > 1:
        raise RpcFailure(
            ErrorReason.MESSAGE_ILLEGAL,
            f"a message may set one of {', '.join(sorted(TIMER_KEYS))} or {Property.DELAY}; "
            f"this one sets {', '.join(asked)}",
        )
    key = asked[0]
    text = properties[key]
    if not text.isascii() or not text.isdigit():
        raise RpcFailure(ErrorReason.MESSAGE_ILLEGAL, f"{key} {text!r} must be a non-negative whole number")
    value = int(text) * _UNIT_MS[key]
    deliver_at = value if key == Property.TIMER_DELIVER_MS else now_ms + value
    ahead = deliver_at - now_ms
    if ahead > max_delay_ms:
        raise RpcFailure(
            ErrorReason.MESSAGE_ILLEGAL,
            f"{key} {text} asks for delivery {ahead} ms from now; this broker delivers timed messages "
            f"at most {max_delay_ms} ms ({max_delay_ms / 3_600_000:g} h) ahead (timer_max_delay_ms, "
            "no more than file_reserved_time_ms)",
        )
    properties[Property.TIMER_DELIVER_MS] = str(deliver_at)
    if ahead <= 0:  # already due: stored where it belongs, now
        return message
    return detour(message, TIMER_TOPIC, 0)
