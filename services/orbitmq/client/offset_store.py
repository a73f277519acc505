"""Consumer offset stores: where a push consumer keeps the next offset to consume per queue.

Two message models, two homes for offsets (as in RocketMQ):

* **Broadcasting** — every instance reads every queue, so offsets are per instance and live in
  a local file, ``<root>/<host>@<instance name>/<group>/offsets.json``
  (:class:`LocalFileOffsetStore`). As RocketMQ's ``ip@instanceName`` (whose instance name stays
  ``DEFAULT`` for broadcasting), the key is stable across restarts, never the pid: a restarted
  consumer resumes where it stopped instead of starting again from ``consume_from`` (skipping
  what was sent while it was down, or re-reading everything). Two live consumers of one group
  with the same instance name on one host would share the file, so a consumer holds
  ``offsets.lock`` next to it (:meth:`LocalFileOffsetStore.claim`) and the second is refused.
  The file is written through the broker's
  :class:`~orbitmq.store.config_store.JsonConfigStore`: atomic replace (temp file, fsync,
  rename, directory fsync), the previous version kept as ``offsets.json.bak``, and a corrupt
  file raising :class:`~orbitmq.store.config_store.ConfigFileError` naming it, never silently
  read as "no offsets" (that would re-consume or skip everything).
* **Clustering** — queues are shared by the group and offsets live on the broker.
  :class:`RemoteOffsetStoreState` is only the in-memory side: the table and which entries the
  broker has not seen yet. The consumer does the gRPC commit and reports back with
  :meth:`~RemoteOffsetStoreState.mark_persisted`; keeping I/O out makes this unit-testable.

Both share one interface (:class:`OffsetStore`). Offsets only move forward by default
(``increase_only``): consume tasks finish out of order, and a late task reporting an older
committable offset must not move the offset back. Offsets are updated from consume threads
and persisted from a timer, so the tables are thread-safe.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from orbitmq.client.queue import MessageQueue
from orbitmq.common.errors import OrbitError
from orbitmq.common.names import validate_group_name
from orbitmq.common.procs import flock_holders
from orbitmq.store.config_store import JsonConfigStore, Offset, QueueId, TopicName

log = logging.getLogger(__name__)

OFFSETS_FILE_NAME = "offsets.json"
LOCK_FILE_NAME = "offsets.lock"
DEFAULT_INSTANCE_NAME = "DEFAULT"
"""The instance name of a consumer given none (RocketMQ's ``DEFAULT``)."""
OFFSETS_ROOT_ENV = "ORBITMQ_LOCAL_OFFSETS_DIR"
"""Overrides the root directory of local offset files (RocketMQ's ``rocketmq.client.localOffsetStoreDir``)."""
DEFAULT_OFFSETS_DIR_NAME = ".orbitmq_offsets"
"""Under the user's home directory, like RocketMQ's ``~/.rocketmq_offsets``."""
UNKNOWN_OFFSET = -1


class OffsetStore(Protocol):
    """What a push consumer needs from an offset store."""

    def load(self) -> None:
        """Read persisted offsets into memory (at consumer start)."""

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = True) -> None:
        """Set the next offset to consume of ``mq`` in memory (``increase_only``: never lower it)."""

    def read(self, mq: MessageQueue, from_memory: bool) -> int:
        """The next offset to consume of ``mq``, or -1 if unknown."""

    def persist(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """Make the offsets of ``mqs`` durable as far as this store can; return those still
        outstanding, which the caller must make durable itself ({} when none)."""

    def remove(self, mq: MessageQueue) -> None:
        """Forget ``mq`` (no longer consumed here)."""

    def snapshot(self) -> dict[MessageQueue, int]:
        """A copy of the in-memory table."""


class _OffsetTable:
    """The in-memory table both stores share: offsets and the last persisted value of each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offsets: dict[MessageQueue, int] = {}
        self._persisted: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = True) -> None:
        """Set ``mq``'s next offset to consume; with ``increase_only`` (the default) a value below
        the current one is ignored, so a late consume task cannot move the offset back.

        Raises ``ValueError`` for a negative offset (-1 means "nothing to commit" to callers).
        """
        _check_queue(mq)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset of {mq} must be an int >= 0, got {offset!r}")
        with self._lock:
            current = self._offsets.get(mq)
            if current is None or not increase_only or offset > current:
                self._offsets[mq] = offset

    def remove(self, mq: MessageQueue) -> None:
        with self._lock:
            self._offsets.pop(mq, None)

    def snapshot(self) -> dict[MessageQueue, int]:
        with self._lock:
            return dict(self._offsets)

    def _read_memory(self, mq: MessageQueue) -> int:
        with self._lock:
            return self._offsets.get(mq, UNKNOWN_OFFSET)


def _check_queue(mq: object) -> None:
    if not isinstance(mq, MessageQueue):
        raise TypeError(f"expected a MessageQueue, got {mq!r}")


# ------------------------------------------------------------------------------------ local file


class _Schema(BaseModel):
    """camelCase on disk like the broker's config files; unknown fields are errors."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class LocalOffsetEntry(_Schema):
    topic: TopicName
    broker_name: str = Field(min_length=1)
    queue_id: QueueId
    offset: Offset

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


class LocalOffsetFile(_Schema):
    """``offsets.json``::

        {"offsetTable": [{"topic": "T", "brokerName": "broker-a", "queueId": 0, "offset": 42}, ...]}

    A list of entries rather than RocketMQ's map keyed by serialized queues: readable, and a
    queue listed twice is an error rather than a silent last-one-wins.
    """

    offset_table: list[LocalOffsetEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_entry_per_queue(self) -> Self:
        seen: set[MessageQueue] = set()
        for entry in self.offset_table:
            if entry.queue in seen:
                raise ValueError(f"{entry.queue} is listed more than once")
            seen.add(entry.queue)
        return self


def default_offsets_root() -> Path:
    """``$ORBITMQ_LOCAL_OFFSETS_DIR``, else ``~/.orbitmq_offsets``."""
    configured = os.environ.get(OFFSETS_ROOT_ENV)
    return Path(configured) if configured else Path.home() / DEFAULT_OFFSETS_DIR_NAME


def local_client_id(instance_name: str | None) -> str:
    """``<host>@<instance name>`` (``DEFAULT`` when None or empty): what names a broadcasting
    consumer's offsets directory. Unlike the client id the brokers see (``host@pid@...``) it
    survives a restart, which is the point: the restarted consumer must find its file."""
    return f"{socket.gethostname()}@{instance_name or DEFAULT_INSTANCE_NAME}"


def local_offsets_path(root: Path | str, client_id: str, group: str) -> Path:
    """``<root>/<client id>/<group>/offsets.json``: one file per consumer instance and group,
    since broadcasting offsets belong to the instance (``client_id`` as
    :func:`local_client_id` makes it). Raises ``ValueError`` for a client id that is empty or
    would escape ``root``, or an invalid group name."""
    if not client_id or "/" in client_id or "\\" in client_id or client_id in (".", ".."):
        raise ValueError(f"client id {client_id!r} cannot name a directory (empty, '.', '..' or has a slash)")
    return Path(root) / client_id / validate_group_name(group) / OFFSETS_FILE_NAME


class OffsetFileInUseError(OrbitError):
    """Another live consumer (in this process or another one) holds a local offsets file.

    Retriable: the lock goes when that consumer closes or its process dies. ``holder_pid``
    names the holder when it could be read.
    """

    retriable = True

    def __init__(self, message: str, holder_pid: int | None = None) -> None:
        super().__init__(message)
        self.holder_pid = holder_pid


class LocalFileOffsetStore(_OffsetTable):
    """Broadcasting offsets in a local JSON file (see the module docstring).

    Args:
        path: the ``offsets.json`` file; see :func:`local_offsets_path` for the usual place.
            Nothing is read until :meth:`load`.
    """

    def __init__(self, path: Path | str) -> None:
        super().__init__()
        self._store = JsonConfigStore(path, LocalOffsetFile, LocalOffsetFile)
        self._persist_lock = threading.Lock()
        self._lock_fd = -1

    def claim(self) -> None:
        """Take ``offsets.lock`` next to the file, so no other consumer writes it meanwhile.

        Two writers of one file would each overwrite the other's offsets every persist, and
        one of them would resume from the other's progress after a restart. flock: a second
        claim from this process (another store, another fd) is refused like one from another
        process, and the kernel frees the lock when the holder dies, however it dies, so a
        killed consumer never blocks its restart. Idempotent; raises
        :class:`OffsetFileInUseError` naming the file and the holder's pid.
        """
        if self._lock_fd >= 0:
            return
        lock_path = self.path.parent / LOCK_FILE_NAME
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            holder = int(text) if text.isdigit() else next(iter(flock_holders(lock_path)), None)
            os.close(fd)
            who = "unknown pid" if holder is None else f"pid {holder}"
            if holder == os.getpid():
                who += ", this process"
            raise OffsetFileInUseError(f"{self.path} is in use by another consumer ({who})", holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def release(self) -> None:
        """Give up what :meth:`claim` took (nothing if it took nothing)."""
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    @classmethod
    def for_client(cls, client_id: str, group: str, root: Path | str | None = None) -> LocalFileOffsetStore:
        """The store of ``client_id`` in ``group`` under ``root`` (default :func:`default_offsets_root`)."""
        return cls(local_offsets_path(default_offsets_root() if root is None else root, client_id, group))

    @property
    def path(self) -> Path:
        return self._store.path

    def load(self) -> None:
        """Read the file into memory, overriding in-memory values of the queues it lists.

        A missing file means no offsets yet. Raises ``ConfigFileError`` (naming the file) if it
        exists but is unreadable, not JSON or not the schema; blocks on the disk.
        """
        entries = {entry.queue: entry.offset for entry in self._store.load().offset_table}
        with self._lock:
            self._offsets.update(entries)
            # What the file holds now; a load from the .bak leaves the main file to rewrite.
            self._persisted = dict(entries) if self._store.loaded_from == self._store.path else {}
        log.info("loaded %d offsets from %s", len(entries), self._store.loaded_from or self.path)

    def read(self, mq: MessageQueue, from_memory: bool) -> int:
        """``mq``'s offset from memory, or (``from_memory=False``) from the file, which then also
        updates memory; -1 if unknown. Reading the file blocks on the disk and raises
        ``ConfigFileError`` if it is corrupt."""
        _check_queue(mq)
        if from_memory:
            return self._read_memory(mq)
        stored = {entry.queue: entry.offset for entry in self._store.load().offset_table}
        offset = stored.get(mq)
        if offset is None:
            return UNKNOWN_OFFSET
        self.update(mq, offset, increase_only=False)
        return offset

    def persist(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """Write the table to the file if it changed since the last write; returns ``{}``.

        The whole table is written, not only ``mqs``: a queue missing from one rebalance (a
        route gap) must keep its offset; queues leave the file through :meth:`remove`. Blocks
        on the disk (call it from a thread); raises ``ConfigPersistError`` (retriable, the old
        file stays in place) if the disk refuses.
        """
        for mq in mqs:
            _check_queue(mq)
        with self._persist_lock:  # an older snapshot never overwrites a newer one
            with self._lock:
                if self._offsets == self._persisted:
                    return {}
                written = dict(self._offsets)
            entries = [
                LocalOffsetEntry(topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id, offset=o)
                for mq, o in sorted(written.items())
            ]
            self._store.persist(LocalOffsetFile(offset_table=entries))
            with self._lock:
                self._persisted = written
        return {}


# ----------------------------------------------------------------------------------- clustering


class RemoteOffsetStoreState(_OffsetTable):
    """Clustering offsets in memory, and which of them the broker has not acknowledged yet.

    The broker is the store, and talking to it is the consumer's job: it sends
    :meth:`dirty_offsets` (or what :meth:`persist` returns) with its commit RPC and calls
    :meth:`mark_persisted` for each acknowledged one.
    """

    def load(self) -> None:
        """Nothing to load: offsets are fetched from the broker per queue when it is assigned."""

    def read(self, mq: MessageQueue, from_memory: bool) -> int:
        """``mq``'s offset from memory; -1 if unknown there, or when ``from_memory`` is False:
        the store is the broker, so the caller queries it and records the answer with
        ``update(mq, offset, increase_only=False)``."""
        _check_queue(mq)
        return self._read_memory(mq) if from_memory else UNKNOWN_OFFSET

    def persist(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """The offsets of ``mqs`` the broker has not acknowledged: the caller commits them."""
        return self.dirty_offsets(mqs)

    def dirty_offsets(self, mqs: Iterable[MessageQueue] | None = None) -> dict[MessageQueue, int]:
        """Offsets that changed since their last :meth:`mark_persisted` (only of ``mqs`` if given)."""
        with self._lock:
            wanted = self._offsets.keys() if mqs is None else set(mqs) & self._offsets.keys()
            return {
                mq: self._offsets[mq] for mq in sorted(wanted) if self._persisted.get(mq) != self._offsets[mq]
            }

    def mark_persisted(self, mq: MessageQueue, offset: int) -> None:
        """The broker acknowledged ``offset`` for ``mq``; it stays dirty if it moved on since."""
        _check_queue(mq)
        with self._lock:
            if mq in self._offsets:
                self._persisted[mq] = offset

    def remove(self, mq: MessageQueue) -> None:
        with self._lock:
            self._offsets.pop(mq, None)
            self._persisted.pop(mq, None)
