"""The data source's options, parsed and checked once on the driver (no Spark; the only I/O is
reading the TLS files named, so a missing or mismatched one fails before any task starts).

Spark hands a Python data source its options as a case-insensitive dict of strings. Everything
a task needs is parsed here into frozen dataclasses that pickle to the executors, so a typo or
a malformed value fails ``load()`` / ``save()`` with one message naming the option and its
rule, before any task starts. Spelling follows Spark's Kafka source where the meaning is the
same (``startingOffsets``, ``endingOffsets``, ``maxOffsetsPerTrigger``, ``failOnDataLoss``,
``minPartitions``).

Per-queue offsets, in options and in the streaming checkpoint alike, are JSON of the form
``{"TopicA": {"broker-a:0": 12, "broker-b:3": -2}}``: topic, then ``<broker name>:<queue id>``,
then the queue offset of the next message to read. In options ``-2`` means the queue's earliest
offset and ``-1`` its latest (Kafka's convention); queues left out of the JSON take the
option's default (``earliest`` for a start, ``latest`` for an end).

Security, for reads and writes alike: ``tls.ca``, ``tls.cert``, ``tls.key``, ``tls.serverName``
(PEM paths readable on the driver and every executor, as a mounted Secret is) and ``accessKey``
/ ``secretKey`` (Spark's default ``spark.redaction.regex`` hides both in plans and the UI).
Options left out fall back to what the client library reads on each executor
(``ORBITMQ_TLS_*``, ``ORBITMQ_ACCESS_KEY``/``ORBITMQ_SECRET_KEY``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

from orbitmq.common.credentials import Credentials, CredentialsError, credentials_of
from orbitmq.common.names import validate_group_name, validate_topic_name
from orbitmq.common.namesrv_list import NAMESRV_ENV, NamesrvListError, parse_namesrv_list
from orbitmq.common.tls import ClientTls, TlsConfigError, client_tls

EARLIEST = -2
LATEST = -1
DEFAULT_READER_GROUP = "spark-orbitmq-reader"
"""The consumer group named in pulls when no ``group`` option is given. The pulls commit nothing,
so no broker records the group: a read leaves no subscription group behind."""
DEFAULT_PRODUCER_GROUP = "spark-orbitmq-writer"
MAX_PULL_BATCH = 1024
"""The broker's cap on messages per pull."""

# Options Spark itself may add to a data source's options: ignored, never an error.
_SPARK_OPTIONS = frozenset({"path", "checkpointlocation"})


class OptionError(ValueError):
    """An option of the ``orbitmq`` data source is missing, unknown or malformed."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"orbitmq option {option!r}: {message}")
        self.option = option


class OffsetKind(Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"
    PER_QUEUE = "per-queue"
    GROUP = "group"
    """The group's committed offset (start only; queues it never committed use ``fallback``)."""


QueueKey = tuple[str, str, int]
"""(topic, broker name, queue id): the identity of a queue in offsets and partitions."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends in every queue of the topics."""

    kind: OffsetKind
    timestamp_ms: int = 0
    per_queue: Mapping[QueueKey, int] = field(default_factory=dict)
    """PER_QUEUE: offsets (or EARLIEST / LATEST) of the queues named."""
    fallback: OffsetKind = OffsetKind.EARLIEST
    """PER_QUEUE and GROUP: what queues not named (or never committed) use."""


@dataclass(frozen=True)
class Access:
    """How the clients of a read or write reach the cluster; None fields: the client library's
    environment (``ORBITMQ_TLS_*``, ``ORBITMQ_ACCESS_KEY``) on the process that connects."""

    tls: ClientTls | None = None
    credentials: Credentials | None = None


@dataclass(frozen=True)
class ReadOptions:
    namesrv: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    group: str | None
    expression: str = "*"
    sql: bool = False
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    pull_batch_size: int = MAX_PULL_BATCH
    """Messages asked for per pull: the broker's cap, which it lowers by bytes itself."""
    access: Access = field(default_factory=Access)

    @property
    def pull_group(self) -> str:
        return self.group or DEFAULT_READER_GROUP


@dataclass(frozen=True)
class WriteOptions:
    namesrv: str
    topic: str
    producer_group: str = DEFAULT_PRODUCER_GROUP
    batch_size: int = 128
    batch_bytes: int = 1024 * 1024
    access: Access = field(default_factory=Access)


ACCESS_OPTIONS = frozenset({"tls.ca", "tls.cert", "tls.key", "tls.servername", "accesskey", "secretkey"})
_TLS_OPTIONS = {
    "tls_ca": "tls.ca",
    "tls_cert": "tls.cert",
    "tls_key": "tls.key",
    "tls_server_name": "tls.serverName",
}
"""ClientTls fields by the option that sets each (an error names the option)."""

READ_OPTIONS = ACCESS_OPTIONS | frozenset(
    {
        "namesrv",
        "topic",
        "startingoffsets",
        "endingoffsets",
        "group",
        "tags",
        "sql",
        "failondataloss",
        "maxoffsetspertrigger",
        "minpartitions",
        "pullbatchsize",
    }
)
WRITE_OPTIONS = ACCESS_OPTIONS | frozenset({"namesrv", "topic", "producergroup", "batchsize", "batchbytes"})
_SPELLING = {
    "startingoffsets": "startingOffsets",
    "endingoffsets": "endingOffsets",
    "failondataloss": "failOnDataLoss",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "minpartitions": "minPartitions",
    "pullbatchsize": "pullBatchSize",
    "producergroup": "producerGroup",
    "batchsize": "batchSize",
    "batchbytes": "batchBytes",
    "tls.servername": "tls.serverName",
    "accesskey": "accessKey",
    "secretkey": "secretKey",
}


def _spelled(names: frozenset[str]) -> str:
    return ", ".join(sorted(_SPELLING.get(n, n) for n in names))


def _check_known(options: Mapping[str, str], allowed: frozenset[str], what: str) -> dict[str, str]:
    lowered = {k.lower(): v for k, v in options.items()}
    unknown = sorted(k for k in lowered if k not in allowed and k not in _SPARK_OPTIONS)
    if unknown:
        raise OptionError(unknown[0], f"is not an option of {what}; known options: {_spelled(allowed)}")
    return lowered


def _namesrv(options: Mapping[str, str]) -> str:
    value = (options.get("namesrv") or os.environ.get(NAMESRV_ENV, "")).strip()
    if not value:
        raise OptionError(
            "namesrv", f"is required: name servers as 'host:port;host:port' (or set {NAMESRV_ENV})"
        )
    try:
        return ";".join(parse_namesrv_list(value))
    except NamesrvListError as error:
        raise OptionError("namesrv", str(error)) from None


def _access(options: Mapping[str, str]) -> Access:
    """The TLS and credential options, checked: readable PEM files of the right kind, a key
    that matches its certificate, both keys of a pair or neither."""
    given = {
        field: options[name.lower()] for field, name in _TLS_OPTIONS.items() if options.get(name.lower())
    }
    tls = None
    if given:
        try:
            tls = client_tls(given, _TLS_OPTIONS)
        except TlsConfigError as error:
            first = next(iter(_TLS_OPTIONS.values()))
            named = next((n for n in _TLS_OPTIONS.values() if f"{n}:" in str(error)), first)
            raise OptionError(named, str(error).removeprefix("invalid TLS settings: ")) from None
    try:
        credentials = credentials_of(
            options.get("accesskey"), options.get("secretkey"), "accessKey", "secretKey"
        )
    except CredentialsError as error:
        raise OptionError("secretKey" if options.get("accesskey") else "accessKey", str(error)) from None
    return Access(tls, credentials)


def _topics(value: str | None, *, single: bool) -> tuple[str, ...]:
    names = [t.strip() for t in (value or "").split(",") if t.strip()]
    if not names:
        raise OptionError(
            "topic", "is required: " + ("a topic name" if single else "one or more topics, comma-separated")
        )
    if single and len(names) > 1:
        raise OptionError("topic", f"{value!r} must name one topic to write to")
    for name in names:
        try:
            validate_topic_name(name)
        except ValueError as error:
            raise OptionError("topic", str(error)) from None
    if len(set(names)) != len(names):
        raise OptionError("topic", f"{value!r} names a topic twice")
    return tuple(names)


def _positive_int(
    options: Mapping[str, str], name: str, default: int | None, top: int | None = None
) -> int | None:
    raw = options.get(name)
    if raw is None:
        return default
    rule = f"must be a whole number between 1 and {top}" if top else "must be a whole number of 1 or more"
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(_SPELLING.get(name, name), f"{raw!r} {rule}") from None
    if value < 1 or (top is not None and value > top):
        raise OptionError(_SPELLING.get(name, name), f"{raw!r} {rule}")
    return value


def _boolean(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise OptionError(_SPELLING.get(name, name), f"{raw!r} must be true or false")
    return raw.strip().lower() == "true"


def parse_timestamp(option: str, text: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 time (UTC unless it names a zone)."""
    rule = (
        "timestamp must be milliseconds since the epoch (0 or more) "
        "or an ISO-8601 time such as 2026-11-21T10:00:00Z"
    )
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise OptionError(option, f"{text!r}: {rule}") from None
    if moment.tzinfo is None:
        from datetime import UTC

        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def queue_key_text(broker: str, queue_id: int) -> str:
    return f"{broker}:{queue_id}"


def parse_queue_key(option: str, topic: str, text: str) -> QueueKey:
    broker, sep, queue = text.rpartition(":")
    if not sep or not broker or not queue.isdigit():
        raise OptionError(
            option, f"queue {text!r} of topic {topic!r} must be written '<broker name>:<queue id>'"
        )
    return (topic, broker, int(queue))


def parse_per_queue(option: str, text: str, topics: tuple[str, ...] | None) -> dict[QueueKey, int]:
    """``{"T": {"broker-a:0": 12}}`` into {(topic, broker, queue): offset}; ``topics`` limits the
    topic names allowed (None: any, as in a checkpoint)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise OptionError(
            option,
            f"is not valid JSON ({error.msg} at char {error.pos}); "
            'expected {"<topic>": {"<broker name>:<queue id>": <offset>}}',
        ) from None
    if not isinstance(document, dict) or not document:
        raise OptionError(option, 'must be a JSON object {"<topic>": {"<broker name>:<queue id>": <offset>}}')
    offsets: dict[QueueKey, int] = {}
    for topic, queues in document.items():
        if topics is not None and topic not in topics:
            raise OptionError(option, f"names topic {topic!r}, which is not in option 'topic' {list(topics)}")
        if not isinstance(queues, dict):
            raise OptionError(
                option, f"topic {topic!r} must map to an object of '<broker name>:<queue id>': offset"
            )
        for key, offset in queues.items():
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise OptionError(
                    option,
                    f"offset {offset!r} of {topic} {key} must be a queue offset >= 0, "
                    "-2 (earliest) or -1 (latest)",
                )
            offsets[parse_queue_key(option, topic, key)] = offset
    return offsets


def _offset_spec(option: str, raw: str | None, default: OffsetKind, topics: tuple[str, ...]) -> OffsetSpec:
    if raw is None or not raw.strip():
        return OffsetSpec(default)
    text = raw.strip()
    lowered = text.lower()
    if lowered in ("earliest", "latest"):
        return OffsetSpec(OffsetKind(lowered))
    if lowered.startswith("timestamp:"):
        return OffsetSpec(OffsetKind.TIMESTAMP, timestamp_ms=parse_timestamp(option, text.split(":", 1)[1]))
    if text.startswith("{"):
        return OffsetSpec(
            OffsetKind.PER_QUEUE, per_queue=parse_per_queue(option, text, topics), fallback=default
        )
    raise OptionError(
        option,
        f"{raw!r} must be earliest, latest, timestamp:<ms or ISO-8601>, or per-queue JSON "
        '{"<topic>": {"<broker name>:<queue id>": <offset>}}',
    )


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check every read option; raises :class:`OptionError` naming the first bad one."""
    opts = _check_known(options, READ_OPTIONS, "the orbitmq reader")
    topics = _topics(opts.get("topic"), single=False)
    starting = _offset_spec(
        "startingOffsets",
        opts.get("startingoffsets"),
        OffsetKind.LATEST if streaming else OffsetKind.EARLIEST,
        topics,
    )
    ending = _offset_spec("endingOffsets", opts.get("endingoffsets"), OffsetKind.LATEST, topics)
    group = opts.get("group")
    if group is not None:
        try:
            group = validate_group_name(group.strip())
        except ValueError as error:
            raise OptionError("group", str(error)) from None
        if starting.kind is OffsetKind.PER_QUEUE:
            raise OptionError(
                "group",
                "starts at the group's committed offsets; give it or per-queue "
                "startingOffsets JSON, not both",
            )
        # Queues the group never committed start where startingOffsets says.
        starting = OffsetSpec(OffsetKind.GROUP, timestamp_ms=starting.timestamp_ms, fallback=starting.kind)
    _check_batch_bounds(starting, ending, streaming)
    if streaming and opts.get("endingoffsets") is not None:
        raise OptionError("endingOffsets", "applies to batch reads only; a stream has no end")
    max_per_trigger = _positive_int(opts, "maxoffsetspertrigger", None)
    if max_per_trigger is not None and not streaming:
        raise OptionError(
            "maxOffsetsPerTrigger", "applies to readStream only; limit a batch read with endingOffsets"
        )
    tags, sql = opts.get("tags"), opts.get("sql")
    if tags is not None and sql is not None:
        raise OptionError("sql", "give either a tag expression (tags) or a SQL92 filter (sql), not both")
    expression, is_sql = ("*", False)
    if sql is not None:
        expression, is_sql = _check_sql(sql), True
    elif tags is not None:
        expression = _check_tags(tags)
    return ReadOptions(
        namesrv=_namesrv(opts),
        topics=topics,
        starting=starting,
        ending=ending,
        group=group,
        expression=expression,
        sql=is_sql,
        fail_on_data_loss=_boolean(opts, "failondataloss", True),
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=_positive_int(opts, "minpartitions", None),
        pull_batch_size=_positive_int(opts, "pullbatchsize", MAX_PULL_BATCH, MAX_PULL_BATCH)
        or MAX_PULL_BATCH,
        access=_access(opts),
    )


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec, streaming: bool) -> None:
    """Kafka's rules: a batch read cannot start at latest or end at earliest (it would read
    nothing, which is almost always a mistake), and explicit bounds must not be reversed."""
    if streaming:
        return
    if starting.kind is OffsetKind.LATEST or (
        starting.kind is OffsetKind.GROUP and starting.fallback is OffsetKind.LATEST
    ):
        raise OptionError(
            "startingOffsets",
            "latest is not allowed for a batch read (it would read nothing); "
            "use earliest, a timestamp, per-queue JSON or group",
        )
    if ending.kind is OffsetKind.EARLIEST:
        raise OptionError("endingOffsets", "earliest is not allowed for a batch read (it would read nothing)")
    if any(v == EARLIEST for v in ending.per_queue.values()):
        raise OptionError("endingOffsets", "-2 (earliest) is not allowed as an ending offset")
    if any(v == LATEST for v in starting.per_queue.values()):
        raise OptionError("startingOffsets", "-1 (latest) is not allowed as a batch read's starting offset")
    both_times = starting.kind is OffsetKind.TIMESTAMP and ending.kind is OffsetKind.TIMESTAMP
    if both_times and ending.timestamp_ms < starting.timestamp_ms:
        raise OptionError(
            "endingOffsets",
            f"timestamp {ending.timestamp_ms} is before startingOffsets' "
            f"timestamp {starting.timestamp_ms}; the end must not precede the start",
        )
    for key, end in ending.per_queue.items():
        start = starting.per_queue.get(key)
        if start is not None and start >= 0 and 0 <= end < start:
            raise OptionError(
                "endingOffsets",
                f"offset {end} of {key[0]} {queue_key_text(key[1], key[2])} is "
                f"before its starting offset {start}; the end must not precede the start",
            )


def _check_sql(text: str) -> str:
    from orbitmq.filter.sql92 import validate_sql92

    try:
        validate_sql92(text)
    except ValueError as error:
        raise OptionError("sql", f"{text!r} is not a valid SQL92 filter: {error}") from None
    return text


def _check_tags(text: str) -> str:
    from orbitmq.store.message_filter import TagFilter

    try:
        TagFilter(text)
    except ValueError as error:
        raise OptionError("tags", f"{text!r} is not a valid tag expression: {error}") from None
    return text


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = _check_known(options, WRITE_OPTIONS, "the orbitmq writer")
    group = opts.get("producergroup", DEFAULT_PRODUCER_GROUP).strip()
    try:
        validate_group_name(group)
    except ValueError as error:
        raise OptionError("producerGroup", str(error)) from None
    return WriteOptions(
        namesrv=_namesrv(opts),
        topic=_topics(opts.get("topic"), single=True)[0],
        producer_group=group,
        batch_size=_positive_int(opts, "batchsize", 128, MAX_PULL_BATCH) or 128,
        batch_bytes=_positive_int(opts, "batchbytes", 1024 * 1024, 32 * 1024 * 1024) or 1024 * 1024,
        access=_access(opts),
    )
