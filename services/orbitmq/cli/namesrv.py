"""``orbitmq namesrv``: run a name server until SIGTERM/SIGINT."""

from __future__ import annotations

from pathlib import Path

import click

from orbitmq.cli.common import server_auth_options, server_tls_options, settings_or_exit, users_file_options
from orbitmq.cli.serve import serve
from orbitmq.nameserver.settings import ENV_PREFIX, NameServerSettings

"""Bad settings are a usage error (click's code for one), distinct from a crash (1)."""


@click.command("namesrv")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="YAML/JSON settings file (field names as in NameServerSettings).",
)
@click.option("--listen", help="gRPC address, default 0.0.0.0:9876.")
@click.option("--metrics-listen", help="Prometheus /metrics address, default 0.0.0.0:9877; '' disables.")
@click.option(
    "--cluster",
    help="With --auth-enabled: the Cluster:<name> its cluster-wide calls need, default DefaultCluster.",
)
@click.option("--broker-expiry-ms", type=int, help="Drop a broker silent this long, default 120000.")
@server_tls_options
@server_auth_options
@users_file_options("more", synced=False)
def namesrv(config_file: Path | None, **flags: object) -> None:
    """Run a name server: the route registry brokers register with and clients query.

    Settings come from --config, then ORBITMQ_NAMESRV_<FIELD> environment variables, then flags.
    """
    from orbitmq.nameserver.server import run

    settings = settings_or_exit(NameServerSettings, config_file, ENV_PREFIX, flags)
    serve("namesrv", run(settings))


if __name__ == "__main__":
    namesrv()
