"""``orbitmq produce``: send messages from the command line.

Each send rides out a broker failover within ``--send-timeout-ms`` (the library producer's retry
policy, :mod:`orbitmq.client.retry`). The output is one line per acknowledged send (one JSON
object with ``--json``) and a summary at the end: count, rate, failures. A send that fails for
good stops the run with one line on standard error naming the topic, the broker and the reason,
and a non-zero exit code. On a terminal a progress bar is drawn on standard error.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import click
import grpc

from orbitmq.cli.common import namesrv_option
from orbitmq.cli.progress import progress, wanted
from orbitmq.client.admin import Admin
from orbitmq.client.message import Message, SendResult
from orbitmq.client.producer import Producer
from orbitmq.common.errors import OrbitError
from orbitmq.common.properties import SystemPropertyError, check_user_properties

PROGRAM = "orbitmq produce"


@dataclass
class Tally:
    """What a run did, for its summary."""

    total: int
    started: float = field(default_factory=time.monotonic)
    sent: int = 0
    failed: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    topic_created: bool = False
    """The topic did not exist when the run started and its first send created it."""

    def add(self, result: SendResult, count: int) -> None:
        self.sent += count
        self.statuses[result.status.value] += count

    error: str | None = None
    """Why the run stopped early (the send failure), None when every message was sent."""

    def summary(self) -> dict[str, object]:
        seconds = time.monotonic() - self.started
        return {
            "sent": self.sent,
            "failed": self.failed,
            "not_sent": self.total - self.sent - self.failed,
            "seconds": round(seconds, 3),
            "rate_per_s": round(self.sent / seconds, 1) if seconds > 0 else 0.0,
            "statuses": dict(self.statuses),
            "topic_created": self.topic_created,
            "error": self.error,
        }

    def summary_line(self) -> str:
        s = self.summary()
        line = (
            f"sent {s['sent']} of {self.total} message(s) in {s['seconds']:.2f} s "
            f"({s['rate_per_s']:.0f} msg/s), {s['failed']} failed"
        )
        others = {k: v for k, v in self.statuses.items() if k != "SEND_OK"}
        if others:  # stored, but not (yet) on a slave: worth knowing
            line += "; " + ", ".join(f"{v} {k}" for k, v in sorted(others.items()))
        return line


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class Duration(click.ParamType):
    """``--delay``: a number and a unit (ms, s, m, h, d), as milliseconds."""

    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        match = _DURATION.match(str(value).strip())
        if match is None:
            self.fail(
                f"{value!r} is not a duration: a number followed by ms, s, m, h or d (3.7s, 10m)", param, ctx
            )
        return round(float(match.group(1)) * _UNIT_MS[match.group(2)])


class Instant(click.ParamType):
    """``--deliver-at``: epoch milliseconds or an ISO 8601 time (UTC without an offset)."""

    name = "time"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if text.isdigit():
            return int(text)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            self.fail(f"{text!r} is neither epoch milliseconds nor an ISO 8601 time", param, ctx)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return round(moment.timestamp() * 1000)


def parse_properties(values: tuple[str, ...]) -> dict[str, str]:
    """``K=V`` pairs as a dict; a value without ``=``, an empty key or a system property's name
    (``UNIQ_KEY``, ``TAGS``, ``DELAY``, ...: use ``--tag``, ``--key``, ``--delay-level``) is a
    usage error."""
    properties: dict[str, str] = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{value!r} must be KEY=VALUE", param_hint="--property")
        try:
            check_user_properties([key.strip()])
        except SystemPropertyError as error:
            raise click.BadParameter(str(error), param_hint="--property") from None
        properties[key.strip()] = text
    return properties


@click.command("produce")
@namesrv_option
@click.option("--topic", required=True)
@click.option("--count", type=click.IntRange(1, 100_000_000), default=1, show_default=True)
@click.option("--body", help="Message body; {i} becomes the message's index.")
@click.option(
    "--size", type=click.IntRange(0, 4 * 1024 * 1024), help="Random body of this many bytes instead."
)
@click.option("--tag")
@click.option("--key", help="Business key (indexed); {i} becomes the message's index.")
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="K=V",
    help="User property (repeatable), e.g. for SQL92 filters: --property a=3 --property region=eu. "
    "System names (UNIQ_KEY, TAGS, DELAY, TIMER_DELIVER_MS, ...) are refused: use --tag, --key, --delay.",
)
@click.option("--sharding-key", help="Ordered: every message with this key goes to the same queue.")
@click.option("--delay-level", type=click.IntRange(0, 18), default=0, show_default=True)
@click.option(
    "--delay",
    "delay_ms",
    type=Duration(),
    help="Deliver this long after the broker stores it (its timer): 1500ms, 3.7s, 10m, 2h, 3d.",
)
@click.option(
    "--deliver-at",
    "deliver_at_ms",
    type=Instant(),
    help="Deliver at this time (the broker's timer): epoch milliseconds or ISO 8601 "
    "(2026-11-24T18:30:00Z; no offset means UTC).",
)
@click.option(
    "--batch", type=click.IntRange(1, 1024), default=1, show_default=True, help="Messages per send."
)
@click.option("--group", default="orbitmq-cli-producer", show_default=True)
@click.option(
    "--send-timeout-ms",
    type=click.IntRange(1, None),
    default=10_000,
    show_default=True,
    help="Budget of one send, retries included (rides out a master failover).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='One JSON object per send, then {"summary": {...}} (no progress bar).',
)
def produce(
    namesrv: str,
    topic: str,
    count: int,
    body: str | None,
    size: int | None,
    tag: str | None,
    key: str | None,
    properties: tuple[str, ...],
    sharding_key: str | None,
    delay_level: int,
    delay_ms: int | None,
    deliver_at_ms: int | None,
    batch: int,
    group: str,
    send_timeout_ms: int,
    as_json: bool,
) -> None:
    """Send COUNT messages to TOPIC: a line per send and a summary (count, rate, failures).

    Text-mode summary and errors go to standard error; with a progress bar on a terminal the
    per-send lines are left out unless standard output is redirected.
    """
    if body is not None and size is not None:
        raise click.UsageError("give --body or --size, not both")
    if batch > 1 and sharding_key:
        raise click.UsageError("--batch and --sharding-key do not combine (a batch goes to one queue anyway)")
    timing = [
        name
        for name, value in (
            ("--delay-level", delay_level),
            ("--delay", delay_ms),
            ("--deliver-at", deliver_at_ms),
        )
        if value
    ]
    if len(timing) > 1:
        raise click.UsageError(
            f"give one of --delay-level, --delay and --deliver-at, not {' and '.join(timing)}"
        )
    user_properties = parse_properties(properties)

    def make(i: int) -> Message:
        payload = (
            os.urandom(size) if size is not None else (body or "message {i}").replace("{i}", str(i)).encode()
        )
        keys = [key.replace("{i}", str(i))] if key else None
        return Message(
            topic,
            payload,
            tags=tag,
            keys=keys,
            delay_level=delay_level,
            properties=dict(user_properties),
            delay_ms=delay_ms,
            deliver_at_ms=deliver_at_ms,
        )

    show_bar = count > 1 and wanted(as_json)
    report = _reporter(as_json, quiet=show_bar and sys.stdout.isatty())
    tally = Tally(count)

    async def run(advance: Callable[[int], None]) -> str | None:
        """Send everything; the error that stopped the run, if one did."""
        missing = not await _topic_routed(namesrv, topic)
        async with Producer(group, namesrv, send_timeout_ms=send_timeout_ms) as producer:
            for start in range(0, count, batch):
                try:
                    messages = [make(i) for i in range(start, min(count, start + batch))]
                    if len(messages) == 1:
                        result = await producer.send(messages[0], sharding_key=sharding_key)
                    else:
                        result = await producer.send_batch(messages)
                except (OrbitError, ValueError, TypeError) as error:
                    tally.failed += min(batch, count - start)
                    return str(error)
                tally.add(result, len(messages))
                if missing and not tally.topic_created:
                    tally.topic_created = True
                    if not as_json:  # the JSON summary carries topic_created
                        click.echo(_created_note(topic, result), err=True)
                report(result, len(messages))
                advance(len(messages))
        return None

    with progress(f"producing to {topic}", count, enabled=show_bar) as advance:
        failure = asyncio.run(run(advance))
    tally.error = failure
    if failure is not None:
        click.echo(f"{PROGRAM}: {failure}", err=True)
    if as_json:
        click.echo(json.dumps({"summary": tally.summary()}))
    else:
        click.echo(f"{PROGRAM}: {tally.summary_line()}", err=True)
    if failure is not None:
        sys.exit(1)


async def _topic_routed(namesrv: str, topic: str) -> bool:
    """Whether the name servers know ``topic`` before the first send. If not, that send creates
    it (the brokers' ``auto_create_topic``) or fails naming it; any other failure here counts as
    known, and the sends report it."""
    try:
        async with Admin(namesrv) as admin:
            await admin.route(topic)
    except grpc.aio.AioRpcError as error:
        return error.code() is not grpc.StatusCode.NOT_FOUND
    except (OrbitError, ValueError):
        return True
    return True


def _created_note(topic: str, first: SendResult) -> str:
    return (
        f"{PROGRAM}: topic {topic!r} did not exist; the first send created it on broker "
        f"{first.broker_name} (the broker's auto_create_topic is on; 'orbitmq admin topic status "
        f"--topic {topic}' shows its queues)"
    )


def _reporter(as_json: bool, quiet: bool) -> Callable[[SendResult, int], None]:
    """How each acknowledged send is shown: a JSON object, a line, or nothing (``quiet``: the
    progress bar on this terminal stands for the lines)."""

    def as_object(result: SendResult, count_in_call: int) -> None:
        click.echo(json.dumps(result.as_dict()))

    def as_line(result: SendResult, count_in_call: int) -> None:
        click.echo(
            f"{result.status.value} {result.msg_id} {result.broker_name} queue {result.queue_id} "
            f"offset {result.queue_offset}" + (f" (+{count_in_call - 1})" if count_in_call > 1 else "")
        )

    if as_json:
        return as_object
    return (lambda result, count_in_call: None) if quiet else as_line
