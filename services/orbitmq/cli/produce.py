"""``orbitmq produce``: send messages from the command line (one JSON line per result with --json)."""

from __future__ import annotations

import asyncio
import json
import os

import click

from orbitmq.cli.common import namesrv_option
from orbitmq.client.message import Message, SendResult
from orbitmq.client.producer import Producer
from orbitmq.common.errors import OrbitError


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
@click.option("--sharding-key", help="Ordered: every message with this key goes to the same queue.")
@click.option("--delay-level", type=click.IntRange(0, 18), default=0, show_default=True)
@click.option(
    "--batch", type=click.IntRange(1, 1024), default=1, show_default=True, help="Messages per send."
)
@click.option("--group", default="orbitmq-cli-producer", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON line per result.")
def produce(
    namesrv: str,
    topic: str,
    count: int,
    body: str | None,
    size: int | None,
    tag: str | None,
    key: str | None,
    sharding_key: str | None,
    delay_level: int,
    batch: int,
    group: str,
    as_json: bool,
) -> None:
    """Send COUNT messages to TOPIC."""
    if body is not None and size is not None:
        raise click.UsageError("give --body or --size, not both")
    if batch > 1 and sharding_key:
        raise click.UsageError("--batch and --sharding-key do not combine (a batch goes to one queue anyway)")

    def make(i: int) -> Message:
        payload = (
            os.urandom(size) if size is not None else (body or "message {i}").replace("{i}", str(i)).encode()
        )
        keys = [key.replace("{i}", str(i))] if key else None
        return Message(topic, payload, tags=tag, keys=keys, delay_level=delay_level)

    def report(result: SendResult, count_in_call: int) -> None:
        if as_json:
            click.echo(json.dumps(result.as_dict()))
        else:
            click.echo(
                f"{result.status.value} {result.msg_id} {result.broker_name} queue {result.queue_id} "
                f"offset {result.queue_offset}" + (f" (+{count_in_call - 1})" if count_in_call > 1 else "")
            )

    async def run() -> None:
        async with Producer(group, namesrv) as producer:
            for start in range(0, count, batch):
                messages = [make(i) for i in range(start, min(count, start + batch))]
                if len(messages) == 1:
                    report(await producer.send(messages[0], sharding_key=sharding_key), 1)
                else:
                    report(await producer.send_batch(messages), len(messages))

    try:
        asyncio.run(run())
    except (OrbitError, ValueError, TypeError) as error:
        raise click.ClickException(str(error)) from None
