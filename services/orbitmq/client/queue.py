"""The identity of one message queue as the client sees it: topic, broker name, queue id.

It is the key of everything per-queue on the consumer side (process queues, offsets, locks,
allocation), so it is a frozen, hashable value. Its field order is its sort order (topic, then
broker name, then queue id) because allocation sorts the queues before dividing them: every
consumer of a group must see the same list in the same order, or two of them take the same
queue while another queue goes unconsumed.
"""

from __future__ import annotations

from dataclasses import dataclass

from orbitmq.v1 import common_pb2


@dataclass(frozen=True, order=True, slots=True)
class MessageQueue:
    """One queue of ``topic`` on the broker group ``broker_name``."""

    topic: str
    broker_name: str
    queue_id: int

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError(f"message queue topic must be a non-empty string, got {self.topic!r}")
        if not isinstance(self.broker_name, str) or not self.broker_name:
            raise ValueError(
                f"message queue broker name must be a non-empty string, got {self.broker_name!r}"
            )
        if isinstance(self.queue_id, bool) or not isinstance(self.queue_id, int) or self.queue_id < 0:
            raise ValueError(f"message queue id must be an int >= 0, got {self.queue_id!r}")

    def __str__(self) -> str:
        # RocketMQ's MessageQueue.toString(): consistent hashing hashes this text, so keeping
        # Java's spelling places queues on the ring exactly where a Java client would.
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"

    def to_proto(self) -> common_pb2.MessageQueue:
        return common_pb2.MessageQueue(topic=self.topic, broker_name=self.broker_name, queue_id=self.queue_id)

    @classmethod
    def from_proto(cls, message: common_pb2.MessageQueue) -> MessageQueue:
        """Raises ``ValueError`` for an empty topic or broker name or a negative queue id."""
        return cls(topic=message.topic, broker_name=message.broker_name, queue_id=message.queue_id)
