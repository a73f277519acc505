"""The broker's small JSON tables: topics, subscription groups, consumer offsets, delay progress.

Like RocketMQ, a broker keeps these next to its commit log, in ``<store root>/config``:
``topics.json``, ``subscriptionGroup.json``, ``consumerOffset.json`` (``topic@group`` ->
``{queueId: offset}``) and ``delayOffset.json`` (delay level -> offset). They are rewritten every
few seconds and on shutdown, and losing one is expensive: an empty ``consumerOffset.json`` makes
every consumer group start over (re-consume everything, or skip everything), an empty
``topics.json`` makes topics disappear. Hence three rules:

* **Atomic replace.** A new version is written to a temporary file in the same directory,
  flushed and fsynced, then ``os.replace``-d onto the target, and the directory is fsynced. A
  crash at any point leaves the old or the new file in place, never a torn mix, and the target
  never goes missing. A temporary file left by an interrupted write is never read (the next
  load removes it).
* **A ``.bak``.** Before the replace, the previous version is hard-linked (copied where links
  are not supported) to ``<name>.bak``, so an operator has the last-but-one version at hand when
  the current one turns out to be wrong for a reason no parser catches.
* **Loud failure.** A missing file is an empty table (a new broker). A file that exists but is
  unreadable, not JSON, or not matching its schema raises :class:`ConfigFileError` naming the
  file and the problem. It is never silently replaced by an empty table: that would be data
  loss dressed up as recovery. Loading does not silently fall back to the ``.bak`` either: it
  is one version older (seconds, or much more), so restoring it is the operator's decision, and
  the error says that it exists. Only when the main file is *missing* and the ``.bak`` is there
  (a crash of a writer that renames instead of linking, or a manual move) is the ``.bak``
  loaded, with a warning, and written back to the main file on the next persist.

Every table carries a data version (milliseconds timestamp + a counter bumped on each change),
as in RocketMQ: slaves compare it to decide whether to pull a fresh copy.

Tables are thread-safe (the asyncio loop mutates them, a flush thread persists them). Mutations
never do I/O; :meth:`persist` writes a consistent snapshot, and blocks on the disk, so call it
from a thread (``asyncio.to_thread``), not from the event loop.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import os
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from enum import IntFlag, StrEnum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Generic, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from orbitmq.common.clock import SYSTEM_CLOCK, Clock
from orbitmq.common.errors import OrbitError
from orbitmq.common.names import validate_group_name, validate_topic_name
from orbitmq.store.mapped_file import fsync_directory

log = logging.getLogger(__name__)

TOPICS_FILE = Path("config/topics.json")
SUBSCRIPTION_GROUPS_FILE = Path("config/subscriptionGroup.json")
CONSUMER_OFFSETS_FILE = Path("config/consumerOffset.json")
DELAY_OFFSETS_FILE = Path("config/delayOffset.json")
"""Where each table lives, relative to the broker's store root."""

BAK_SUFFIX = ".bak"
TMP_SUFFIX = ".tmp"
MAX_QUEUE_NUMS = 1024
DEFAULT_DELAY_LEVELS = 18
"""RocketMQ's default ``messageDelayLevel`` has 18 levels (1s 5s 10s 30s 1m ... 2h)."""

_MAX_ERRORS_SHOWN = 5
_MAX_INPUT_SHOWN = 60


# --------------------------------------------------------------------------------------- errors


class ConfigFileError(OrbitError):
    """A config file exists but cannot be used: unreadable, not JSON, or not matching its schema.

    Not retriable: the file must be repaired, or replaced by ``backup`` (the ``.bak`` next to it,
    when there is one) by an operator who checked that it is good.
    """

    retriable = False

    def __init__(self, path: Path, problem: str, backup: Path | None = None) -> None:
        self.path = path
        self.problem = problem
        self.backup = backup
        message = f"{path}: {problem}"
        if backup is not None:
            message += (
                f"; the previous version is kept in {backup}: if it is good, restore it by copying it"
                f" over {path} (it is not loaded automatically)"
            )
        super().__init__(message)


class ConfigPersistError(OrbitError):
    """Writing a config file failed (disk full, permissions).

    Retriable: the target still holds a complete version (the previous one, or the new one if
    only the final directory fsync failed), and the table stays dirty, so the next persist retries.
    """

    retriable = True

    def __init__(self, path: Path, cause: OSError) -> None:
        self.path = path
        self.cause = cause
        super().__init__(f"{path}: cannot write: {cause}")


class InvalidOffsetError(OrbitError, ValueError):
    """An offset, queue id or delay level out of its range was handed to a table."""


# --------------------------------------------------------------------------------------- schema


class Permission(IntFlag):
    """Topic permission bits, as in RocketMQ's ``PermName``."""

    INHERIT = 1
    WRITE = 2
    READ = 4


_ALL_PERMISSIONS = int(Permission.READ | Permission.WRITE | Permission.INHERIT)


class TopicFilterType(StrEnum):
    SINGLE_TAG = "SINGLE_TAG"
    MULTI_TAG = "MULTI_TAG"


def _validate_offset_key(key: str) -> str:
    """``topic@group``; neither name may contain ``@``, so the split is unambiguous."""
    topic, separator, group = key.partition("@")
    if not separator:
        raise ValueError(f"key {key!r} is not of the form topic@group")
    validate_topic_name(topic)
    validate_group_name(group)
    return key


TopicName = Annotated[str, AfterValidator(validate_topic_name)]
GroupName = Annotated[str, AfterValidator(validate_group_name)]
OffsetKey = Annotated[str, AfterValidator(_validate_offset_key)]
QueueNums = Annotated[int, Field(ge=1, le=MAX_QUEUE_NUMS)]
QueueId = Annotated[int, Field(ge=0)]
Offset = Annotated[int, Field(ge=0)]
DelayLevel = Annotated[int, Field(ge=1)]


class _Schema(BaseModel):
    """camelCase on disk (RocketMQ's layout), snake_case in Python; unknown fields are errors."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class TopicConfig(_Schema):
    """One topic. Frozen: change it with ``model_copy(update=...)`` and put the copy."""

    topic_name: TopicName
    read_queue_nums: QueueNums = 4
    write_queue_nums: QueueNums = 4
    perm: Permission = Permission.READ | Permission.WRITE
    order: bool = False
    topic_filter_type: TopicFilterType = TopicFilterType.SINGLE_TAG
    attributes: dict[str, str] = Field(default_factory=dict)

    @field_validator("perm", mode="before")
    @classmethod
    def _known_permission_bits(cls, value: object) -> object:
        # IntFlag accepts any integer; only READ|WRITE|INHERIT bits mean something.
        if isinstance(value, bool) or (isinstance(value, int) and not 0 <= value <= _ALL_PERMISSIONS):
            raise ValueError(f"perm {value!r} is not a combination of READ=4, WRITE=2, INHERIT=1 (0..7)")
        return value


class SubscriptionGroupConfig(_Schema):
    """One consumer group. Frozen, like :class:`TopicConfig`."""

    group_name: GroupName
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = Field(default=1, ge=0, le=MAX_QUEUE_NUMS)
    retry_max_times: int = Field(default=16, ge=0, le=1000)
    broker_id: int = Field(default=0, ge=0)
    which_broker_when_consume_slowly: int = Field(default=1, ge=0)
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool = False


class DataVersion(_Schema):
    """When a table last changed (ms) and how many changes it has seen."""

    timestamp: int = Field(default=0, ge=0)
    counter: int = Field(default=0, ge=0)

    def next(self, now_ms: int) -> DataVersion:
        return DataVersion(timestamp=now_ms, counter=self.counter + 1)


class _VersionedFile(_Schema):
    data_version: DataVersion = Field(default_factory=DataVersion)


def _check_keys_match(table: Mapping[str, Any], name_of: Callable[[Any], str]) -> None:
    for key, config in table.items():
        if key != name_of(config):
            raise ValueError(f"key {key!r} holds the config named {name_of(config)!r}")


class TopicConfigFile(_VersionedFile):
    """``topics.json``."""

    topic_config_table: dict[str, TopicConfig] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _keys_are_names(self) -> Self:
        _check_keys_match(self.topic_config_table, lambda config: config.topic_name)
        return self


class SubscriptionGroupFile(_VersionedFile):
    """``subscriptionGroup.json``."""

    subscription_group_table: dict[str, SubscriptionGroupConfig] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _keys_are_names(self) -> Self:
        _check_keys_match(self.subscription_group_table, lambda config: config.group_name)
        return self


class ConsumerOffsetFile(_VersionedFile):
    """``consumerOffset.json``: ``topic@group`` -> queue id -> next offset to consume."""

    offset_table: dict[OffsetKey, dict[QueueId, Offset]] = Field(default_factory=dict)


class DelayOffsetFile(_VersionedFile):
    """``delayOffset.json``: delay level -> offset reached in that level's schedule queue."""

    offset_table: dict[DelayLevel, Offset] = Field(default_factory=dict)


# ---------------------------------------------------------------------------------------- store

T = TypeVar("T")


class JsonConfigStore(Generic[T]):
    """One JSON file holding one value of type ``T`` (see the module docstring for the rules).

    One store per file and one process per store directory: ``persist`` calls are serialized by
    a lock, and ``load`` deletes the temporary files an interrupted ``persist`` left behind.
    """

    file_mode: int = 0o644
    """Mode the file and its ``.bak`` are created with (a store of secrets narrows it)."""

    def __init__(self, path: Path | str, schema: type[T] | TypeAdapter[T], empty: Callable[[], T]) -> None:
        self._path = Path(path)
        self._adapter: TypeAdapter[T] = schema if isinstance(schema, TypeAdapter) else TypeAdapter(schema)
        self._empty = empty
        self._lock = threading.Lock()
        self.loaded_from: Path | None = None
        """The file the last :meth:`load` read (the main file or the ``.bak``), None if neither existed."""

    @property
    def path(self) -> Path:
        return self._path

    @property
    def bak_path(self) -> Path:
        return self._path.with_name(self._path.name + BAK_SUFFIX)

    def load(self) -> T:
        """The stored value; ``empty()`` if neither the file nor its ``.bak`` exists.

        Raises :class:`ConfigFileError` if the file exists but cannot be used.
        """
        with self._lock:
            self._remove_leftover_temp_files()
            raw = self._read(self._path)
            if raw is not None:
                self.loaded_from = self._path
                return self._parse(self._path, raw, self._existing_bak())
            raw = self._read(self.bak_path)
            if raw is not None:
                log.warning(
                    "%s is missing but its backup %s exists (interrupted write or manual move?); "
                    "loading the backup, which may be one version old",
                    self._path,
                    self.bak_path,
                )
                self.loaded_from = self.bak_path
                return self._parse(self.bak_path, raw, None)
            self.loaded_from = None
            return self._empty()

    def persist(self, value: T) -> None:
        """Atomically replace the file with ``value``, keeping the previous version as ``.bak``.

        Raises :class:`ConfigPersistError` (retriable) if the disk refuses.
        """
        data = self._encode(value)
        with self._lock:
            try:
                self._write_atomically(data)
            except OSError as exc:
                raise ConfigPersistError(self._path, exc) from exc

    def error(self, problem: str) -> ConfigFileError:
        """A :class:`ConfigFileError` about the file last loaded (for checks beyond the schema)."""
        source = self.loaded_from or self._path
        return ConfigFileError(source, problem, self._existing_bak() if source == self._path else None)

    # -- reading

    def _read(self, path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigFileError(path, f"cannot read: {exc}", self._existing_bak()) from exc

    def _existing_bak(self) -> Path | None:
        return self.bak_path if self.bak_path.is_file() else None

    def _parse(self, path: Path, raw: bytes, backup: Path | None) -> T:
        try:
            document = json.loads(raw.decode("utf-8"), object_pairs_hook=_object_without_duplicates)
        except UnicodeDecodeError as exc:
            raise ConfigFileError(path, f"not UTF-8 text (byte {exc.start}: {exc.reason})", backup) from exc
        except json.JSONDecodeError as exc:
            raise ConfigFileError(path, f"line {exc.lineno} column {exc.colno}: {exc.msg}", backup) from exc
        except _DuplicateKeyError as exc:
            raise ConfigFileError(path, str(exc), backup) from exc
        try:
            return self._adapter.validate_python(document)
        except ValidationError as exc:
            raise ConfigFileError(path, _summarize(exc), backup) from exc

    def _remove_leftover_temp_files(self) -> None:
        for leftover in self._leftover_temp_files():
            log.warning("removing %s, left by an interrupted write of %s", leftover, self._path)
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()

    def _leftover_temp_files(self) -> builtins.list[Path]:
        prefix = f".{self._path.name}."
        try:
            entries = list(self._path.parent.iterdir())
        except FileNotFoundError:
            return []
        return [p for p in entries if p.name.startswith(prefix) and p.name.endswith(TMP_SUFFIX)]

    def decode(self, raw: bytes, source: str) -> T:
        """A document received from elsewhere (a master's copy), checked like the file would
        be; raises :class:`ConfigFileError` naming ``source``."""
        return self._parse(Path(source), raw, None)

    def encode(self, value: T) -> bytes:
        """The bytes :meth:`persist` would write for ``value``."""
        return self._encode(value)

    # -- writing

    def _encode(self, value: T) -> bytes:
        document = self._adapter.dump_python(value, mode="json", by_alias=True)
        return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")

    def _temp_path(self) -> Path:
        return self._path.with_name(f".{self._path.name}.{uuid.uuid4().hex}{TMP_SUFFIX}")

    def _write_atomically(self, data: bytes) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        temp = self._temp_path()
        try:
            _write_durably(temp, data, self.file_mode)
            self._keep_backup()
            os.replace(temp, self._path)
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            raise
        fsync_directory(self._path.parent)

    def _keep_backup(self) -> None:
        """Make ``.bak`` the current file's content; the main file stays in place throughout."""
        temp = self._temp_path()
        try:
            try:
                os.link(self._path, temp)
            except FileNotFoundError:
                return  # first write: nothing to keep
            except OSError:  # no hard links on this filesystem
                try:
                    _write_durably(temp, self._path.read_bytes(), self.file_mode)
                except FileNotFoundError:
                    return
            os.replace(temp, self.bak_path)
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            raise


class _DuplicateKeyError(ValueError):
    pass


def _object_without_duplicates(pairs: builtins.list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKeyError(f"duplicate key {key!r} in one JSON object")
        result[key] = value
    return result


def _summarize(exc: ValidationError) -> str:
    """``N schema violation(s): loc: msg (got input); ...``, short enough for one log line."""
    errors = exc.errors(include_url=False)
    shown = [
        f"{_location(e['loc'])}: {e['msg']} (got {_short(e.get('input'))})"
        for e in errors[:_MAX_ERRORS_SHOWN]
    ]
    more = len(errors) - len(shown)
    suffix = f"; and {more} more" if more else ""
    plural = "s" if len(errors) != 1 else ""
    return f"{len(errors)} schema violation{plural}: " + "; ".join(shown) + suffix


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "<document>"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_INPUT_SHOWN else text[: _MAX_INPUT_SHOWN - 3] + "..."


def _write_durably(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` (the umask may only narrow it: never a chmod after, when
    another process could already have opened it) and write ``data`` durably."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


# --------------------------------------------------------------------------------------- tables

F = TypeVar("F", bound=_VersionedFile)
C = TypeVar("C", TopicConfig, SubscriptionGroupConfig)


class _Table(ABC, Generic[F]):
    """Lock, data version, dirty tracking and persisting, shared by the typed tables.

    Subclasses keep their data in plain dicts guarded by ``self._lock``, call :meth:`_changed`
    (lock held) after each effective mutation, and convert to and from the file schema.
    """

    def __init__(self, store: JsonConfigStore[F], clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()
        document = store.load()
        self._restore(document)
        self._version = document.data_version
        # Loaded from the .bak: dirty, so the next persist writes the main file back.
        from_bak = store.loaded_from == store.bak_path
        self._persisted_counter: int | None = None if from_bak else self._version.counter

    @abstractmethod
    def _restore(self, document: F) -> None: ...

    @abstractmethod
    def _snapshot(self) -> F:
        """The whole table as its file schema (lock held); must copy the mutable parts."""

    @property
    def store(self) -> JsonConfigStore[F]:
        return self._store

    @property
    def data_version(self) -> DataVersion:
        with self._lock:
            return self._version

    @property
    def dirty(self) -> bool:
        """Whether something changed since the table was loaded or last persisted."""
        with self._lock:
            return self._version.counter != self._persisted_counter

    def persist(self, *, force: bool = False) -> bool:
        """Write a consistent snapshot if the table is dirty (or ``force``); return whether it wrote.

        Blocks on the disk. Concurrent calls are serialized, so an older snapshot never
        overwrites a newer one. Raises :class:`ConfigPersistError` (retriable) on I/O failure.
        """
        with self._persist_lock:
            with self._lock:
                if not force and self._version.counter == self._persisted_counter:
                    return False
                document = self._snapshot()
                counter = self._version.counter
            self._store.persist(document)
            with self._lock:
                self._persisted_counter = counter
            return True

    def _changed(self) -> None:
        self._version = self._version.next(self._clock.now_ms())

    def export_json(self) -> bytes:
        """The whole table as its file's JSON: what a master hands its slaves."""
        with self._lock:
            document = self._snapshot()
        return self._store.encode(document)

    def import_json(self, raw: bytes, source: str) -> bool:
        """Replace the table with a master's copy (a slave's config sync), keeping the master's
        data version; returns whether anything changed. The next :meth:`persist` writes it.

        Raises :class:`ConfigFileError` naming ``source`` when the document is not valid.
        """
        document = self._store.decode(raw, source)
        with self._lock:
            if document.data_version == self._version:
                return False
            self._restore(document)
            self._version = document.data_version
            return True


class _NamedConfigTable(_Table[F], Generic[F, C]):
    """A table of frozen configs keyed by their name: get / put / delete / contains / list."""

    _config_type: ClassVar[type[BaseModel]]

    def __init__(self, store: JsonConfigStore[F], clock: Clock) -> None:
        self._configs: dict[str, C] = {}
        super().__init__(store, clock)

    @staticmethod
    @abstractmethod
    def _name_of(config: C) -> str: ...

    def get(self, name: str) -> C | None:
        # No lock: one dict lookup is atomic, and every send looks its topic up here.
        return self._configs.get(name)

    def put(self, config: C) -> None:
        """Add or replace the config named ``config``'s name (a no-op if identical)."""
        if not isinstance(config, self._config_type):
            raise TypeError(f"expected a {self._config_type.__name__}, got {type(config).__name__}")
        name = self._name_of(config)
        with self._lock:
            if self._configs.get(name) != config:
                self._configs[name] = config
                self._changed()

    def delete(self, name: str) -> bool:
        """Remove the config named ``name``; return whether there was one."""
        with self._lock:
            if self._configs.pop(name, None) is None:
                return False
            self._changed()
            return True

    def contains(self, name: str) -> bool:
        with self._lock:
            return name in self._configs

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.contains(name)

    def __len__(self) -> int:
        with self._lock:
            return len(self._configs)

    def list(self) -> builtins.list[C]:
        """All configs, sorted by name."""
        with self._lock:
            return [self._configs[name] for name in sorted(self._configs)]


class TopicConfigTable(_NamedConfigTable[TopicConfigFile, TopicConfig]):
    """``topics.json``. Loads on construction (raises :class:`ConfigFileError` if corrupt)."""

    _config_type = TopicConfig

    def __init__(self, path: Path | str, *, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(JsonConfigStore(path, TopicConfigFile, TopicConfigFile), clock)

    @staticmethod
    def _name_of(config: TopicConfig) -> str:
        return config.topic_name

    def _restore(self, document: TopicConfigFile) -> None:
        self._configs = dict(document.topic_config_table)

    def _snapshot(self) -> TopicConfigFile:
        return TopicConfigFile.model_construct(
            topic_config_table=dict(self._configs), data_version=self._version
        )


class SubscriptionGroupTable(_NamedConfigTable[SubscriptionGroupFile, SubscriptionGroupConfig]):
    """``subscriptionGroup.json``. Loads on construction (raises :class:`ConfigFileError` if corrupt)."""

    _config_type = SubscriptionGroupConfig

    def __init__(self, path: Path | str, *, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(JsonConfigStore(path, SubscriptionGroupFile, SubscriptionGroupFile), clock)

    @staticmethod
    def _name_of(config: SubscriptionGroupConfig) -> str:
        return config.group_name

    def _restore(self, document: SubscriptionGroupFile) -> None:
        self._configs = dict(document.subscription_group_table)

    def _snapshot(self) -> SubscriptionGroupFile:
        return SubscriptionGroupFile.model_construct(
            subscription_group_table=dict(self._configs), data_version=self._version
        )


def _check_non_negative(what: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {value!r}")
    if value < 0:
        raise InvalidOffsetError(f"{what} must be >= 0, got {value}")
    return value


class ConsumerOffsetTable(_Table[ConsumerOffsetFile]):
    """``consumerOffset.json``: the next offset each group will consume, per topic and queue."""

    def __init__(self, path: Path | str, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._offsets: dict[str, dict[int, int]] = {}
        super().__init__(JsonConfigStore(path, ConsumerOffsetFile, ConsumerOffsetFile), clock)

    @staticmethod
    def key(group: str, topic: str) -> str:
        """``topic@group`` after validating both names (raises ``InvalidNameError``)."""
        return f"{validate_topic_name(topic)}@{validate_group_name(group)}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record that ``group`` will next consume ``offset`` in ``topic``'s queue ``queue_id``."""
        key = self.key(group, topic)
        _check_non_negative("queue id", queue_id)
        _check_non_negative("offset", offset)
        with self._lock:
            queues = self._offsets.setdefault(key, {})
            if queues.get(queue_id) != offset:
                queues[queue_id] = offset
                self._changed()

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 if ``group`` never committed one for that queue."""
        with self._lock:
            return self._offsets.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        """A copy of ``{queue id: offset}`` for ``group`` on ``topic`` (empty if unknown)."""
        with self._lock:
            return dict(self._offsets.get(f"{topic}@{group}", {}))

    def groups_of_topic(self, topic: str) -> set[str]:
        with self._lock:
            return {g for t, g in self._split_keys() if t == topic}

    def topics_of_group(self, group: str) -> set[str]:
        with self._lock:
            return {t for t, g in self._split_keys() if g == group}

    def remove_group(self, group: str) -> int:
        """Forget every offset of ``group``; return how many topics it had offsets on."""
        with self._lock:
            keys = [f"{t}@{g}" for t, g in self._split_keys() if g == group]
            for key in keys:
                del self._offsets[key]
            if keys:
                self._changed()
            return len(keys)

    def reset(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Replace all offsets of ``group`` on ``topic`` by ``offsets``; queues not listed become unknown."""
        key = self.key(group, topic)
        new = {
            _check_non_negative("queue id", q): _check_non_negative("offset", o) for q, o in offsets.items()
        }
        with self._lock:
            if self._offsets.get(key, {}) == new:
                return
            if new:
                self._offsets[key] = new
            else:
                self._offsets.pop(key, None)
            self._changed()

    def snapshot(self) -> dict[str, dict[int, int]]:
        """A deep copy of the whole table, keyed by ``topic@group``."""
        with self._lock:
            return {key: dict(queues) for key, queues in self._offsets.items()}

    def _split_keys(self) -> builtins.list[tuple[str, str]]:
        return [(t, g) for t, _, g in (key.partition("@") for key in self._offsets)]

    def _restore(self, document: ConsumerOffsetFile) -> None:
        self._offsets = {key: dict(queues) for key, queues in document.offset_table.items()}

    def _snapshot(self) -> ConsumerOffsetFile:
        offsets = {key: dict(queues) for key, queues in self._offsets.items()}
        return ConsumerOffsetFile.model_construct(offset_table=offsets, data_version=self._version)


class DelayOffsetTable(_Table[DelayOffsetFile]):
    """``delayOffset.json``: how far the scheduler got in each delay level's queue."""

    def __init__(
        self, path: Path | str, *, max_level: int = DEFAULT_DELAY_LEVELS, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        if max_level < 1:
            raise ValueError(f"max_level must be >= 1, got {max_level}")
        self._max_level = max_level
        self._offsets: dict[int, int] = {}
        super().__init__(JsonConfigStore(path, DelayOffsetFile, DelayOffsetFile), clock)

    @property
    def max_level(self) -> int:
        return self._max_level

    def get(self, level: int) -> int:
        """The offset reached in ``level``'s queue; 0 (its start) if never set."""
        self._check_level(level)
        with self._lock:
            return self._offsets.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        self._check_level(level)
        _check_non_negative("offset", offset)
        with self._lock:
            if self._offsets.get(level) != offset:
                self._offsets[level] = offset
                self._changed()

    def snapshot(self) -> dict[int, int]:
        with self._lock:
            return dict(self._offsets)

    def _check_level(self, level: int) -> None:
        if isinstance(level, bool) or not isinstance(level, int):
            raise TypeError(f"delay level must be an int, got {level!r}")
        if not 1 <= level <= self._max_level:
            raise InvalidOffsetError(f"delay level must be in 1..{self._max_level}, got {level}")

    def _restore(self, document: DelayOffsetFile) -> None:
        beyond = sorted(level for level in document.offset_table if level > self._max_level)
        if beyond:
            raise self._store.error(
                f"delay levels {beyond} are above the configured maximum {self._max_level}"
                " (was messageDelayLevel shortened?)"
            )
        self._offsets = dict(document.offset_table)

    def _snapshot(self) -> DelayOffsetFile:
        return DelayOffsetFile.model_construct(offset_table=dict(self._offsets), data_version=self._version)


# -------------------------------------------------------------------------------------- bundle


@dataclass(frozen=True)
class BrokerConfigTables:
    """The four tables of one broker, under ``<store root>/config``."""

    topics: TopicConfigTable
    subscription_groups: SubscriptionGroupTable
    consumer_offsets: ConsumerOffsetTable
    delay_offsets: DelayOffsetTable

    @classmethod
    def open(
        cls,
        store_root: Path | str,
        *,
        max_delay_level: int = DEFAULT_DELAY_LEVELS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> BrokerConfigTables:
        """Load all four tables; raises :class:`ConfigFileError` on the first corrupt one."""
        root = Path(store_root)
        return cls(
            topics=TopicConfigTable(root / TOPICS_FILE, clock=clock),
            subscription_groups=SubscriptionGroupTable(root / SUBSCRIPTION_GROUPS_FILE, clock=clock),
            consumer_offsets=ConsumerOffsetTable(root / CONSUMER_OFFSETS_FILE, clock=clock),
            delay_offsets=DelayOffsetTable(root / DELAY_OFFSETS_FILE, max_level=max_delay_level, clock=clock),
        )

    def persist_all(self, *, force: bool = False) -> None:
        """Persist every dirty table; try them all, then raise the first failure, if any."""
        first_failure: ConfigPersistError | None = None
        for field in fields(self):
            table: _Table[Any] = getattr(self, field.name)
            try:
                table.persist(force=force)
            except ConfigPersistError as exc:
                log.error("%s", exc)
                first_failure = first_failure or exc
        if first_failure is not None:
            raise first_failure
