"""The epoch file of a broker's store, and where two brokers' logs stop agreeing.

Every time a broker becomes master it does so under a new, larger **epoch**
(docs/architecture.md, "Replication and failover") and records ``(epoch, start offset)``: the
physical offset of the commit log at which it started writing as that epoch's master. A slave
records the same entries as it replicates, so the file is the history of who wrote which stretch
of the log, like Kafka's ``leader-epoch-checkpoint`` or RocketMQ's ``EpochFileCache``.

When an old master rejoins as a slave, its log may hold a tail the new master never had
(messages it wrote after it was cut off). :func:`common_point` compares the two histories and
returns the offset up to which both logs hold the same bytes; the rejoining broker truncates its
commit log there, calls :meth:`EpochFile.truncate_after`, and replicates from that point.

The file lives at ``<store root>/epoch.json`` and is written through
:class:`~orbitmq.store.config_store.JsonConfigStore` (atomic replace, a ``.bak``, and a loud
:class:`~orbitmq.store.config_store.ConfigFileError` if it is corrupt: a lost epoch history would
make the next rejoin truncate the whole log, or worse, keep a divergent tail)::

    {
      "epochEntries": [
        {"epoch": 0, "startOffset": 0},
        {"epoch": 3, "startOffset": 1048576}
      ]
    }

Entries are in file order with strictly growing epochs and non-decreasing start offsets (two
entries may start at the same offset: an epoch in which nothing was written).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from orbitmq.store.config_store import JsonConfigStore

EPOCH_FILE = Path("epoch.json")
"""Where the epoch file lives, relative to the broker's store root."""


@dataclass(frozen=True)
class EpochEntry:
    """Epoch ``epoch`` began at physical offset ``start_offset`` of the commit log (both >= 0)."""

    epoch: int
    start_offset: int

    def __post_init__(self) -> None:
        for what, value in (("epoch", self.epoch), ("start_offset", self.start_offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{what} must be an int >= 0, got {value!r}")


# --------------------------------------------------------------------------------------- schema


class _EntryModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True
    )

    epoch: int = Field(ge=0)
    start_offset: int = Field(ge=0)


class EpochFileDocument(BaseModel):
    """``epoch.json`` (see the module docstring); the order rules are checked on load."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    epoch_entries: list[_EntryModel] = Field(default_factory=list)

    @model_validator(mode="after")
    def _in_order(self) -> Self:
        _check_history("epochEntries", [EpochEntry(e.epoch, e.start_offset) for e in self.epoch_entries])
        return self


# ----------------------------------------------------------------------------------------- file


class EpochFile:
    """The epoch history of one broker's store, persisted on every change.

    Construction does no I/O; call :meth:`load` first (the other members raise ``RuntimeError``
    until then, so a history cannot be overwritten unread). :meth:`begin` and
    :meth:`truncate_after` block on the disk: call them from a thread, not from the event loop.
    They raise :class:`~orbitmq.store.config_store.ConfigPersistError` (retriable) if the disk
    refuses, and then leave the history in memory as it was. If the main file was missing and its
    ``.bak`` was loaded, the next change writes the main file back.
    """

    def __init__(self, path: Path) -> None:
        self._store: JsonConfigStore[EpochFileDocument] = JsonConfigStore(
            path, EpochFileDocument, EpochFileDocument
        )
        self._lock = threading.Lock()
        self._entries: tuple[EpochEntry, ...] | None = None

    @property
    def store(self) -> JsonConfigStore[EpochFileDocument]:
        return self._store

    def load(self) -> list[EpochEntry]:
        """Read the history; a missing file (a new store) is an empty one.

        Raises :class:`~orbitmq.store.config_store.ConfigFileError` if the file is corrupt or its
        entries are out of order.
        """
        document = self._store.load()
        entries = tuple(EpochEntry(e.epoch, e.start_offset) for e in document.epoch_entries)
        with self._lock:
            self._entries = entries
        return list(entries)

    @property
    def entries(self) -> list[EpochEntry]:
        """The history, oldest first (a copy)."""
        with self._lock:
            return list(self._loaded())

    @property
    def current(self) -> EpochEntry | None:
        """The latest entry, None if no epoch was ever recorded."""
        with self._lock:
            entries = self._loaded()
            return entries[-1] if entries else None

    def begin(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at physical offset ``start_offset``, and persist.

        Raises ``ValueError`` if ``epoch`` is not greater than the last recorded epoch (a role
        change must carry a newer epoch), or ``start_offset`` is below the last entry's start
        (an epoch starts where the log ends, and the log only grows between truncations).
        """
        entry = EpochEntry(epoch, start_offset)
        with self._lock:
            entries = self._loaded()
            if entries:
                last = entries[-1]
                if epoch <= last.epoch:
                    raise ValueError(
                        f"{self._store.path}: epoch {epoch} is not newer than the last recorded epoch"
                        f" {last.epoch}: epochs only grow"
                    )
                if start_offset < last.start_offset:
                    raise ValueError(
                        f"{self._store.path}: epoch {epoch} cannot start at offset {start_offset}, before"
                        f" epoch {last.epoch}'s start {last.start_offset}: an epoch starts where the log ends"
                    )
            self._save((*entries, entry))

    def truncate_after(self, offset: int) -> None:
        """Forget the epochs that start beyond ``offset``, after the log was truncated to ``offset``.

        Persists only if an entry was dropped. An epoch starting exactly at ``offset`` stays: it
        holds nothing now, but it is still the epoch the log's next bytes were written under.
        """
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        with self._lock:
            entries = self._loaded()
            kept = tuple(e for e in entries if e.start_offset <= offset)
            if kept != entries:
                self._save(kept)

    def _loaded(self) -> tuple[EpochEntry, ...]:
        if self._entries is None:
            raise RuntimeError(f"{self._store.path}: call load() before reading or changing the epochs")
        return self._entries

    def _save(self, entries: tuple[EpochEntry, ...]) -> None:
        """Persist ``entries``, then adopt them (lock held): a failed write changes nothing."""
        document = EpochFileDocument(
            epoch_entries=[_EntryModel(epoch=e.epoch, start_offset=e.start_offset) for e in entries]
        )
        self._store.persist(document)
        self._entries = entries


# ------------------------------------------------------------------------------- common point


def common_point(
    local: Sequence[EpochEntry],
    local_max_offset: int,
    remote: Sequence[EpochEntry],
    remote_max_offset: int,
) -> int:
    """The commit-log offset up to which two logs with these epoch histories hold the same bytes.

    ``local`` / ``remote`` are the histories (oldest first) and ``*_max_offset`` the commit logs'
    max physical offsets. The largest epoch in both histories was written by one master, so
    both logs agree up to where that epoch ends in the shorter of them: the start of the next
    entry, or the max offset for the last epoch. The result is never above either max offset.

    With no epoch in common the logs share nothing provable: 0 (truncate everything). The one
    exception is two empty histories: neither broker ever changed role, so both hold the original
    master's lineage and agree up to the shorter log.

    Raises ``ValueError`` for a negative max offset or a history out of order.
    """
    for what, value in (("local_max_offset", local_max_offset), ("remote_max_offset", remote_max_offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{what} must be an int >= 0, got {value!r}")
    _check_history("the local history", local)
    _check_history("the remote history", remote)
    if not local and not remote:
        return min(local_max_offset, remote_max_offset)
    shared = {e.epoch for e in local} & {e.epoch for e in remote}
    if not shared:
        return 0
    epoch = max(shared)
    return min(_end_of(local, epoch, local_max_offset), _end_of(remote, epoch, remote_max_offset))


def _end_of(history: Sequence[EpochEntry], epoch: int, max_offset: int) -> int:
    """Where ``epoch`` ends in ``history``: the next epoch's start, or the log's end if it is the last."""
    index = next(i for i, e in enumerate(history) if e.epoch == epoch)
    end = history[index + 1].start_offset if index + 1 < len(history) else max_offset
    return min(end, max_offset)


def _check_history(what: str, history: Sequence[EpochEntry]) -> None:
    for previous, entry in itertools.pairwise(history):
        if entry.epoch <= previous.epoch:
            raise ValueError(
                f"{what}: epoch {entry.epoch} follows epoch {previous.epoch}: epochs must strictly grow"
            )
        if entry.start_offset < previous.start_offset:
            raise ValueError(
                f"{what}: epoch {entry.epoch} starts at {entry.start_offset}, before epoch"
                f" {previous.epoch}'s start {previous.start_offset}: start offsets must not decrease"
            )
