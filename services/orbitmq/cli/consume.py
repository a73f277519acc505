"""``orbitmq consume``: consume a topic as a member of a group (one JSON line per message with --json).

With ``--count N`` the consumer suspends itself inside the listener once N messages are shown,
so anything pulled beyond them is not committed and stays for the group's next run.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
from typing import Any

import click

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
from orbitmq.common.topics import Property
from orbitmq.store.record import StoredMessage

FROM = {
    "first": ConsumeFromWhere.FIRST_OFFSET,
    "last": ConsumeFromWhere.LAST_OFFSET,
    "timestamp": ConsumeFromWhere.TIMESTAMP,
}


def message_record(message: StoredMessage, queue_id: int) -> dict[str, Any]:
    """What ``--json`` prints per message; a body that is not UTF-8 is given in base64."""
    record: dict[str, Any] = {
        "topic": message.topic,
        "queue": queue_id,
        "queue_offset": message.queue_offset,
        "msg_id": message.properties.get(Property.UNIQ_KEY) or message.msg_id,
        "keys": list(message.keys),
        "tags": message.tags,
        "reconsume_times": message.reconsume_times,
    }
    try:
        record["body"] = message.body.decode()
    except UnicodeDecodeError:
        record["body"] = base64.b64encode(message.body).decode()
        record["body_encoding"] = "base64"
    return record


@click.command("consume")
@namesrv_option
@click.option("--group", required=True, help="Consumer group.")
@click.option("--topic", required=True)
@click.option(
    "--expr", default="*", show_default=True, help="Tag expression ('A || B'), or SQL92 with --sql."
)
@click.option("--sql", is_flag=True, help="--expr is a SQL92 condition on message properties.")
@click.option("--orderly", is_flag=True, help="One message at a time per queue, under a broker lock.")
@click.option("--broadcast", is_flag=True, help="Every member gets every message (offsets kept locally).")
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
@click.option("--json", "as_json", is_flag=True, help="One JSON line per message.")
def consume(
    namesrv: str,
    group: str,
    topic: str,
    expr: str,
    sql: bool,
    orderly: bool,
    broadcast: bool,
    from_where: str,
    timestamp: str | None,
    count: int | None,
    as_json: bool,
) -> None:
    """Consume TOPIC as a member of GROUP until Ctrl-C (or --count messages)."""
    if timestamp is not None and from_where != "timestamp":
        raise click.UsageError("--timestamp needs --from timestamp")
    if orderly and broadcast:
        raise click.UsageError("--orderly needs clustering: broadcasting has no queue locks")
    when = parse_time(timestamp) if timestamp else None

    async def run() -> None:
        done = asyncio.Event()
        shown = 0

        async def listener(messages: list[StoredMessage]) -> ConsumeStatus | OrderlyStatus:
            nonlocal shown
            for message in messages:
                if count is not None and shown >= count:
                    break
                record = message_record(message, message.queue_id)
                if as_json:
                    click.echo(json.dumps(record))
                else:
                    click.echo(
                        f"{record['topic']} queue {record['queue']} offset {record['queue_offset']} "
                        f"{record['msg_id']} tags={human(record['tags'])} keys={human(record['keys'])}: "
                        f"{record['body']}"
                    )
                shown += 1
            if count is not None and shown >= count:
                consumer.suspend()
                done.set()
            return OrderlyStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS

        consumer = PushConsumer(
            group,
            namesrv,
            listener=listener,
            orderly=orderly,
            message_model=MessageModel.BROADCASTING if broadcast else MessageModel.CLUSTERING,
            consume_from=FROM[from_where],
            consume_timestamp_ms=when,
            settings=ConsumerSettings(consume_batch=1),
        )
        consumer.subscribe(topic, expr, sql=sql)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, done.set)
        await consumer.start()
        try:
            await done.wait()
        finally:
            await consumer.close()

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run())
    except (OrbitError, ValueError, TypeError) as error:
        raise click.ClickException(str(error)) from None
