"""``orbitmq consume``: consume a topic as a member of a group (one JSON line per message with --json).

With ``--count N`` the consumer suspends itself inside the listener once N messages are shown,
so anything pulled beyond them is not committed and stays for the group's next run. It stops
there, after ``--idle-timeout`` seconds without a message, or on SIGINT/SIGTERM, and always
ends with a summary (count, rate, messages per queue, why it stopped): on standard error, or as
the last JSON line with ``--json``. ``--metrics-port`` serves the consumer's client-side
Prometheus metrics (:mod:`orbitmq.client.consumer_metrics`) while it runs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import json
import signal
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import click
from prometheus_client import start_http_server

from orbitmq.cli.common import human, namesrv_option, parse_time
from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_types import (
    ConsumeFromWhere,
    ConsumerSettings,
    ConsumeStatus,
    MessageModel,
    OrderlyStatus,
)
from orbitmq.common.errors import OrbitError
from orbitmq.common.properties import SYSTEM_PROPERTIES
from orbitmq.common.server import listen_error, port_in_use
from orbitmq.common.topics import Property
from orbitmq.store.record import StoredMessage

PROGRAM = "orbitmq consume"
METRICS_HOST = "0.0.0.0"
"""Where ``--metrics-port`` listens: every interface, as the servers' metrics ports do, so a
Prometheus elsewhere can scrape it."""

FROM = {
    "first": ConsumeFromWhere.FIRST_OFFSET,
    "last": ConsumeFromWhere.LAST_OFFSET,
    "timestamp": ConsumeFromWhere.TIMESTAMP,
}


def message_record(message: StoredMessage, queue_id: int) -> dict[str, Any]:
    """What ``--json`` prints per message; a body that is not UTF-8 is given in base64.

    ``properties`` are the application's own, what ``produce --property`` (or a client's
    message properties) set; the system's (``UNIQ_KEY``, ``TAGS``, ``KEYS``, ...) are left out,
    as tags, keys and the id have their own fields."""
    record: dict[str, Any] = {
        "topic": message.topic,
        "queue": queue_id,
        "queue_offset": message.queue_offset,
        "msg_id": message.properties.get(Property.UNIQ_KEY) or message.msg_id,
        "keys": list(message.keys),
        "tags": message.tags,
        "properties": user_properties(message.properties),
        "reconsume_times": message.reconsume_times,
    }
    try:
        record["body"] = message.body.decode()
    except UnicodeDecodeError:
        record["body"] = base64.b64encode(message.body).decode()
        record["body_encoding"] = "base64"
    return record


def user_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The application's properties of a message, by name (system properties left out)."""
    return {name: properties[name] for name in sorted(properties) if name not in SYSTEM_PROPERTIES}


def text_line(record: dict[str, Any]) -> str:
    """One message for a person; a body that is not UTF-8 is shown in base64 and says so;
    user properties as ``properties=k=v, k=v`` when there are any."""
    body = record["body"]
    if record.get("body_encoding") == "base64":
        body = f"[base64, not UTF-8] {body}"
    properties = f" properties={human(record['properties'])}" if record["properties"] else ""
    return (
        f"{record['topic']} queue {record['queue']} offset {record['queue_offset']} "
        f"{record['msg_id']} tags={human(record['tags'])} keys={human(record['keys'])}"
        f"{properties}: {body}"
    )


@dataclass
class Tally:
    """What a run consumed, for its closing summary."""

    started: float = field(default_factory=time.monotonic)
    last_message: float = field(default_factory=time.monotonic)
    """When the last message (or the start) was seen: ``--idle-timeout`` counts from it."""
    per_queue: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    """Messages by (topic, store host, queue id)."""
    stopped_by: str = "signal"

    def add(self, message: StoredMessage) -> None:
        self.per_queue[(message.topic, message.store_host, message.queue_id)] += 1
        self.last_message = time.monotonic()

    def summary(self) -> dict[str, Any]:
        seconds = time.monotonic() - self.started
        received = sum(self.per_queue.values())
        return {
            "received": received,
            "seconds": round(seconds, 3),
            "rate_per_s": round(received / seconds, 1) if seconds > 0 else 0.0,
            "queues": [
                {"topic": topic, "store_host": host, "queue": queue, "count": count}
                for (topic, host, queue), count in sorted(self.per_queue.items())
            ],
            "stopped_by": self.stopped_by,
        }

    def summary_line(self) -> str:
        s = self.summary()
        hosts = {q["store_host"] for q in s["queues"]}
        queues = ", ".join(
            f"{q['topic']}/{q['queue']}"
            + (f"@{q['store_host']}" if len(hosts) > 1 else "")
            + f" {q['count']}"
            for q in s["queues"]
        )
        return (
            f"received {s['received']} message(s) in {s['seconds']:.2f} s ({s['rate_per_s']:.0f} msg/s)"
            + (f"; per queue: {queues}" if queues else "")
            + f"; stopped by {s['stopped_by']}"
        )


def _serve_metrics(port: int, consumer: PushConsumer) -> Any:
    """The consumer's ``/metrics`` on ``port`` (0: any free one); the URL goes to stderr."""
    try:
        server, _thread = start_http_server(port, addr=METRICS_HOST, registry=consumer.metrics.registry)
    except OSError as error:
        reason = port_in_use(port) if error.errno == errno.EADDRINUSE else error.strerror or str(error)
        raise click.ClickException(
            str(listen_error("consume metrics", f"{METRICS_HOST}:{port}", "--metrics-port", reason))
        ) from None
    click.echo(f"{PROGRAM}: metrics on http://127.0.0.1:{server.server_port}/metrics", err=True)
    return server


@click.command("consume")
@namesrv_option
@click.option("--group", required=True, help="Consumer group.")
@click.option("--topic", required=True)
@click.option(
    "--expr", default="*", show_default=True, help="Tag expression ('A || B'), or SQL92 with --sql."
)
@click.option("--sql", is_flag=True, help="--expr is a SQL92 condition on message properties.")
@click.option("--orderly", is_flag=True, help="One message at a time per queue, under a broker lock.")
@click.option(
    "--broadcast",
    is_flag=True,
    help="Every member gets every message; offsets are kept in a local file named by the host and "
    "--instance-name, where the next run resumes.",
)
@click.option(
    "--instance-name",
    help="Client instance name (default: DEFAULT). With --broadcast it names the offsets file, "
    "<host>@<name>/<group>/offsets.json under $ORBITMQ_LOCAL_OFFSETS_DIR (else ~/.orbitmq_offsets): "
    "consumers of one group running at once on one host need different names.",
)
@click.option(
    "--from",
    "from_where",
    type=click.Choice(sorted(FROM)),
    default="last",
    show_default=True,
    help="Where a group with no committed offset starts.",
)
@click.option(
    "--timestamp", help="With --from timestamp: ms since the epoch or ISO-8601 (default 30 min ago)."
)
@click.option("--count", type=click.IntRange(1, None), help="Exit after this many messages.")
@click.option(
    "--idle-timeout",
    type=click.FloatRange(0, None, min_open=True),
    metavar="S",
    help="Exit after S seconds without a message (counted from the start, then from each message).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve the consumer's Prometheus /metrics on this port (0: any free one, printed on stderr).",
)
@click.option("--json", "as_json", is_flag=True, help='One JSON line per message, then {"summary": {...}}.')
def consume(
    namesrv: str,
    group: str,
    topic: str,
    expr: str,
    sql: bool,
    orderly: bool,
    broadcast: bool,
    instance_name: str | None,
    from_where: str,
    timestamp: str | None,
    count: int | None,
    idle_timeout: float | None,
    metrics_port: int | None,
    as_json: bool,
) -> None:
    """Consume TOPIC as a member of GROUP until Ctrl-C, SIGTERM, --count messages or
    --idle-timeout seconds without one; then print a summary (stderr; with --json, the last
    line on stdout)."""
    if timestamp is not None and from_where != "timestamp":
        raise click.UsageError("--timestamp needs --from timestamp")
    if orderly and broadcast:
        raise click.UsageError("--orderly needs clustering: broadcasting has no queue locks")
    when = parse_time(timestamp) if timestamp else None
    tally = Tally()

    async def run() -> None:
        done = asyncio.Event()
        shown = 0

        async def listener(messages: list[StoredMessage]) -> ConsumeStatus | OrderlyStatus:
            nonlocal shown
            for message in messages:
                if count is not None and shown >= count:
                    break
                record = message_record(message, message.queue_id)
                click.echo(json.dumps(record) if as_json else text_line(record))
                tally.add(message)
                shown += 1
            if count is not None and shown >= count:
                consumer.suspend()
                stop("--count")
            return OrderlyStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS

        def stop(why: str) -> None:
            if not done.is_set():
                tally.stopped_by = why
                done.set()

        consumer = PushConsumer(
            group,
            namesrv,
            listener=listener,
            orderly=orderly,
            message_model=MessageModel.BROADCASTING if broadcast else MessageModel.CLUSTERING,
            consume_from=FROM[from_where],
            consume_timestamp_ms=when,
            settings=ConsumerSettings(consume_batch=1),
            instance_name=instance_name,
        )
        consumer.subscribe(topic, expr, sql=sql)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop, sig.name)
        metrics = _serve_metrics(metrics_port, consumer) if metrics_port is not None else None
        try:
            await consumer.start()
            tally.last_message = time.monotonic()  # idle time counts from a consumer that runs
            await _wait_until_done(done, tally, idle_timeout, stop)
        finally:
            await consumer.close()
            if metrics is not None:
                metrics.shutdown()
                metrics.server_close()

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run())
    except (OrbitError, ValueError, TypeError) as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        click.echo(json.dumps({"summary": tally.summary()}))
    else:
        click.echo(f"{PROGRAM}: {tally.summary_line()}", err=True)


async def _wait_until_done(
    done: asyncio.Event, tally: Tally, idle_timeout: float | None, stop: Callable[[str], None]
) -> None:
    """Until ``done``, or ``idle_timeout`` seconds pass without a message."""
    while not done.is_set():
        left = None if idle_timeout is None else idle_timeout - (time.monotonic() - tally.last_message)
        if left is not None and left <= 0:
            stop(f"--idle-timeout ({idle_timeout:g} s without a message)")
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), left)
