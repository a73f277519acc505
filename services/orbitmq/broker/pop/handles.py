"""Receipt handles of POP deliveries: what an ack or a change of invisibility names.

``<broker name>:<queue id>:<offset>:<lease>`` — the broker (a proxy routes the ack there), the
queue and offset of the message, and the lease of this delivery (:mod:`.state`): a later
delivery or change of the same message has another lease, so an old handle is recognised as
stale rather than acking someone else's delivery. Group and topic come with the request.
"""

from __future__ import annotations

from dataclasses import dataclass

SEPARATOR = ":"


class InvalidReceiptHandle(ValueError):
    """Text that is not a receipt handle this system issued; the message names it and the rule."""


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    broker_name: str
    queue_id: int
    offset: int
    lease: int

    def encode(self) -> str:
        return SEPARATOR.join((self.broker_name, str(self.queue_id), str(self.offset), str(self.lease)))

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        parts = text.rsplit(SEPARATOR, 3)
        if len(parts) != 4 or not parts[0] or not all(p.isdigit() for p in parts[1:]):
            raise InvalidReceiptHandle(
                f"receipt handle {text!r} is not <broker name>:<queue id>:<offset>:<lease> (orbitmq's form)"
            )
        return cls(parts[0], int(parts[1]), int(parts[2]), int(parts[3]))


MAX_ACKS_PER_CALL = 1024
"""Receipt handles one broker AckMessage may name (one POP log write of that many records)."""
