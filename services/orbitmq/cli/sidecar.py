"""``orbitmq sidecar``: consume for a local application until SIGTERM, then drain."""

from __future__ import annotations

import os
from pathlib import Path

import click

from orbitmq.cli.common import (
    NAMESRV_ENV,
    server_auth_options,
    server_tls_options,
    settings_or_exit,
    users_file_options,
)
from orbitmq.cli.serve import serve


@click.command("sidecar")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="YAML/JSON settings file (field names as in SidecarSettings).",
)
@click.option("--namesrv", help=f"Name servers 'host:port;host:port' (',' works too; or {NAMESRV_ENV}).")
@click.option("--group", help="Consumer group.")
@server_tls_options
@server_auth_options
@users_file_options("the applications'", synced=True)
@click.option(
    "--subscribe",
    "subscriptions",
    multiple=True,
    help="TOPIC, 'TOPIC:TagA || TagB' or 'TOPIC:sql:<condition>'; repeat for more topics.",
)
@click.option("--message-model", type=click.Choice(["CLUSTERING", "BROADCASTING"]))
@click.option(
    "--orderly/--concurrent", default=None, help="Orderly: one message per queue at a time, under locks."
)
@click.option("--consume-from", type=click.Choice(["first", "last", "timestamp"]))
@click.option("--consume-timestamp-ms", type=int)
@click.option("--max-in-flight", type=int, help="Most unacknowledged deliveries at once (default 32).")
@click.option("--listen", help="Address for applications (default 127.0.0.1:7001).")
@click.option("--metrics-listen", help="Prometheus /metrics address (default 0.0.0.0:7002); '' disables.")
@click.option("--drain-timeout-ms", type=int)
@click.option("--instance-name", help="Client instance name (default: the host name).")
@click.option("--rebalance-ms", type=int)
@click.option("--persist-ms", type=int)
@click.option("--heartbeat-ms", type=int)
@click.option("--lock-renew-ms", type=int)
@click.option("--route-refresh-ms", type=int)
@click.option("--send-timeout-ms", type=int, help="Budget of one Send, retries included (default 10000).")
def sidecar_command(config_file: Path | None, **flags: object) -> None:
    """Be a member of a consumer group on behalf of an application in the same pod.

    Settings come from --config, then ORBITMQ_SIDECAR_<FIELD> environment variables, then flags.
    """
    from orbitmq.common.loop import run_on_fast_loop
    from orbitmq.sidecar.server import run
    from orbitmq.sidecar.settings import ENV_PREFIX, SidecarSettings

    if flags.get("namesrv") is None and os.environ.get(NAMESRV_ENV):
        flags["namesrv"] = os.environ[NAMESRV_ENV]
    if not flags.get("subscriptions"):
        flags["subscriptions"] = None
    else:
        flags["subscriptions"] = list(flags["subscriptions"])  # type: ignore[call-overload]
    settings = settings_or_exit(SidecarSettings, config_file, ENV_PREFIX, flags)
    serve(f"sidecar of {settings.group}", run(settings), run_on_fast_loop)
