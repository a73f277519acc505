"""``orbitmq`` command line (click). Subcommands are added by the roles as they arrive."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from orbitmq import __version__


def _made(_ctx: click.Context, _param: click.Parameter, value: Path | None) -> Path | None:
    """The directory, created (with its parents) when it does not exist yet."""
    if value is not None:
        value.mkdir(parents=True, exist_ok=True)
    return value


work_dir_option = click.option(
    "--dir",
    "work_dir",
    type=click.Path(file_okay=False, path_type=Path),
    callback=_made,
    help="Where the benchmark's temporary stores go, created if missing (default: the system temp dir).",
)
"""Every bench command's ``--dir``."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="orbitmq")
@click.option(
    "--log-level",
    default="WARNING",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def main(log_level: str) -> None:
    """orbitmq: a RocketMQ-style message queue."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@main.group()
def bench() -> None:
    """Benchmarks that print figures with a same-run baseline."""


@bench.command("store")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per figure.")
@click.option(
    "--messages",
    default=200_000,
    show_default=True,
    type=click.IntRange(1_000, 10_000_000),
    help="Messages for the append and read figures.",
)
@click.option(
    "--sync-messages",
    default=60_000,
    show_default=True,
    type=click.IntRange(1_000, 10_000_000),
    help="Messages for the SYNC_FLUSH group-commit figure.",
)
@click.option(
    "--rss-gib",
    default=4.0,
    show_default=True,
    type=click.FloatRange(0, 64),
    help="Size of the store opened for open_rss_mb (0 skips it).",
)
@work_dir_option
def bench_store(
    as_json: bool, messages: int, sync_messages: int, rss_gib: float, work_dir: Path | None
) -> None:
    """Storage engine: appends (async, group commit), sequential reads, RSS after open."""
    from orbitmq.bench.figures import emit
    from orbitmq.bench.store import run
    from orbitmq.cli.progress import wanted

    run(
        lambda f: emit(f, as_json),
        messages=messages,
        sync_messages=sync_messages,
        rss_gib=rss_gib,
        work_dir=work_dir,
        progress=wanted(as_json),
    )


@bench.command("send")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per figure.")
@click.option("--messages", default=20_000, show_default=True, type=click.IntRange(1_000, 1_000_000))
@work_dir_option
@click.option(
    "--replication", is_flag=True, help="Instead: SYNC_MASTER vs ASYNC_MASTER sends and slave catch-up."
)
@click.option(
    "--secure",
    is_flag=True,
    help="Instead: a broker with TLS, authentication and authorization against one without, "
    "alternating rounds; also the TLS handshake and the checks' per-call cost.",
)
def bench_send(as_json: bool, messages: int, work_dir: Path | None, replication: bool, secure: bool) -> None:
    """Broker send/pull figures against a bare gRPC echo server (also: orbitmq bench pull)."""
    from orbitmq.bench.figures import emit
    from orbitmq.cli.progress import activity, wanted

    if replication and secure:
        raise click.UsageError("--replication and --secure are separate runs: give one")
    with activity("benchmarking the broker", enabled=wanted(as_json)) as echo:
        if secure:
            from orbitmq.bench.secure import SecureSetupError
            from orbitmq.bench.secure_send import run as run_secure

            try:
                run_secure(lambda f: emit(f, as_json, echo), messages=messages, work_dir=work_dir)
            except SecureSetupError as error:
                raise click.UsageError(str(error)) from None
            return
        if replication:
            from orbitmq.bench.replication import run as run_replication

            run_replication(lambda f: emit(f, as_json, echo), messages=messages, work_dir=work_dir)
            return
        from orbitmq.bench.broker import run

        run(lambda f: emit(f, as_json, echo), messages=messages, work_dir=work_dir)


bench.add_command(bench_send, "pull")


@bench.command("sidecar")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per figure.")
@click.option("--messages", default=50_000, show_default=True, type=click.IntRange(1_000, 10_000_000))
@click.option("--max-in-flight", default=64, show_default=True, type=click.IntRange(1, 10_000))
@work_dir_option
def bench_sidecar(as_json: bool, messages: int, max_in_flight: int, work_dir: Path | None) -> None:
    """Deliveries through the consumer sidecar against a direct push consumer."""
    from orbitmq.bench.figures import emit
    from orbitmq.bench.sidecar import run
    from orbitmq.cli.progress import activity, wanted

    with activity("benchmarking the sidecar", enabled=wanted(as_json)) as echo:
        run(
            lambda f: emit(f, as_json, echo),
            messages=messages,
            max_in_flight=max_in_flight,
            work_dir=work_dir,
        )


@bench.command("e2e")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per figure.")
@click.option("--messages", default=100_000, show_default=True, type=click.IntRange(1_000, 10_000_000))
@click.option(
    "--backlog",
    default=200_000,
    show_default=True,
    type=click.IntRange(1_000, 10_000_000),
    help="Backlog under the slow consumer of the memory figure.",
)
@click.option("--latency-seconds", default=10.0, show_default=True, type=click.FloatRange(1, 600))
@click.option("--rss-seconds", default=15.0, show_default=True, type=click.FloatRange(1, 600))
@click.option(
    "--consume-only", is_flag=True, help="Only the drain of --messages (e2e_consume and its CPU per message)."
)
@work_dir_option
@click.option(
    "--secure",
    is_flag=True,
    help="Instead: a cluster with TLS, authentication and authorization against one without, "
    "alternating rounds (batched produce, consume, send latency; --messages and --latency-seconds).",
)
def bench_e2e(
    as_json: bool,
    messages: int,
    backlog: int,
    latency_seconds: float,
    rss_seconds: float,
    consume_only: bool,
    work_dir: Path | None,
    secure: bool,
) -> None:
    """Producers and push consumers end to end: throughput, latency, consumer memory."""
    from orbitmq.bench.e2e import run
    from orbitmq.bench.figures import emit
    from orbitmq.cli.progress import activity, wanted

    if secure and consume_only:
        raise click.UsageError("--consume-only and --secure are separate runs: give one")
    with activity("benchmarking end to end", enabled=wanted(as_json)) as echo:
        if secure:
            from orbitmq.bench.secure import SecureSetupError
            from orbitmq.bench.secure_e2e import run as run_secure

            try:
                run_secure(
                    lambda f: emit(f, as_json, echo),
                    messages=messages,
                    latency_s=latency_seconds,
                    work_dir=work_dir,
                )
            except SecureSetupError as error:
                raise click.UsageError(str(error)) from None
            return
        run(
            lambda f: emit(f, as_json, echo),
            messages=messages,
            backlog=backlog,
            latency_s=latency_seconds,
            rss_s=rss_seconds,
            work_dir=work_dir,
            consume_only=consume_only,
        )


@bench.command("v2")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per figure.")
@click.option("--messages", default=5_000, show_default=True, type=click.IntRange(100, 1_000_000))
@click.option(
    "--in-flight", default=16, show_default=True, type=click.IntRange(1, 1_024), help="Sends outstanding."
)
@work_dir_option
@click.option(
    "--clients",
    default="python,java",
    show_default=True,
    help="Official clients to measure: python (rocketmq-python-client), java (rocketmq-client-java, "
    "needs java and mvn).",
)
def bench_v2(as_json: bool, messages: int, in_flight: int, work_dir: Path | None, clients: str) -> None:
    """The official Apache RocketMQ 5 clients through orbitmq proxy, against orbitmq's own client."""
    from orbitmq.bench.figures import emit
    from orbitmq.bench.v2 import CLIENTS, run
    from orbitmq.cli.progress import activity, wanted

    chosen = tuple(name.strip() for name in clients.split(",") if name.strip())
    if not chosen or set(chosen) - set(CLIENTS):
        raise click.BadParameter(f"{clients!r}: one or more of {', '.join(CLIENTS)}", param_hint="--clients")
    with activity("benchmarking the RocketMQ 5 protocol", enabled=wanted(as_json)) as echo:
        run(
            lambda f: emit(f, as_json, echo),
            messages=messages,
            in_flight=in_flight,
            work_dir=work_dir,
            clients=chosen,
        )


@bench.command("peer")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per figure.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1, 100))
@click.option(
    "--messages",
    default=20_000,
    show_default=True,
    type=click.IntRange(10, 10_000_000),
    help="N: sync sends at 8 and 32 in flight; N/4 at 1, 10N batched and consumed, "
    "N/2 and 3N/2 paced latency messages.",
)
@click.option(
    "--only",
    default=",".join(
        ("send_1", "send_8", "send_32", "batch_128", "consume", "latency_1000", "latency_10000")
    ),
    show_default=True,
    help="Comma-separated workloads to run.",
)
@click.option(
    "--systems",
    default="rocketmq,orbitmq",
    show_default=True,
    help="Which systems to run (orbitmq alone: figures without a baseline).",
)
@click.option(
    "--heap-mb",
    default=1024,
    show_default=True,
    type=click.IntRange(128, 65_536),
    help="RocketMQ's JVM heap.",
)
@click.option(
    "--warmup",
    default=20_000,
    show_default=True,
    type=click.IntRange(0, 10_000_000),
    help="Untimed messages before each send, batch and consume run (RocketMQ's JIT needs ~20 000).",
)
@click.option(
    "--work-dir", type=click.Path(file_okay=False, path_type=Path), help="Where the clusters' stores go."
)
def bench_peer(
    as_json: bool,
    rounds: int,
    messages: int,
    only: str,
    systems: str,
    heap_mb: int,
    warmup: int,
    work_dir: Path | None,
) -> None:
    """orbitmq against Apache RocketMQ 5.3.3 on this machine, through each one's public client."""
    from orbitmq.bench.figures import emit
    from orbitmq.bench.peer import REPORTED, SYSTEMS, run
    from orbitmq.bench.peer_rocketmq import RocketMQPeerError

    picked = tuple(name.strip() for name in only.split(",") if name.strip())
    unknown = sorted(set(picked) - set(REPORTED))
    if unknown or not picked:
        raise click.BadParameter(
            f"{', '.join(unknown) or 'nothing'}: choose from {', '.join(REPORTED)}", param_hint="--only"
        )
    chosen_systems = tuple(name.strip() for name in systems.split(",") if name.strip())
    if (
        not chosen_systems
        or set(chosen_systems) - set(SYSTEMS)
        or len(set(chosen_systems)) < len(chosen_systems)
    ):
        raise click.BadParameter(f"{systems!r}: one or both of {', '.join(SYSTEMS)}", param_hint="--systems")
    try:
        run(
            lambda f: emit(f, as_json),
            rounds=rounds,
            messages=messages,
            only=tuple(name for name in REPORTED if name in picked),
            systems=chosen_systems,
            heap_mb=heap_mb,
            warmup=warmup,
            work_dir=work_dir,
        )
    except RocketMQPeerError as error:  # no Java or Maven, a build or a start that failed
        raise click.ClickException(str(error)) from None


@bench.command("spark")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per figure.")
@click.option("--messages", default=1_000_000, show_default=True, type=click.IntRange(10_000, 10_000_000))
@click.option(
    "--max-offsets-per-trigger",
    default=100_000,
    show_default=True,
    type=click.IntRange(1_000, 10_000_000),
    help="The stream's micro-batch size (at most half of --messages).",
)
@work_dir_option
def bench_spark(as_json: bool, messages: int, max_offsets_per_trigger: int, work_dir: Path | None) -> None:
    """The Spark data source reading a backlog (batch count, stream) against a pull consumer."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise click.UsageError("bench spark needs PySpark: pip install 'orbitmq[spark]'") from None
    from orbitmq.bench.figures import emit
    from orbitmq.bench.spark import run

    if messages < 2 * max_offsets_per_trigger:
        raise click.BadParameter(
            f"{messages} must be at least twice --max-offsets-per-trigger {max_offsets_per_trigger} "
            "(the sustained rate leaves the first micro-batch out)",
            param_hint="--messages",
        )
    run(
        lambda f: emit(f, as_json),
        messages=messages,
        work_dir=work_dir,
        max_offsets_per_trigger=max_offsets_per_trigger,
    )


@bench.command("fuzz")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: calls, statuses, problems.")
@click.option(
    "--requests",
    default=10_000,
    show_default=True,
    type=click.IntRange(100, 10_000_000),
    help="Requests to each server, shared equally by its RPCs.",
)
@click.option("--seed", default=27, show_default=True, type=int, help="Hypothesis seed (a run repeats).")
@work_dir_option
def bench_fuzz(as_json: bool, requests: int, seed: int, work_dir: Path | None) -> None:
    """Property-based requests (hypothesis) at every RPC of the name server, broker, proxy and
    sidecar; exits 1 when a server failed a check (tests/integration/fuzz runs it small)."""
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        raise click.UsageError("bench fuzz needs hypothesis: pip install 'orbitmq[test]'") from None
    from orbitmq.bench.fuzz import run

    if not run(requests, work_dir, as_json, seed=seed):
        raise SystemExit(1)


@bench.command("soak")
@click.option("--json", "as_json", is_flag=True, help="The whole result as one JSON object (samples too).")
@click.option(
    "--duration-s",
    default=3_600.0,
    show_default=True,
    type=click.FloatRange(10, 7 * 86_400),
    help="Seconds of traffic at half the measured capacity.",
)
@click.option("--capacity-s", default=20.0, show_default=True, type=click.FloatRange(2, 600))
@click.option("--sample-s", default=10.0, show_default=True, type=click.FloatRange(0.5, 600))
@click.option(
    "--churn",
    default=10_000,
    show_default=True,
    type=click.IntRange(0, 10_000_000),
    help="Short-lived clients that come and go before the soak (0: none).",
)
@click.option(
    "--expiry-ms",
    default=10_000,
    show_default=True,
    type=click.IntRange(3_000, 600_000),
    help="The broker's client expiry (channel_expiry_ms) for this run.",
)
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the JSON result here too."
)
@work_dir_option
def bench_soak(
    as_json: bool,
    duration_s: float,
    capacity_s: float,
    sample_s: float,
    churn: int,
    expiry_ms: int,
    out: Path | None,
    work_dir: Path | None,
) -> None:
    """Clients that come and go, then steady traffic at half capacity through the client, the
    proxy and the sidecar: every server's tables back at their level, growth of its memory,
    files, threads and tasks, p99 drift, loss; exits 1 on a problem (benchmarks/README.md)."""
    import json

    from orbitmq.bench.soak import run
    from orbitmq.bench.soak_report import summary, verdict

    result = run(
        lambda line: click.echo(line, err=True),
        duration_s=duration_s,
        capacity_s=capacity_s,
        sample_s=sample_s,
        churn=churn,
        expiry_ms=expiry_ms,
        work_dir=work_dir,
    )
    text = json.dumps(result, indent=1, sort_keys=True)
    if out is not None:
        out.write_text(text + "\n")
    click.echo(text if as_json else summary(result))
    if verdict(result):
        raise SystemExit(1)


def _register_commands() -> None:
    from orbitmq.cli.admin import admin
    from orbitmq.cli.broker import broker_command
    from orbitmq.cli.chaos import chaos
    from orbitmq.cli.consume import consume
    from orbitmq.cli.local import local
    from orbitmq.cli.namesrv import namesrv
    from orbitmq.cli.produce import produce
    from orbitmq.cli.proxy import proxy
    from orbitmq.cli.sidecar import sidecar_command

    main.add_command(broker_command)
    main.add_command(admin)
    main.add_command(chaos)
    main.add_command(consume)
    main.add_command(local)
    main.add_command(namesrv)
    main.add_command(produce)
    main.add_command(proxy)
    main.add_command(sidecar_command)


_register_commands()

if __name__ == "__main__":
    main()
