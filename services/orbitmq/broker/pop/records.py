"""POP records as message bodies of the system topic ``RMQ_SYS_POP_LOG`` (see :mod:`.`).

One record per message, compact JSON with a type letter, so a record is readable with
``orbitmq admin`` message tools and a newer broker can add fields::

    {"v":1,"t":"B","g":"group","tp":"topic","q":0,"o":offset}            began at offset
    {"v":1,"t":"D","g":"group","tp":"topic","q":0,"e":[[offset,attempt,lease],...],"u":until_ms}
    {"v":1,"t":"A","g":..,"tp":..,"q":..,"o":offset,"l":lease}          ack
    {"v":1,"t":"S","g":..,"tp":..,"q":..,"os":[offset,...]}             skipped (filtered out)
    {"v":1,"t":"C","g":..,"tp":..,"q":..,"o":..,"ol":old,"l":new,"u":until_ms}   invisibility changed
    {"v":1,"t":"X","g":..,"tp":..,"q":..,"o":..,"l":lease}              dead-lettered
    {"v":1,"t":"N","s":{snapshot}}                                      snapshot: replay restarts here
"""

from __future__ import annotations

import json
from typing import Any

from orbitmq.broker.pop.state import (
    Acked,
    Changed,
    DeadLettered,
    Delivered,
    PopKey,
    PopState,
    Record,
    Skipped,
    Started,
)

POP_LOG_TOPIC = "RMQ_SYS_POP_LOG"
VERSION = 1


class PopRecordError(ValueError):
    """A POP log message that is not a record this broker understands."""


def encode(record: Record) -> bytes:
    key = record.key
    data: dict[str, Any] = {"v": VERSION, "g": key.group, "tp": key.topic, "q": key.queue_id}
    if isinstance(record, Started):
        data.update(t="B", o=record.offset)
    elif isinstance(record, Delivered):
        data.update(t="D", e=[list(e) for e in record.entries], u=record.invisible_until_ms)
    elif isinstance(record, Acked):
        data.update(t="A", o=record.offset, l=record.lease)
    elif isinstance(record, Skipped):
        data.update(t="S", os=list(record.offsets))
    elif isinstance(record, Changed):
        data.update(t="C", o=record.offset, ol=record.old_lease, l=record.lease, u=record.invisible_until_ms)
    elif isinstance(record, DeadLettered):
        data.update(t="X", o=record.offset, l=record.lease)
    else:
        raise TypeError(f"not a POP record: {record!r}")
    return json.dumps(data, separators=(",", ":")).encode()


SNAPSHOT_PREFIX = b'{"v":%d,"t":"N",' % VERSION
"""How every snapshot body starts (:func:`encode_snapshot` writes the keys in this order), so
:func:`is_snapshot` finds the last snapshot of the log without decoding the records after it."""


def encode_snapshot(state: PopState) -> bytes:
    return json.dumps({"v": VERSION, "t": "N", "s": state.snapshot()}, separators=(",", ":")).encode()


def is_snapshot(body: bytes) -> bool:
    """Whether ``body`` is a snapshot record (a prefix test: no JSON decoding)."""
    return body.startswith(SNAPSHOT_PREFIX)


def decode(body: bytes) -> Record | PopState:
    """A record, or a :class:`PopState` for a snapshot; raises :class:`PopRecordError`."""
    try:
        data = json.loads(body)
        kind = data["t"]
        if data.get("v") != VERSION:
            raise PopRecordError(f"POP record version {data.get('v')!r} is not {VERSION}")
        if kind == "N":
            return PopState.from_snapshot(data["s"])
        key = PopKey(data["g"], data["tp"], int(data["q"]))
        if kind == "B":
            return Started(key, int(data["o"]))
        if kind == "D":
            return Delivered(
                key, tuple((int(o), int(a), int(lease)) for o, a, lease in data["e"]), int(data["u"])
            )
        if kind == "A":
            return Acked(key, int(data["o"]), int(data["l"]))
        if kind == "S":
            return Skipped(key, tuple(int(o) for o in data["os"]))
        if kind == "C":
            return Changed(key, int(data["o"]), int(data["ol"]), int(data["l"]), int(data["u"]))
        if kind == "X":
            return DeadLettered(key, int(data["o"]), int(data["l"]))
    except PopRecordError:
        raise
    except (ValueError, KeyError, TypeError) as error:
        raise PopRecordError(f"POP record {body[:80]!r} is malformed: {error!r}") from None
    raise PopRecordError(f"POP record type {kind!r} is not known (B, D, A, S, C, X, N)")


def replay(bodies: list[bytes]) -> PopState:
    """The state after ``bodies`` in log order: from the last snapshot on, records applied."""
    state = PopState()
    for body in bodies:
        decoded = decode(body)
        if isinstance(decoded, PopState):
            state = decoded
        else:
            state.apply(decoded)
    return state
