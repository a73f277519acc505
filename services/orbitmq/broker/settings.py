"""Typed broker settings, loaded by :func:`orbitmq.common.settings.load_settings`."""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict, Field, field_validator

from orbitmq.common.guard import ServerAuth
from orbitmq.common.namesrv_list import parse_namesrv_list
from orbitmq.common.server import split_host_port
from orbitmq.common.tls import ServerTls
from orbitmq.common.topics import DELAY_LEVELS, parse_delay_levels
from orbitmq.store.config import GIB, MIB, BrokerRole, FlushMode, StoreConfig

ENV_PREFIX = "ORBITMQ_BROKER_"
MIN_POP_SNAPSHOT_INTERVAL_MS = 100
"""Floor of the POP snapshot interval: a test's retention of a few ms must not turn the snapshot
loop into a busy one (below 200 ms of retention the last snapshot may then go)."""


class BrokerSettings(ServerTls, ServerAuth):
    """TLS (``tls_cert``, ``tls_key``, ``tls_ca``, ``tls_require_client_cert``) comes from
    :class:`~orbitmq.common.tls.ServerTls`: off unless a certificate is given. The broker's
    calls to name servers and to its master use the same files (TLS when any is set). Auth
    (``auth_enabled``, the bootstrap super user its own calls are signed as) comes from
    :class:`~orbitmq.common.guard.ServerAuth`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    listen: str = "0.0.0.0:10911"
    """gRPC address for producers, consumers and admin (RocketMQ's listenPort 10911)."""
    metrics_listen: str | None = "0.0.0.0:10913"
    """Prometheus /metrics HTTP address; empty disables."""
    advertise_addr: str | None = None
    """Address registered with name servers; default: the bound address (127.0.0.1 for 0.0.0.0)."""
    store_host: str | None = None
    """``ip:port`` written into stored records and offset message ids (RocketMQ's storeHost, an
    IP address by format); default: ``advertise_addr``. Set when that is a DNS name (a
    Kubernetes broker under TLS advertises its pod's stable name, which its certificate holds)."""
    namesrv: str = ""
    """Name servers, ``host:port;host:port`` (``,`` works too; also ``ORBITMQ_NAMESRV``); empty:
    register nowhere."""
    cluster: str = "DefaultCluster"
    """Cluster this broker registers under with the name servers (RocketMQ's
    brokerClusterName): ``admin cluster list`` and ``admin topic create --cluster`` group brokers
    by it, and auth's ``Cluster:<name>`` resource names it. Every broker group of one cluster
    gives the same name; no topic may take it. The operator sets it to the resource's name."""
    broker_name: str = "broker-a"
    """Name of this broker group (RocketMQ's brokerName), unique within the cluster: a master
    and its slaves share it (told apart by ``broker_id``), routes list a topic's queues under it,
    and it is the ``broker`` label of the broker's metrics; no topic may take it."""
    broker_id: int = Field(default=0, ge=0)
    """0 = master, 1+ = slave of the same broker name."""
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    """RocketMQ's brokerRole. ``ASYNC_MASTER``: a send is answered once this broker holds it and
    slaves copy it afterwards, so a failover may lose the last acknowledged messages.
    ``SYNC_MASTER``: answered once a slave holds it too (``slave_ack_timeout_ms``, else
    FLUSH_SLAVE_TIMEOUT; SLAVE_NOT_AVAILABLE with no slave connected): nothing acknowledged is
    lost across a failover, at a replication round trip per send. ``SLAVE``: a read-only copy of
    its master (``broker_id`` ≥ 1). A role a failover recorded in ``data_dir``
    (``ha-role.json``) wins over this one at start."""
    data_dir: Path = Path("~/.orbitmq/broker-a").expanduser()
    """The store's directory (RocketMQ's storePathRootDir): commit log, consume queues, index,
    checkpoint, the config tables (topics, groups, consumer offsets) and the role a failover
    recorded. One broker per directory (its ``lock`` file refuses a second); put it on a volume
    that outlives the process, sized for ``file_reserved_time_ms`` of writes."""
    master_addr: str = ""
    """A slave's master; default: the master the name servers know for this broker name."""
    slave_ack_timeout_ms: int = Field(default=3_000, ge=1)
    """SYNC_MASTER: how long a send waits for a slave to hold it (then FLUSH_SLAVE_TIMEOUT)."""
    replica_config_interval_ms: int = Field(default=3_000, ge=10)
    """How often a slave copies topics, groups, consumer offsets and delay progress."""
    pull_from_slave_lag_bytes: int | None = Field(default=None, ge=0)
    """A master tells a reader this far behind its log end to read from a slave instead
    (default 40 % of RAM: beyond that the data is unlikely to be in the page cache)."""

    flush_mode: FlushMode = FlushMode.ASYNC_FLUSH
    """When a send is answered relative to the disk (RocketMQ's flushDiskType). ``ASYNC_FLUSH``:
    once written to the page cache, fsynced every 500 ms in the background: a killed broker
    loses nothing, a power loss or kernel crash up to the last half second. ``SYNC_FLUSH``: once
    an fsync covers it (group commit: one fsync for all waiting sends; FLUSH_DISK_TIMEOUT after
    5 s): nothing acknowledged is lost even then, but every send waits for an fsync. A
    SYNC_MASTER's slave copy already covers the loss of one machine."""
    segment_bytes: int = Field(default=1 * GIB, ge=64 * 1024)
    max_message_bytes: int = Field(default=4 * MIB, ge=1)
    """Largest message body a send may carry (RocketMQ's maxMessageSize, 4 MiB); a bigger one is
    refused with MESSAGE_ILLEGAL. At most 64 MiB (the largest gRPC message), and
    ``segment_bytes`` must hold a record this large. Raise it for bigger payloads, knowing a pull
    returns at least one whole message whatever its size."""
    consume_queue_units_per_file: int = Field(default=300_000, ge=1)
    """Units (20 bytes, one per message) in each consume-queue file: 6 MB files by default, as
    RocketMQ's mappedFileSizeConsumeQueue. Each queue that holds a message allocates a whole
    file on disk, so a broker with many thousands of mostly idle queues may want smaller ones.
    Keep it once a store has queues: files of another size are refused at start."""
    index_slot_count: int = Field(default=5_000_000, ge=1)
    """Hash slots (4 bytes each) of each index file that finds messages by key or message id
    (RocketMQ's maxHashSlotNum): more slots, shorter chains to walk per lookup. With
    ``index_max_entries`` it fixes the file size: 40 bytes, then 4 a slot and 20 an entry (420 MB
    by default, its blocks allocated as entries arrive); an existing store's index files must
    have that size, or the broker does not start."""
    index_max_entries: int = Field(default=20_000_000, ge=1)
    """Entries (20 bytes each) of each index file before a new one starts (RocketMQ's
    maxIndexNum): one per message for its unique key, plus one per business key. With
    ``index_slot_count`` it fixes the index file size (see there); smaller files suit a small
    or test broker, at more files to search for a key over a long time range."""
    file_reserved_time_ms: int = Field(default=72 * 3_600_000, ge=1)
    """Retention: a commit-log segment whose messages are all older than this is deleted, read or
    not, with the consume-queue and index entries behind it (RocketMQ's fileReservedTime, 72 h,
    given there in hours). It bounds how far back a group can reset its offsets and caps
    ``timer_max_delay_ms``; size it from the disk and the write rate (past the disk ratios
    below, segments go sooner)."""
    clean_interval_ms: int = Field(default=10_000, ge=1)
    """How often retention looks for segments to delete (RocketMQ's cleanResourceInterval)."""
    disk_max_used_space_ratio: float = Field(default=0.75, gt=0, le=1)
    """Disk used past this: retention runs every disk check, not every ``clean_interval_ms``
    (RocketMQ's diskMaxUsedSpaceRatio)."""
    disk_space_clean_forcibly_ratio: float = Field(default=0.85, gt=0, le=1)
    """Disk used past this: the oldest segments are deleted before their retention time
    (RocketMQ's diskSpaceCleanForciblyRatio)."""
    disk_space_warning_level_ratio: float = Field(default=0.90, gt=0, le=1)
    """Disk used past this: sends are refused with DISK_FULL until it is below again; reads,
    acks and offset commits go on (RocketMQ's diskSpaceWarningLevelRatio)."""
    disk_check_interval_ms: int = Field(default=1_000, ge=1)
    """How often the store's disk usage is read."""

    auto_create_topic: bool = True
    """Create a topic on its first send, with ``default_topic_queue_nums`` queues (or the queue
    count the producer asks for), under the same name rules as ``admin topic create``. RocketMQ's
    ``autoCreateTopicEnable``, and on by default as in RocketMQ's broker, so a plain
    ``orbitmq broker`` (and ``orbitmq local up``) behaves as RocketMQ users expect and the
    README's first ``produce`` works without a ``topic create``. Off, a send to a missing topic
    fails with ``TOPIC_NOT_EXIST`` naming it: what production wants (a misspelt topic is an
    error, not a new topic), hence off in the operator's brokers and the chart
    (``spec.brokers.autoCreateTopic``)."""
    default_topic_queue_nums: int = Field(default=4, ge=1, le=1024)
    """Queues of a topic created without a count (RocketMQ's defaultTopicQueueNums): one
    ``auto_create_topic`` makes for a producer that asks for none (an orbitmq producer asks for
    its own ``default_topic_queue_nums``, 4), or ``admin topic create`` without queue counts.
    A topic's queues bound how many members of a group consume it in parallel."""
    auto_create_subscription_group: bool = True
    """Create a consumer group the broker does not know, with default settings, at its first
    heartbeat or offset commit (RocketMQ's autoCreateSubscriptionGroup), so consumers work
    without ``admin group create``. Off, such a group is refused with
    SUBSCRIPTION_GROUP_NOT_EXIST: groups are created first (``admin group create``, an
    OrbitMQConsumerGroup), and a misspelt group name is an error, not a new group."""

    register_interval_ms: int = Field(default=30_000, ge=100)
    """How often the broker registers with (heartbeats to) every name server."""
    heartbeat_timeout_ms: int = Field(default=120_000, ge=100)
    """Name servers drop the broker after this long without a registration."""
    long_polling_enable: bool = True
    """Hold a pull that finds nothing new until a message arrives (the dispatcher wakes it at
    once) or the client's suspend timeout, at most ``max_suspend_ms``, passes (RocketMQ's
    longPollingEnable). Off, it waits ``short_polling_ms`` and answers empty: new messages
    reach consumers up to that much later, at more pulls. A held pull costs a waiting future,
    not a thread, so there is little reason to turn it off."""
    short_polling_ms: int = Field(default=1_000, ge=0)
    """Without long polling, how long a pull that finds nothing waits before answering."""
    max_suspend_ms: int = Field(default=30_000, ge=0)
    """Upper bound on a client's suspend timeout."""
    lock_expiry_ms: int = Field(default=60_000, ge=1)
    """A queue lock not renewed for this long is free (clients renew every 20 s)."""
    channel_expiry_ms: int = Field(default=120_000, ge=1)
    """A client silent for this long leaves its groups."""
    scan_interval_ms: int = Field(default=10_000, ge=10)
    """How often expired channels and locks are swept."""
    transaction_timeout_ms: int = Field(default=6_000, ge=1)
    """How old a half (prepared) message must be before the broker asks its producer group how
    the transaction ended (RocketMQ's transactionTimeOut, 6 s). Raise it above the longest
    local transaction, or check-backs ask about transactions still running (answered UNKNOWN,
    each one using up a check of ``transaction_check_max``). The first check comes at the next
    check pass past this age: up to ``transaction_check_interval_ms`` later."""
    transaction_check_max: int = Field(default=15, ge=1)
    """Check-backs of a transaction still unresolved (answered UNKNOWN, or no producer of its
    group connected) before its half message is discarded with a warning and never delivered
    (RocketMQ's transactionCheckMax, 15). Each check appends a copy of the half message to the
    commit log. With ``transaction_check_interval_ms`` it sets how long a producer may be away
    and still end its transactions (15 checks a minute apart by default)."""
    transaction_check_interval_ms: int = Field(default=60_000, ge=10)
    """How often the broker scans half messages for transactions to check back (RocketMQ's
    transactionCheckInterval); a transaction is checked at most once a pass. The broker keeps
    the ids of ended transactions until a pass has gone past them, about one interval: their
    memory is about the interval times the transaction rate (``orbitmq_server_table_entries``
    of table ``broker_resolved_transactions``). Shorten it for high transaction rates or quicker
    check-backs, at more frequent scans."""
    delay_levels: str = DELAY_LEVELS
    """Durations of delay levels 1..N (RocketMQ's messageDelayLevel); retries use level 3 + times."""
    schedule_tick_ms: int = Field(default=100, ge=1)
    """How often due delayed messages are moved to their real topic."""
    timer_max_delay_ms: int = Field(default=3 * 86_400_000, ge=1)
    """The furthest ahead a timed message may ask to be delivered (RocketMQ's timerMaxDelaySec,
    3 days); further is refused. Pending timers cost memory and a longer restart scan."""
    timer_precision_ms: int = Field(default=100, ge=1)
    """The timer loop sleeps until the next due time, an arriving timer, or this long at most."""
    pop_snapshot_interval_ms: int = Field(default=600_000, ge=MIN_POP_SNAPSHOT_INTERVAL_MS)
    """The longest time between snapshots of the POP state in ``RMQ_SYS_POP_LOG``, written also
    when idle while any POP group has state. Retention deletes old commit-log segments whatever
    they hold; a replay needs its last snapshot, so the interval used is at most half of
    ``file_reserved_time_ms`` (see :attr:`pop_snapshot_limit_ms`). 10 min bounds a restart's
    replay to that much POP traffic (or 10 000 records) at the cost of one snapshot record."""
    config_persist_interval_ms: int = Field(default=5_000, ge=10)
    """How often the config tables' background changes are written: consumer offsets committed
    by pulls and commits, delay and transaction-check progress (RocketMQ's
    flushConsumerOffsetInterval, 5 s); also when a refused write is retried. Topic and group
    changes and offset resets are written before they are answered; a crash loses up to this
    much consumer progress, whose messages are delivered again."""
    grace_ms: int = Field(default=5_000, ge=0)
    """On SIGTERM, once health says NOT_SERVING, held pulls are answered and the broker has
    unregistered from the name servers: how long calls in flight may finish before the store
    is flushed and closed (the operator gives a broker pod this plus 55 s to stop). Raise it if
    sends waiting for a slow disk or slave should finish rather than be cut."""

    @field_validator("listen", "advertise_addr", "master_addr", "store_host")
    @classmethod
    def _check_address(cls, value: str | None) -> str | None:
        if value:
            split_host_port(value)
        return value

    @field_validator("metrics_listen")
    @classmethod
    def _check_metrics(cls, value: str | None) -> str | None:
        if value:
            split_host_port(value)
        return value or None

    @field_validator("delay_levels")
    @classmethod
    def _check_delay_levels(cls, value: str) -> str:
        parse_delay_levels(value)
        return value

    @field_validator("namesrv")
    @classmethod
    def _check_namesrv(cls, value: str) -> str:
        parse_namesrv_list(value, required=False)
        return value

    @field_validator("cluster", "broker_name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not value or not value.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"{value!r} must be letters, digits, '-' or '_' and not empty")
        return value

    @property
    def timer_limit_ms(self) -> int:
        """The longest wait a timed message may ask for: ``timer_max_delay_ms``, but never more
        than ``file_reserved_time_ms`` (retention deletes a commit-log segment older than that
        whatever still points into it, so a longer timer would find its message gone)."""
        return min(self.timer_max_delay_ms, self.file_reserved_time_ms)

    @property
    def pop_snapshot_limit_ms(self) -> int:
        """The POP snapshot interval in use: ``pop_snapshot_interval_ms``, but at most half of
        ``file_reserved_time_ms``, so the last snapshot is always newer than anything retention
        deletes (a segment goes only once the segment after it is older than the retention)."""
        return max(
            MIN_POP_SNAPSHOT_INTERVAL_MS, min(self.pop_snapshot_interval_ms, self.file_reserved_time_ms // 2)
        )

    @property
    def namesrv_addrs(self) -> list[str]:
        return parse_namesrv_list(self.namesrv, required=False)

    @property
    def is_slave(self) -> bool:
        return self.broker_role is BrokerRole.SLAVE

    def store_config(self, store_host: str) -> StoreConfig:
        return StoreConfig(
            data_dir=self.data_dir.expanduser(),
            store_host=store_host,
            broker_role=self.broker_role,
            flush_mode=self.flush_mode,
            segment_bytes=self.segment_bytes,
            max_message_bytes=self.max_message_bytes,
            consume_queue_units_per_file=self.consume_queue_units_per_file,
            index_slot_count=self.index_slot_count,
            index_max_entries=self.index_max_entries,
            file_reserved_time_ms=self.file_reserved_time_ms,
            clean_interval_ms=self.clean_interval_ms,
            disk_max_used_space_ratio=self.disk_max_used_space_ratio,
            disk_space_clean_forcibly_ratio=self.disk_space_clean_forcibly_ratio,
            disk_space_warning_level_ratio=self.disk_space_warning_level_ratio,
            disk_check_interval_ms=self.disk_check_interval_ms,
            delay_levels=self.delay_levels,
            pull_from_slave_lag_bytes=self.pull_from_slave_lag_bytes,
        )
