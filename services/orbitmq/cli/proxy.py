"""``orbitmq proxy``: serve the Apache RocketMQ 5 protocol until SIGTERM/SIGINT."""

from __future__ import annotations

from pathlib import Path

import click

from orbitmq.cli.common import server_auth_options, server_tls_options, settings_or_exit, users_file_options
from orbitmq.cli.serve import serve
from orbitmq.proxy.settings import ENV_PREFIX, ProxySettings

"""Bad settings are a usage error (click's code for one), distinct from a crash (1)."""


@click.command("proxy")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="YAML/JSON settings file (field names as in ProxySettings).",
)
@click.option("--listen", help="gRPC address of apache.rocketmq.v2.MessagingService, default 0.0.0.0:8081.")
@click.option("--metrics-listen", help="Prometheus /metrics address, default 0.0.0.0:8082; '' disables.")
@click.option(
    "--namesrv",
    help="Name servers 'host:port;host:port' (',' works too; default ORBITMQ_NAMESRV, then 127.0.0.1:9876).",
)
@click.option("--advertise", help="host:port put into routes when a client names no access point.")
@server_tls_options
@server_auth_options
@users_file_options("the clients'", synced=True)
def proxy(config_file: Path | None, **flags: object) -> None:
    """Run a proxy: the official Apache RocketMQ 5 clients connect here (their endpoint).

    Settings come from --config, then ORBITMQ_PROXY_<FIELD> environment variables, then flags.
    With --auth-enabled the clients sign with their session credentials; the proxy signs its own
    calls to the cluster as ORBITMQ_PROXY_ACCESS_KEY (or ORBITMQ_ACCESS_KEY, or its super user).
    """
    from orbitmq.common.loop import run_on_fast_loop
    from orbitmq.proxy.server import run

    settings = settings_or_exit(ProxySettings, config_file, ENV_PREFIX, flags)
    serve("proxy", run(settings), run_on_fast_loop)  # a relay, like the sidecar: uvloop pays


if __name__ == "__main__":
    proxy()
