"""``orbitmq broker``: run a broker process until SIGTERM/SIGINT."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import click
from pydantic import ValidationError

from orbitmq.broker.settings import ENV_PREFIX, BrokerSettings
from orbitmq.cli.common import (
    NAMESRV_ENV,
    SETTINGS_EXIT_CODE,
    server_auth_options,
    server_tls_options,
    settings_or_exit,
)
from orbitmq.cli.serve import serve


@click.command("broker")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="YAML/JSON settings file (field names as in BrokerSettings).",
)
@click.option("--listen", help="gRPC address, default 0.0.0.0:10911.")
@click.option("--metrics-listen", help="Prometheus /metrics address, default 0.0.0.0:10913; '' disables.")
@click.option("--namesrv", help=f"Name servers 'host:port;host:port' (',' works too; or {NAMESRV_ENV}).")
@click.option("--cluster")
@click.option("--broker-name")
@click.option("--broker-id", type=int)
@click.option("--broker-role", type=click.Choice(["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"]))
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--flush-mode", type=click.Choice(["ASYNC_FLUSH", "SYNC_FLUSH"]))
@click.option(
    "--segment-bytes",
    type=int,
    help="Commit-log segment size for a new store, default 1 GiB (reserved on disk at once).",
)
@click.option("--advertise-addr", help="Address registered with name servers.")
@click.option(
    "--auto-create-topic/--no-auto-create-topic",
    default=None,
    help="Create a topic on its first send (default on, as RocketMQ's autoCreateTopicEnable); "
    "off: a send to a missing topic fails with TOPIC_NOT_EXIST.",
)
@click.option(
    "--broker-id-from-hostname",
    is_flag=True,
    help="Take the broker id from the ordinal ending the host name, as a StatefulSet pod's "
    "(orbit-broker-0-2 -> 2); a nonzero id runs the broker as SLAVE. A role recorded in the "
    "store by a failover (ha-role.json) still wins.",
)
@server_tls_options
@server_auth_options
def broker_command(config_file: Path | None, broker_id_from_hostname: bool, **flags: object) -> None:
    """Run a broker: store, serve producers and consumers, register with name servers.

    Settings come from --config, then ORBITMQ_BROKER_<FIELD> environment variables, then flags.
    """
    from orbitmq.broker.server import run
    from orbitmq.common.loop import run_on_fast_loop

    if broker_id_from_hostname:
        flags.update(ordinal_settings(socket.gethostname(), flags))
    if flags.get("namesrv") is None and os.environ.get(NAMESRV_ENV):
        flags["namesrv"] = os.environ[NAMESRV_ENV]
    settings = settings_or_exit(BrokerSettings, config_file, ENV_PREFIX, flags)
    try:  # the store's own rules (a segment must hold the largest message) before anything starts
        settings.store_config(settings.store_host or settings.advertise_addr or "127.0.0.1:0")
    except ValidationError as error:
        problems = "; ".join(str(issue["msg"]).removeprefix("Value error, ") for issue in error.errors())
        refused = click.ClickException(f"invalid settings: {problems}")
        refused.exit_code = SETTINGS_EXIT_CODE
        raise refused from None
    # uvloop: 6-13 % less broker CPU a send (its event loop wakes several times a call).
    serve(f"broker {settings.broker_name}", run(settings), run_on_fast_loop)


_ORDINAL = re.compile(r"-(0|[1-9][0-9]*)$")


def ordinal_settings(hostname: str, flags: dict[str, object]) -> dict[str, object]:
    """The broker id and role of a StatefulSet pod named ``hostname``: its ordinal is the id,
    and every pod but ordinal 0 starts as a slave (ordinal 0 keeps the configured master role).

    This lets one pod template serve a whole broker group without a shell in the image; the
    store's ``ha-role.json`` still overrides both once a failover has been recorded.
    """
    match = _ORDINAL.search(hostname.split(".")[0])  # a pod's short name, even if given as an FQDN
    if match is None:
        raise click.UsageError(
            f"--broker-id-from-hostname: host name {hostname!r} does not end in '-<ordinal>' "
            "(as a StatefulSet pod's does)"
        )
    for name in ("broker_id", "broker_role"):
        if flags.get(name) is not None:
            raise click.UsageError(
                f"--broker-id-from-hostname decides --{name.replace('_', '-')}; give one of them"
            )
    ordinal = int(match[1])
    return {"broker_id": ordinal, "broker_role": "SLAVE"} if ordinal else {"broker_id": 0}
