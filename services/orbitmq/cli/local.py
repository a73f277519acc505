"""``orbitmq local up``: the project's main job — a local cluster, no Kubernetes needed."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click

from orbitmq.local.auth import AUTH_FILE
from orbitmq.local.datadir import MASTER_DIR
from orbitmq.local.supervisor import LOCAL_SEGMENT_BYTES, LocalCluster, run_local
from orbitmq.store.config import MIB

DEFAULT_DATA_DIR = Path("~/.orbitmq/local").expanduser()


@click.group("local")
def local() -> None:
    """Run a cluster on this machine as child processes."""


@local.command("up")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_DATA_DIR,
    show_default=True,
    help=f"Where the brokers keep their data: the master in {MASTER_DIR}/ (with or without "
    "--slaves), slaves in broker-a-s1/ …; the next start continues on it.",
)
@click.option(
    "--namesrv-port",
    type=click.IntRange(0, 65535),
    default=9876,
    show_default=True,
    help="0 picks a free port (printed when the cluster is up).",
)
@click.option(
    "--broker-port",
    type=click.IntRange(0, 65535),
    default=10911,
    show_default=True,
    help="The master's port; slave N listens N x 10 above it.",
)
@click.option(
    "--namesrv-metrics-port",
    type=click.IntRange(0, 65535),
    help="Default: --namesrv-port + 1 (9877; any free port when that is 0).",
)
@click.option(
    "--broker-metrics-port",
    type=click.IntRange(0, 65535),
    help="Default: --broker-port + 2 (10913; any free port when that is 0); slave N + N x 10.",
)
@click.option(
    "--slaves",
    type=click.IntRange(0, 4),
    default=0,
    show_default=True,
    help="Slaves of the broker: the master becomes SYNC_MASTER and a lost master fails over.",
)
@click.option(
    "--failover-after-ms",
    type=click.IntRange(500, 600_000),
    default=3_000,
    show_default=True,
    help="How long a master may be unseen before a slave replaces it.",
)
@click.option(
    "--segment-mib",
    type=click.IntRange(5, 1024),  # a segment must hold the largest message (4 MiB)
    default=LOCAL_SEGMENT_BYTES // MIB,
    show_default=True,
    help="Commit-log segment size of each new broker store, in MiB. A broker reserves a whole "
    "segment on disk at once; production brokers use 1024. Existing stores keep their size.",
)
@click.option(
    "--auth",
    is_flag=True,
    help="Turn authentication and authorization on, as a super user generated on the first such "
    "start and kept in the data directory's auth.env (source it for the CLI and clients).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the endpoints as one JSON line on stdout (notes go to stderr).",
)
def up(
    data_dir: Path,
    namesrv_port: int,
    broker_port: int,
    namesrv_metrics_port: int | None,
    broker_metrics_port: int | None,
    slaves: int,
    failover_after_ms: int,
    segment_mib: int,
    auth: bool,
    as_json: bool,
) -> None:
    """Start a name server and a broker (with --slaves, a master/slave group with failover);
    stop them cleanly on Ctrl-C, SIGTERM or SIGHUP. A component that dies is restarted on its
    address (at most 3 times a minute). If this process is killed, its children get SIGTERM; a
    start that finds an earlier run's processes, or a port taken, names the PIDs."""
    cluster = LocalCluster(
        data_dir=data_dir.expanduser(),
        namesrv_port=namesrv_port,
        broker_port=broker_port,
        namesrv_metrics_port=namesrv_metrics_port,
        broker_metrics_port=broker_metrics_port,
        slaves=slaves,
        failover_after_ms=failover_after_ms,
        segment_bytes=segment_mib * MIB,
        auth=auth,
    )

    def report(running: LocalCluster) -> None:
        endpoints = running.endpoints()
        auth_file = running.data_dir / AUTH_FILE
        auth_info = (
            {"auth_env": str(auth_file), "access_key": running.credentials.access_key}
            if running.credentials is not None
            else {}
        )
        if as_json:
            print(
                json.dumps(
                    {
                        "namesrv": running.namesrv.address,
                        "data_dir": str(running.data_dir),
                        "components": endpoints,
                        **auth_info,
                    }
                ),
                flush=True,
            )
            return
        print(f"orbitmq local cluster is up (master data in {running.data_dir / MASTER_DIR})")
        for name, info in endpoints.items():
            print(f"  {name:<18} {info['address']:<22} metrics {info['metrics']}")
        print(f"  export ORBITMQ_NAMESRV={running.namesrv.address}")
        if running.credentials is not None:
            print(f"  auth on, super user {running.credentials.access_key}: source {auth_file}")
        print(
            "  Ctrl-C stops it; the next `orbitmq local up` with this --data-dir, with or without "
            "--slaves, continues on the master's data.",
            flush=True,
        )

    sys.exit(asyncio.run(run_local(cluster, report)))
