"""What a chaos run observed: every send attempt, every delivery, every fault.

Times are seconds since the run started (monotonic). The history is plain data so checkers are
pure functions of it and a result file can be judged again later.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path


class Outcome(Enum):
    """How a send ended, from the producer's point of view."""

    ACKNOWLEDGED = "acknowledged"
    """SEND_OK: the broker promised the message (with SYNC_MASTER, a slave has it too)."""
    UNKNOWN = "unknown"
    """A timeout, a lost connection or a non-OK status (FLUSH_SLAVE_TIMEOUT, ...): the message
    may or may not be stored. Never counted as loss when it is not consumed."""
    FAILED = "failed"
    """Refused before anything was stored (no route, a refusing broker's definite answer)."""


@dataclass(slots=True)
class Send:
    message_id: str
    """The harness's own id of the logical message (its body and key); a resend keeps it."""
    workload: str
    started: float
    ended: float
    outcome: Outcome
    queue_id: int = -1
    queue_offset: int = -1
    sharding_key: str | None = None
    seq: int | None = None
    """Position in its sharding key's sequence (ordered workloads)."""
    error: str = ""
    broker: str = ""
    """The broker group that acknowledged it."""


@dataclass(slots=True)
class Delivery:
    message_id: str
    group: str
    at: float
    queue_id: int
    queue_offset: int
    sharding_key: str | None = None
    seq: int | None = None


@dataclass(slots=True)
class FaultRecord:
    round: int
    fault: str
    target: str
    pid: int
    injected_at: float
    healed_at: float | None = None
    """SIGCONT sent, or the killed process seen replaced."""
    round_ended_at: float | None = None
    note: str = ""
    group: str = ""
    """The broker group the fault broke, when the cluster has several (a Kubernetes run): its
    recovery counts that group's writes, as the others' never stopped."""


@dataclass(slots=True)
class Transaction:
    """A transactional send (its half message is the :class:`Send` of the same id)."""

    message_id: str
    commit: bool
    """The application's decision, fixed before the half is sent: what the local transaction
    answers (unless it answers UNKNOWN) and every check-back is answered."""
    local: str
    """What the local transaction answered: ``commit``, ``rollback`` or ``unknown`` (the
    check-back decides); ``skipped`` when the half was stored without SEND_OK (the producer
    rolled it back without running the local transaction)."""
    half: str = ""
    """The half message's send :class:`Outcome` (its value)."""
    checks: int = 0
    """Check-backs the broker sent about it (answered with the decision)."""


@dataclass
class History:
    sends: list[Send] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    """Deliveries to the live consumer groups, during the run."""
    drained: list[Delivery] = field(default_factory=list)
    """What a fresh group read from the first offset after the last fault: the stored state."""
    faults: list[FaultRecord] = field(default_factory=list)
    transactions: list[Transaction] = field(default_factory=list)
    drain_complete: bool = True
    """False when the final drain stopped at its deadline short of the brokers' max offsets."""
    retired_brokers: set[str] = field(default_factory=set)
    """Broker groups drained and removed during the run (a Kubernetes scale-down): what they
    acknowledged was consumed by the live groups before removal and is nowhere to read after."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    """Listeners run on the consumers' threads."""

    def add_delivery(self, delivery: Delivery) -> None:
        with self._lock:
            self.deliveries.append(delivery)

    def stored_expected(self) -> set[str]:
        """Acknowledged messages the final read must find: all but the retired groups'."""
        return {
            s.message_id
            for s in self.sends
            if s.outcome is Outcome.ACKNOWLEDGED and s.broker not in self.retired_brokers
        }

    def as_dict(self) -> dict[str, object]:
        """The counts and the faults: what the result file keeps of the history."""
        return {
            "sends": len(self.sends),
            "deliveries": len(self.deliveries),
            "drained": len(self.drained),
            "faults": [asdict(f) for f in self.faults],
        }

    def save(self, path: Path) -> None:
        """The whole history as JSON (``--history``), to be judged again by :func:`load`."""
        sends = [{**asdict(s), "outcome": s.outcome.value} for s in self.sends]
        path.write_text(
            json.dumps(
                {
                    "sends": sends,
                    "deliveries": [asdict(d) for d in self.deliveries],
                    "drained": [asdict(d) for d in self.drained],
                    "faults": [asdict(f) for f in self.faults],
                    "transactions": [asdict(t) for t in self.transactions],
                    "drain_complete": self.drain_complete,
                    "retired_brokers": sorted(self.retired_brokers),
                }
            )
        )

    @classmethod
    def load(cls, path: Path) -> History:
        data = json.loads(path.read_text())
        return cls(
            sends=[Send(**{**s, "outcome": Outcome(s["outcome"])}) for s in data["sends"]],
            deliveries=[Delivery(**d) for d in data["deliveries"]],
            drained=[Delivery(**d) for d in data["drained"]],
            faults=[FaultRecord(**f) for f in data["faults"]],
            transactions=[Transaction(**t) for t in data.get("transactions", [])],
            drain_complete=data["drain_complete"],
            retired_brokers=set(data.get("retired_brokers", [])),
        )
