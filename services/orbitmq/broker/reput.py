"""Turning a stored message back into one to store again (delays, retries, transactions).

Delayed, retried and transactional messages take a detour through a system topic; the
original topic and queue travel in the ``REAL_TOPIC`` / ``REAL_QID`` properties and come back
when the message is re-put where it belongs.
"""

from __future__ import annotations

from orbitmq.common.topics import Property
from orbitmq.store.record import InboundMessage, StoredMessage


def detour(message: InboundMessage, topic: str, queue_id: int) -> InboundMessage:
    """Send ``message`` to a system topic, remembering where it was going."""
    properties = dict(message.properties)
    properties[Property.REAL_TOPIC] = message.topic
    properties[Property.REAL_QUEUE_ID] = str(message.queue_id)
    return InboundMessage(
        topic=topic,
        body=message.body,
        queue_id=queue_id,
        properties=properties,
        flag=message.flag,
        sys_flag=message.sys_flag,
        born_timestamp_ms=message.born_timestamp_ms,
        born_host=message.born_host,
        reconsume_times=message.reconsume_times,
        prepared_transaction_offset=message.prepared_transaction_offset,
    )


def restore(
    stored: StoredMessage, *, drop: tuple[str, ...] = (), sys_flag: int | None = None
) -> InboundMessage:
    """The message as it was meant to be stored before its detour."""
    properties = {k: v for k, v in stored.properties.items() if k not in drop}
    topic = properties.pop(Property.REAL_TOPIC, stored.topic)
    queue_id = int(properties.pop(Property.REAL_QUEUE_ID, stored.queue_id))
    return InboundMessage(
        topic=topic,
        body=stored.body,
        queue_id=queue_id,
        properties=properties,
        flag=stored.flag,
        sys_flag=stored.sys_flag if sys_flag is None else sys_flag,
        born_timestamp_ms=stored.born_timestamp_ms,
        born_host=stored.born_host,
        reconsume_times=stored.reconsume_times,
        prepared_transaction_offset=stored.prepared_transaction_offset,
    )
