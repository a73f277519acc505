"""``orbitmq admin group …``: subscription groups (RocketMQ ``updateSubGroup``,
``deleteSubGroup``, ``consumerProgress``)."""

from __future__ import annotations

from typing import Any

import click

from orbitmq.cli.admin_base import common, run_admin
from orbitmq.cli.common import emit_object, emit_rows
from orbitmq.store.config_store import MAX_QUEUE_NUMS
from orbitmq.v1.broker_pb2 import QueueProgress


@click.group("group")
def group() -> None:
    """Create, delete, list consumer groups and show their progress."""


@group.command("create")
@click.option("--group", "name", required=True)
@click.option(
    "--fifo",
    "--orderly",
    "fifo",
    is_flag=True,
    help="A FIFO (orderly) group: RocketMQ 5 clients through orbitmq proxy are told to consume "
    "each message group in order, a failed message retried in place (updateSubGroup -o).",
)
@click.option(
    "--max-retries",
    "--retry-max",
    "max_retries",
    type=click.IntRange(0, 1000),
    default=16,
    show_default=True,
    help="Deliveries after the first before a message goes to %DLQ%<group>; 0: at the first "
    "failure (retryMaxTimes, -r).",
)
@click.option(
    "--retry-queues",
    type=click.IntRange(1, MAX_QUEUE_NUMS),
    default=1,
    show_default=True,
    help="Queues of the group's %RETRY% topic when it is created (retryQueueNums, -q).",
)
@click.option(
    "--broadcast/--no-broadcast",
    default=True,
    show_default=True,
    help="Whether members may consume by broadcasting (consumeBroadcastEnable, -b); when "
    "off, brokers refuse the pulls of a group whose members heartbeat as broadcasting.",
)
@click.option(
    "--consume-enable/--no-consume-enable",
    default=True,
    show_default=True,
    help="Whether members may consume at all: pulls and POP receives are refused with "
    "NO_PERMISSION while it is off (consumeEnable, -s).",
)
@click.option(
    "--consume-from",
    type=click.Choice(["first", "last"]),
    default="first",
    show_default=True,
    help="Where a RocketMQ 5 consumer (POP, through orbitmq proxy) of the group begins a queue it "
    "never received from: the first message kept, or the next one sent (consumeFromMinEnable, -m). "
    "orbitmq's own consumers choose with their consume_from setting.",
)
@click.option("--cluster", help="Every master of this cluster (default: every master).")
@common
def group_create(
    namesrv: str,
    as_json: bool,
    name: str,
    fifo: bool,
    max_retries: int,
    retry_queues: int,
    broadcast: bool,
    consume_enable: bool,
    consume_from: str,
    cluster: str | None,
) -> None:
    """Create or update a subscription group on every master (RocketMQ updateSubGroup).

    As updateSubGroup, the whole config is written: an option not given takes its default."""
    brokers = run_admin(
        lambda a: a.create_group(
            name,
            retry_max_times=max_retries,
            consume_broadcast_enable=broadcast,
            orderly=fifo,
            consume_enable=consume_enable,
            retry_queue_nums=retry_queues,
            consume_from_first=consume_from == "first",
            cluster=cluster,
        ),
        namesrv,
    )
    settings = {
        "fifo": fifo,
        "max_retries": max_retries,
        "retry_queues": retry_queues,
        "broadcast_allowed": broadcast,
        "consume_enabled": consume_enable,
        "consume_from": consume_from,
    }
    emit_object({"group": name, **settings, "brokers": brokers}, as_json)


@group.command("delete")
@click.option("--group", "name", required=True)
@click.option("--cluster")
@common
def group_delete(namesrv: str, as_json: bool, name: str, cluster: str | None) -> None:
    """Delete a subscription group and its offsets."""
    brokers = run_admin(lambda a: a.delete_group(name, cluster), namesrv)
    emit_object({"group": name, "deleted_on": brokers}, as_json)


@group.command("list")
@common
def group_list(namesrv: str, as_json: bool) -> None:
    """Subscription groups of every master, with the settings ``group create`` takes
    (``orderly`` is ``--fifo``, ``retry_max`` is ``--max-retries``)."""
    groups = run_admin(lambda a: a.groups(), namesrv)
    emit_rows(
        [
            {
                "group": g.group_name,
                "retry_max": g.retry_max_times,
                "broadcast_allowed": g.consume_broadcast_enable,
                "orderly": g.consume_message_orderly,
                "retry_queues": g.retry_queue_nums,
                "consume_enabled": g.consume_enable,
                "consume_from": "first" if g.consume_from_min_enable else "last",
            }
            for _, g in sorted(groups.items())
        ],
        [
            "group",
            "retry_max",
            "broadcast_allowed",
            "orderly",
            "retry_queues",
            "consume_enabled",
            "consume_from",
        ],
        as_json,
    )


@group.command("progress")
@click.option("--group", "name", required=True)
@click.option("--topic")
@common
def group_progress(namesrv: str, as_json: bool, name: str, topic: str | None) -> None:
    """Broker offset, consumer offset and lag per queue (RocketMQ consumerProgress).

    For a group consuming by POP (RocketMQ 5 clients through orbitmq proxy) the consumer
    offset is the POP consume offset (everything below it acked, skipped or dead-lettered),
    and the queue also shows the messages in flight (received, not acked), how many of those
    have expired and wait to be delivered again, and the first offset never delivered."""
    rows = run_admin(lambda a: a.consume_progress(name, topic), namesrv)
    columns = ["topic", "broker_name", "queue", "broker_offset", "consumer_offset", "lag"]
    pop = any(r.pop for r in rows)
    if pop:
        columns += ["mode", "in_flight", "expired", "delivered_offset"]
    emit_rows(
        [_progress_row(r) for r in rows],
        columns,
        as_json,
        f"total lag {sum(r.lag for r in rows)}"
        + (f", in flight {sum(r.pop_in_flight for r in rows)}" if pop else ""),
    )


def _progress_row(r: QueueProgress) -> dict[str, Any]:
    row = {
        "topic": r.topic,
        "broker_name": r.broker_name,
        "queue": r.queue_id,
        "broker_offset": r.broker_offset,
        "consumer_offset": r.consumer_offset,
        "lag": r.lag,
        "mode": "pop" if r.pop else "pull",
    }
    if r.pop:
        row.update(in_flight=r.pop_in_flight, expired=r.pop_expired, delivered_offset=r.pop_delivered_offset)
    return row
