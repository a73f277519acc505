"""``orbitmq admin …``: cluster administration with RocketMQ mqadmin parity.

Tables for people, ``--json`` for scripts. Failures print the server's reason and exit 1.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import click

from orbitmq.cli.admin_auth import acl, user
from orbitmq.cli.admin_base import common, run_admin
from orbitmq.cli.admin_groups import group
from orbitmq.cli.common import (
    Perm,
    emit_object,
    emit_rows,
    iso_time,
    parse_time,
)
from orbitmq.client.admin import Admin, TopicChangeReport
from orbitmq.common.topics import Property
from orbitmq.store.record import StoredMessage
from orbitmq.v1.broker_pb2 import TopicChangeOutcome


def message_row(message: StoredMessage) -> dict[str, Any]:
    """One message; ``msg_id`` is what produce and consume print (the unique key, RocketMQ's
    msgId), ``offset_msg_id`` where the broker stored it; either finds it with ``by-id``."""
    return {
        "msg_id": message.properties.get(Property.UNIQ_KEY) or message.msg_id,
        "offset_msg_id": message.msg_id,
        "topic": message.topic,
        "queue": message.queue_id,
        "queue_offset": message.queue_offset,
        "tags": message.tags,
        "keys": list(message.keys),
        "reconsume_times": message.reconsume_times,
        "store_time": iso_time(message.store_timestamp_ms),
        "body": message.body.decode(errors="replace"),
    }


MESSAGE_COLUMNS = [
    "msg_id",
    "offset_msg_id",
    "topic",
    "queue",
    "queue_offset",
    "tags",
    "keys",
    "reconsume_times",
    "store_time",
    "body",
]


@click.group("admin")
def admin() -> None:
    """Administer a cluster through its name servers (RocketMQ mqadmin)."""


admin.add_command(group)
admin.add_command(user)
admin.add_command(acl)


# -- topics ---------------------------------------------------------------------------------------


@admin.group("topic")
def topic() -> None:
    """Create, update, delete, list and inspect topics."""


def _topic_options(function: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option("--topic", required=True),
            click.option(
                "--read-queues", type=click.IntRange(1, 1024), help="Read queues (create: default 4)."
            ),
            click.option(
                "--write-queues", type=click.IntRange(1, 1024), help="Write queues (create: default 4)."
            ),
            click.option(
                "--perm",
                type=Perm(),
                help="r, w or rw, or a number: READ=4 WRITE=2 INHERIT=1 (create: default rw, 6).",
            ),
            click.option("--cluster", help="Every master of this cluster (default: every master)."),
            click.option("--broker", "broker_addr", help="Only this broker address."),
            click.option(
                "--force",
                is_flag=True,
                help="Allow a change that hides unconsumed messages (read queues cut below queues "
                "that hold them, or fewer read than write queues).",
            ),
        ]
    ):
        function = option(function)
    return function


_TOPIC_COLUMNS = ["broker", "address", "outcome", "read_queues", "write_queues", "perm", "order"]


def _outcome(report: TopicChangeReport, asked: dict[str, Any] | None) -> str:
    """The outcome as the user sees it: an existing topic that differs only from the defaults
    (no option given asked otherwise) simply "exists"."""
    if asked is not None and report.outcome == "exists_different" and not _differs_from_asked(report, asked):
        return "exists"
    return report.outcome


def _change_rows(reports: list[TopicChangeReport], asked: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One row per broker: the topic as it is now, and what the call did to it."""

    def shown(name: str, report: TopicChangeReport) -> Any:
        after = getattr(report.change.after, name)
        before = getattr(report.change.before, name)
        changed = report.change.HasField("before") and before != after
        return f"{before} -> {after}" if changed else after

    return [
        {
            "broker": r.change.broker_name,
            "address": r.address,
            "outcome": _outcome(r, asked),
            **{
                column: shown(field, r)
                for column, field in (
                    ("read_queues", "read_queue_nums"),
                    ("write_queues", "write_queue_nums"),
                    ("perm", "perm"),
                    ("order", "order"),
                )
            },
        }
        for r in reports
    ]


def _emit_changes(
    topic: str, reports: list[TopicChangeReport], as_json: bool, asked: dict[str, Any] | None = None
) -> None:
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "topic": topic,
                        "broker": r.change.broker_name,
                        "address": r.address,
                        "outcome": _outcome(r, asked),
                        "before": _topic_json(r.change.before) if r.change.HasField("before") else None,
                        "after": _topic_json(r.change.after),
                    }
                    for r in reports
                ]
            )
        )
        return
    emit_rows(_change_rows(reports, asked), _TOPIC_COLUMNS, False, f"topic {topic}")


def _topic_json(config: Any) -> dict[str, Any]:
    return {
        "read_queues": config.read_queue_nums,
        "write_queues": config.write_queue_nums,
        "perm": config.perm,
        "order": config.order,
    }


@topic.command("create")
@_topic_options
@click.option("--order", is_flag=True, help="An ordered topic.")
@click.option(
    "--update",
    "update_existing",
    is_flag=True,
    help="Where the topic exists, change it to what is given (as topic update would).",
)
@common
def topic_create(
    namesrv: str,
    as_json: bool,
    topic: str,
    cluster: str | None,
    broker_addr: str | None,
    update_existing: bool,
    force: bool,
    **asked: Any,
) -> None:
    """Create a topic. An existing topic is left as it is and shown (exit status 1 if it differs
    from what was asked); --update changes it."""
    where = {"cluster": cluster, "broker_addr": broker_addr, "force": force}
    reports = run_admin(
        lambda a: a.create_topic(topic, **_topic_settings(asked), **where, update_existing=update_existing),
        namesrv,
    )
    _emit_changes(topic, reports, as_json, asked)
    differing = [r for r in reports if _differs_from_asked(r, asked)]
    if differing:
        where = ", ".join(r.change.broker_name for r in differing)
        raise click.ClickException(
            f"topic {topic!r} already exists on {where} with other settings (shown above) and was "
            "left unchanged; change it with 'orbitmq admin topic update' or 'topic create --update'"
        )


def _topic_settings(asked: dict[str, Any]) -> dict[str, Any]:
    """The command's topic options as the Admin API names them (None: not given)."""
    return {
        "read_queue_nums": asked["read_queues"],
        "write_queue_nums": asked["write_queues"],
        "perm": asked["perm"],
        "order": asked["order"],
    }


def _differs_from_asked(report: TopicChangeReport, asked: dict[str, Any]) -> bool:
    """Whether an existing topic differs in a setting the user gave (defaults do not count)."""
    if report.change.outcome != TopicChangeOutcome.TOPIC_EXISTS_DIFFERENT:
        return False
    given = {**_topic_settings(asked), "order": asked["order"] or None}  # create's --order is a flag
    before = report.change.before
    return any(value is not None and getattr(before, name) != value for name, value in given.items())


@topic.command("update")
@_topic_options
@click.option("--order/--no-order", default=None, help="Make the topic ordered or not.")
@common
def topic_update(
    namesrv: str,
    as_json: bool,
    topic: str,
    cluster: str | None,
    broker_addr: str | None,
    force: bool,
    **asked: Any,
) -> None:
    """Change only the settings given of an existing topic (a missing topic is an error)."""
    if all(value is None for value in asked.values()):
        raise click.UsageError(
            "give at least one of --read-queues, --write-queues, --perm, --order/--no-order"
        )
    where = {"cluster": cluster, "broker_addr": broker_addr, "force": force}
    reports = run_admin(lambda a: a.update_topic(topic, **_topic_settings(asked), **where), namesrv)
    _emit_changes(topic, reports, as_json)


@topic.command("delete")
@click.option("--topic", required=True)
@click.option("--cluster")
@common
def topic_delete(namesrv: str, as_json: bool, topic: str, cluster: str | None) -> None:
    """Delete a topic from the brokers and the name servers."""
    brokers = run_admin(lambda a: a.delete_topic(topic, cluster), namesrv)
    emit_object({"topic": topic, "deleted_on": brokers}, as_json)


@topic.command("list")
@common
def topic_list(namesrv: str, as_json: bool) -> None:
    """Topics known to the name servers."""
    topics = run_admin(lambda a: a.topic_list(), namesrv)
    emit_rows([{"topic": t} for t in topics], ["topic"], as_json)


@topic.command("route")
@click.option("--topic", required=True)
@common
def topic_route(namesrv: str, as_json: bool, topic: str) -> None:
    """Which broker groups serve a topic, with how many queues."""
    route = run_admin(lambda a: a.route(topic), namesrv)
    addresses = {d.broker_name: dict(d.broker_addrs) for d in route.broker_datas}
    rows = [
        {
            "broker_name": q.broker_name,
            "read_queues": q.read_queue_nums,
            "write_queues": q.write_queue_nums,
            "perm": q.perm,
            "master": addresses.get(q.broker_name, {}).get(0),
            "slaves": [a for i, a in sorted(addresses.get(q.broker_name, {}).items()) if i],
        }
        for q in route.queue_datas
    ]
    emit_rows(
        rows,
        ["broker_name", "read_queues", "write_queues", "perm", "master", "slaves"],
        as_json,
        f"route of {topic}",
    )


@topic.command("status")
@click.option("--topic", required=True)
@common
def topic_status(namesrv: str, as_json: bool, topic: str) -> None:
    """Min and max offset of every queue of a topic, and when its last message was stored
    (ISO-8601, UTC; ``-`` for a queue never written; --json also gives it in milliseconds)."""
    rows = run_admin(lambda a: a.topic_status(topic), namesrv)
    columns = ["broker_name", "queue", "min_offset", "max_offset", "last_update"]
    emit_rows(
        [
            {
                "broker_name": name,
                "queue": q.queue_id,
                "min_offset": q.min_offset,
                "max_offset": q.max_offset,
                "last_update": iso_time(q.last_update_timestamp_ms),
                "last_update_ms": q.last_update_timestamp_ms,
            }
            for name, q in rows
        ],
        [*columns, "last_update_ms"] if as_json else columns,
        as_json,
    )


# -- groups ---------------------------------------------------------------------------------------


# -- cluster, brokers, messages, offsets, dead letters -------------------------------------------------


@admin.group("cluster")
def cluster() -> None:
    """Clusters and their brokers."""


@cluster.command("list")
@common
def cluster_list(namesrv: str, as_json: bool) -> None:
    """Every registered broker with its role and address."""
    brokers = run_admin(lambda a: a.brokers(), namesrv)
    emit_rows(
        [
            {
                "cluster": b.cluster,
                "broker_name": b.broker_name,
                "broker_id": b.broker_id,
                "role": "master" if b.broker_id == 0 else "slave",
                "address": b.address,
            }
            for b in brokers
        ],
        ["cluster", "broker_name", "broker_id", "role", "address"],
        as_json,
    )


@admin.group("broker")
def broker() -> None:
    """Broker runtime information; draining a broker group (write permission, backlog)."""


@broker.command("status")
@click.option("--broker", "address", help="Broker address (default: every registered broker).")
@common
def broker_status(namesrv: str, as_json: bool, address: str | None) -> None:
    """Runtime counters of a broker (RocketMQ brokerStatus)."""

    async def work(a: Admin) -> dict[str, dict[str, str | int]]:
        targets = [address] if address else [b.address for b in await a.brokers()]
        return {t: await a.broker_status(t) for t in targets}

    statuses = run_admin(work, namesrv)
    if as_json:
        emit_object(statuses, True)
        return
    for target, entries in statuses.items():
        click.echo(f"== {target}")
        emit_object(entries, False)


_BROKER_NAME_OPTION = click.option("--broker-name", required=True, help="Broker group name, e.g. broker-b.")


@broker.command("wipe-write-perm")
@_BROKER_NAME_OPTION
@common
def broker_wipe_write_perm(namesrv: str, as_json: bool, broker_name: str) -> None:
    """Stop producers sending to a broker group, on every name server (RocketMQ wipeWritePerm).

    Consumers keep reading its queues, so its backlog drains (see ``broker backlog``). Name
    servers keep this in memory only: after a name-server restart, run it again.
    """
    counts = run_admin(lambda a: a.wipe_write_perm(broker_name), namesrv)
    rows = [{"namesrv": address, "wiped_topics": count} for address, count in counts.items()]
    emit_rows(rows, ["namesrv", "wiped_topics"], as_json)


@broker.command("add-write-perm")
@_BROKER_NAME_OPTION
@common
def broker_add_write_perm(namesrv: str, as_json: bool, broker_name: str) -> None:
    """Let producers send to a broker group again, on every name server (RocketMQ addWritePerm)."""
    counts = run_admin(lambda a: a.add_write_perm(broker_name), namesrv)
    rows = [{"namesrv": address, "restored_topics": count} for address, count in counts.items()]
    emit_rows(rows, ["namesrv", "restored_topics"], as_json)


@broker.command("backlog")
@_BROKER_NAME_OPTION
@common
def broker_backlog(namesrv: str, as_json: bool, broker_name: str) -> None:
    """Messages on a broker group that consumer groups have not consumed yet (none: drained)."""
    backlog = run_admin(lambda a: a.broker_backlog(broker_name), namesrv)
    rows = [{"group": group, "topic": topic, "lag": lag} for (group, topic), lag in sorted(backlog.items())]
    emit_rows(rows, ["group", "topic", "lag"], as_json)


@admin.group("message")
def message() -> None:
    """Find messages by key or by id."""


@message.command("by-key")
@click.option("--topic", required=True)
@click.option("--key", required=True)
@click.option("--max", "max_num", type=click.IntRange(1, 256), default=32, show_default=True)
@common
def message_by_key(namesrv: str, as_json: bool, topic: str, key: str, max_num: int) -> None:
    """Messages of a topic with this key or unique key; none is an error (exit status 1, and
    ``[]`` on stdout with --json)."""
    messages = run_admin(lambda a: a.messages_by_key(topic, key, max_num), namesrv)
    if not messages:
        if as_json:
            click.echo("[]")
        raise click.ClickException(f"no message of topic {topic!r} has the key or unique key {key!r}")
    emit_rows([message_row(m) for m in messages], MESSAGE_COLUMNS, as_json)


@message.command("by-id")
@click.option(
    "--id",
    "msg_id",
    required=True,
    help="The msg_id produce and consume print (unique key: 32 hex, or 34 from RocketMQ 5 "
    "clients) or an offset_msg_id.",
)
@click.option(
    "--topic",
    help="Topic of a unique key (faster: without it every topic of every broker is searched).",
)
@common
def message_by_id(namesrv: str, as_json: bool, msg_id: str, topic: str | None) -> None:
    """One message by its msg_id (unique key) or offset_msg_id (RocketMQ queryMsgById).

    An id that decodes to a registered broker's address is read there by commit-log offset;
    any other is looked up as a unique key in the brokers' index (a RocketMQ 5 client's id,
    34 characters, names no broker: always so)."""
    found = run_admin(lambda a: a.message_by_id(msg_id, topic), namesrv)
    emit_object(
        {
            **message_row(found),
            "properties": dict(found.properties),
            "born_host": found.born_host,
            "store_host": found.store_host,
        },
        as_json,
    )


@admin.group("offset")
def offset() -> None:
    """Consumer offsets."""


@offset.command("reset")
@click.option("--group", "name", required=True)
@click.option("--topic", required=True)
@click.option("--timestamp", help="Milliseconds since the epoch or ISO-8601 time.")
@click.option("--to", "to_offset", type=click.IntRange(min=0), help="The same offset for every queue.")
@common
def offset_reset(
    namesrv: str, as_json: bool, name: str, topic: str, timestamp: str | None, to_offset: int | None
) -> None:
    """Move a group's offsets back or forward; online consumers are told at once."""
    if (timestamp is None) == (to_offset is None):
        raise click.UsageError("give exactly one of --timestamp or --to")
    when = parse_time(timestamp) if timestamp else None
    result = run_admin(
        functools.partial(_reset, name=name, topic=topic, when=when, to_offset=to_offset), namesrv
    )
    emit_rows(
        [
            {"broker_name": b, "queue": q, "offset": o}
            for b, offsets in result.items()
            for q, o in sorted(offsets.items())
        ],
        ["broker_name", "queue", "offset"],
        as_json,
    )


async def _reset(a: Admin, *, name: str, topic: str, when: int | None, to_offset: int | None) -> Any:
    return await a.reset_offset(name, topic, timestamp_ms=when, offset=to_offset)


@admin.group("dlq")
def dlq() -> None:
    """Dead-letter queues."""


@dlq.command("list")
@click.option("--group", "name", required=True)
@click.option("--max", "max_num", type=click.IntRange(1, 10_000), default=100, show_default=True)
@common
def dlq_list(namesrv: str, as_json: bool, name: str, max_num: int) -> None:
    """Messages that exhausted their retries for a group."""
    messages = run_admin(lambda a: a.dead_letters(name, max_num), namesrv)
    emit_rows([message_row(m) for m in messages], MESSAGE_COLUMNS, as_json)
