"""System topics, message property names and delay levels shared by the store, broker and clients."""

from __future__ import annotations

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
"""Delayed messages wait here (queue = delay level - 1) until they are due."""
TIMER_TOPIC = "rmq_sys_wheel_timer"
"""Timed messages (a delivery time, not a level) wait here, queue 0, until they are due."""
TIMER_LOG_TOPIC = "rmq_sys_timer_log"
"""What the timer delivered (done records and checkpoints), replicated with the commit log."""
DUE_TIME_TOPICS = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC})
"""Topics whose consume-queue units carry the time a message is due instead of a tag hash."""
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"


class Property:
    """Names of the message properties the system itself reads (RocketMQ's spelling)."""

    TAGS = "TAGS"
    KEYS = "KEYS"
    UNIQ_KEY = "UNIQ_KEY"
    DELAY = "DELAY"
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    """Deliver at this epoch millisecond (RocketMQ 5's timer); the broker keeps it on delivery."""
    TIMER_DELAY_MS = "TIMER_DELAY_MS"
    """Deliver this many milliseconds after the broker stores it (turned into TIMER_DELIVER_MS)."""
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    """As TIMER_DELAY_MS, in seconds."""
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    RETRY_TOPIC = "RETRY_TOPIC"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    WAIT_STORE_MSG_OK = "WAIT"


KEY_SEPARATOR = " "
"""Several business keys in the ``KEYS`` property are separated by spaces."""


def split_keys(raw: str | None) -> tuple[str, ...]:
    """The business keys of a ``KEYS`` property value (empty pieces dropped)."""
    return tuple(k for k in raw.split(KEY_SEPARATOR) if k) if raw else ()


DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
"""RocketMQ's default ``messageDelayLevel``; level N (1-based) waits the Nth duration."""

_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(spec: str = DELAY_LEVELS) -> tuple[int, ...]:
    """Turn ``"1s 5s 1m"`` into milliseconds per level; a bad token names itself."""
    levels: list[int] = []
    for token in spec.split():
        unit = "ms" if token.endswith("ms") else token[-1:]
        number = token[: -len(unit)]
        if unit not in _UNIT_MS or not number.isdigit() or int(number) <= 0:
            raise ValueError(
                f"delay level {token!r} must be a positive whole number followed by one of ms, s, m, h, d"
            )
        levels.append(int(number) * _UNIT_MS[unit])
    if not levels:
        raise ValueError("delay levels must name at least one duration")
    return tuple(levels)


DELAY_LEVELS_MS = parse_delay_levels()
