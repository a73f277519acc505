"""The C send and pull paths (``orbitmq/_native.c``), when built and in agreement with this tree.

A batched send costs a Python broker a protobuf wrapper, a properties dict, an encoded
properties string, a CRC call and a header pack per message. The C module does that work
straight from the request bytes: :func:`scan_send` checks the messages and returns what the
broker still needs in Python, ``write`` (called by the commit log) builds the records and
returns their consume-queue units, and ``send_reply`` / ``pull_reply`` encode the replies.

The Python path stays the reference for every rule: anything the scanner does not take
(delays, transactions, separators inside properties, duplicate map keys, odd wire shapes) and
every refusal goes there, and so does everything when the extension is missing.

:data:`NATIVE` is the module, or None when

* the extension was not built (the install does not fail without a C compiler),
* ``ORBITMQ_NATIVE=off`` asks for the Python path (tests run both paths this way), or
* its field numbers or record layout differ from the generated protobuf code and
  :mod:`orbitmq.store.record`: a stale build must never write records in another format.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType
from typing import NamedTuple

from orbitmq.common.topics import Property
from orbitmq.store import record

log = logging.getLogger(__name__)

ENV = "ORBITMQ_NATIVE"


class SendHeader(NamedTuple):
    """A SendMessageRequest's own fields, named as in the proto (so code reads either).

    The C module returns struct sequences of its own with these fields (and those of
    :class:`Scanned` and :class:`orbitmq.store.record.ScanColumns`): a NamedTuple costs a
    Python-level call to build. :func:`_agrees` checks that the field names match."""

    producer_group: str
    topic: str
    queue_id: int
    born_timestamp_ms: int
    born_host: str
    sys_flag: int
    reconsume_times: int
    default_topic_queue_nums: int


class Scanned(NamedTuple):
    """What :func:`scan_send` returns for a request the C path takes."""

    header: SendHeader
    columns: record.ScanColumns


def _agrees(module: ModuleType) -> str | None:
    """Why ``module`` must not be used, or None."""
    from orbitmq.store.consume_queue import UNIT_BYTES
    from orbitmq.v1 import broker_pb2, common_pb2

    message = common_pb2.Message.DESCRIPTOR.fields_by_name
    request = broker_pb2.SendMessageRequest.DESCRIPTOR.fields_by_name
    reply = broker_pb2.SendMessageResponse.DESCRIPTOR.fields
    pull = broker_pb2.PullMessageResponse.DESCRIPTOR.fields
    expected = {
        **{f"REPLY_{field.name.upper()}": field.number for field in reply},
        **{f"PULL_{field.name.upper()}": field.number for field in pull},
        **{f"REQUEST_{name.upper()}": request[name].number for name in SendHeader._fields},
        "REQUEST_MESSAGES": request["messages"].number,
        "MESSAGE_TOPIC": message["topic"].number,
        "MESSAGE_BODY": message["body"].number,
        "MESSAGE_PROPERTIES": message["properties"].number,
        "MESSAGE_FLAG": message["flag"].number,
        "MESSAGE_BORN_HOST": message["born_host"].number,
        "MESSAGE_MAGIC": record.MESSAGE_MAGIC,
        "HEADER_BYTES": record.HEADER_BYTES,
        "SHARED_POSITION": record.SHARED_POSITION,
        "SHARED_BYTES": record.SHARED_FIELDS.size,
        "UNIT_BYTES": UNIT_BYTES,
    }
    for name, value in expected.items():
        if getattr(module, name, None) != value:
            return f"{name} is {getattr(module, name, None)!r} in the extension, {value!r} here"
    for shape in (SendHeader, record.ScanColumns, Scanned):
        fields = getattr(getattr(module, shape.__name__, None), "__match_args__", None)
        if fields != shape._fields:
            return f"{shape.__name__} has fields {fields} in the extension, {shape._fields} here"
    return None


def _load() -> ModuleType | None:
    if os.environ.get(ENV, "on").lower() in ("off", "0", "false", "no"):
        return None
    try:
        from orbitmq import _native
    except ImportError:
        log.info("orbitmq._native is not built: sends take the Python path")
        return None
    problem = _agrees(_native)
    if problem is not None:
        log.warning("orbitmq._native is stale (%s): sends take the Python path; reinstall it", problem)
        return None
    return _native


NATIVE = _load()

_TAGS, _KEYS, _UNIQ = (name.encode() for name in (Property.TAGS, Property.KEYS, Property.UNIQ_KEY))


def scan_send(request: bytes, detour: tuple[bytes, ...]) -> Scanned | None:
    """A ``SendMessageRequest`` (its wire bytes) read for the C path, or None.

    The scanner reads the request as protobuf would (last occurrence wins, unknown fields
    skipped, strings checked as UTF-8), so no protobuf object is built for it. None when the
    C path is not available or not for this request: a message carries one of the ``detour``
    property names, or anything else the Python path handles (the reason is not needed: that
    path decides, and refuses with its own words).
    """
    if NATIVE is None:
        return None
    scanned = NATIVE.scan(request, _TAGS, _KEYS, _UNIQ, detour)
    return None if type(scanned) is str else scanned  # type: ignore[no-any-return]


def pull_columns(
    records: object, start: int, end: int, names: tuple[bytes, bytes, bytes], system: tuple[bytes, ...]
) -> tuple[int, tuple[bytes, ...], list[int]] | None:
    """Pulled records as Arrow column buffers (``_native.pull_columns``; ``names`` are the
    unique-key, keys and tags property names), or None: the records need the Python path, or
    the C path is not available (not built, turned off, or a build from before this function).
    Raises ValueError for a record that does not check."""
    function = getattr(NATIVE, "pull_columns", None)
    if function is None:
        return None
    return function(records, start, end, *names, system)  # type: ignore[no-any-return]
