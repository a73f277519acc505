"""``orbitmq chaos``: a fault-injection run with checkers against a local cluster."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click

from orbitmq.chaos.checkers import CHECKERS
from orbitmq.chaos.faults import FAULTS, faults_for
from orbitmq.chaos.workloads import WORKLOADS


@click.command("chaos")
@click.option(
    "--rounds",
    type=click.IntRange(1, 10_000),
    default=3,
    show_default=True,
    help="Faults to inject, one per round.",
)
@click.option("--duration-s", type=click.FloatRange(1), help="Start no round after this many seconds.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the fault choice and timing.")
@click.option(
    "--fault",
    "faults",
    multiple=True,
    type=click.Choice(sorted(FAULTS)),
    help="A fault to choose from (repeatable; default: every fault this machine can run, the "
    "proxy's and the sidecar's only with the pop and sidecar workloads).",
)
@click.option(
    "--workload",
    "workloads",
    multiple=True,
    type=click.Choice(WORKLOADS),
    help="What the clients do (repeatable; default: all): sync, batch and ordered sends, "
    "transactions with check-backs, POP consumers through the proxy, an app through the sidecar.",
)
@click.option(
    "--checker",
    "checkers",
    multiple=True,
    type=click.Choice(list(CHECKERS)),
    help="A checker to run (repeatable; default: all).",
)
@click.option(
    "--failover-after-ms",
    type=click.IntRange(500, 600_000),
    default=3_000,
    show_default=True,
    help="The cluster's failover window (local up's option).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the cluster's data and local-up.log here (default: a temporary directory).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("chaos-result.json"),
    show_default=True,
    help="Where the JSON result is written.",
)
@click.option(
    "--history",
    "history_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also save every send, delivery and fault as JSON (orbitmq.chaos.history.History.load).",
)
@click.option(
    "--report",
    "report_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where the self-contained HTML report (plots, tables) is written (default: --out with .html;"
    " needs matplotlib: pip install 'orbitmq[report]').",
)
@click.option("--no-report", is_flag=True, help="Write no HTML report (no matplotlib needed).")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON result on stdout (progress to stderr).")
def chaos(
    rounds: int,
    duration_s: float | None,
    seed: int,
    faults: tuple[str, ...],
    workloads: tuple[str, ...],
    checkers: tuple[str, ...],
    failover_after_ms: int,
    data_dir: Path | None,
    out: Path,
    history_file: Path | None,
    report_file: Path | None,
    no_report: bool,
    as_json: bool,
) -> None:
    """Start `orbitmq local up --slaves 1` (SYNC_MASTER, SYNC_FLUSH), run producers and consumers
    through the client, inject one fault per round, then check that no acknowledged message was
    lost and no ordered key was reordered. Exits 1 when a checker fails."""
    from orbitmq.chaos.clockfault import CLOCK_FAULTS
    from orbitmq.chaos.clockfault import unavailable as clock_unavailable
    from orbitmq.chaos.diskfault import DISK_FAULTS
    from orbitmq.chaos.diskfault import unavailable as disk_unavailable
    from orbitmq.chaos.network import unavailable as network_unavailable
    from orbitmq.chaos.network import uses_network
    from orbitmq.chaos.report import default_report_path, missing_dependency
    from orbitmq.chaos.run import RunSettings, run

    if report_file is not None and no_report:
        raise click.UsageError("--report and --no-report exclude each other")
    if not no_report and (missing := missing_dependency()):
        raise click.ClickException(f"{missing}; or run with --no-report")
    idle = sorted(set(faults) - set(faults_for(list(workloads or WORKLOADS))))
    if idle:
        raise click.UsageError(
            f"{', '.join(idle)}: no chosen workload runs that process (the proxy runs for "
            "--workload pop, the sidecar for --workload sidecar)"
        )
    chosen = list(faults) or faults_for(list(workloads or WORKLOADS))
    if uses_network(chosen) and (reason := network_unavailable()):
        if faults:
            raise click.ClickException(f"network faults cannot run here: {reason}")
        chosen = [f for f in chosen if not uses_network([f])]
        print(f"chaos: network faults left out: {reason}", file=sys.stderr)
    for kind, names, why in (
        ("disk", DISK_FAULTS, disk_unavailable()),
        ("clock", CLOCK_FAULTS, clock_unavailable()),
    ):
        if why and set(chosen) & set(names):
            if faults:
                raise click.ClickException(f"{kind} faults cannot run here: {why}")
            chosen = [f for f in chosen if f not in names]
            print(f"chaos: {kind} faults left out: {why}", file=sys.stderr)
    settings = RunSettings(
        rounds=rounds,
        duration_s=duration_s,
        seed=seed,
        faults=chosen,
        workloads=list(workloads or WORKLOADS),
        checkers=list(checkers) or list(CHECKERS),
        data_dir=data_dir.expanduser() if data_dir else None,
        failover_after_ms=failover_after_ms,
        history_file=history_file,
        report_file=None if no_report else report_file or default_report_path(out),
    )
    result = asyncio.run(run(settings, lambda text: print(f"chaos: {text}", file=sys.stderr, flush=True)))
    out.write_text(json.dumps(result, indent=2) + "\n")
    if as_json:
        print(json.dumps(result))
    else:
        for check in result["checks"].values():  # type: ignore[union-attr]
            verdict = "ok" if check["ok"] else "FAILED"
            print(f"{check['name']:<22} {verdict:<7} {json.dumps(check['summary'])[:200]}")
        print(
            f"result in {out}"
            + ("" if settings.report_file is None else f", report in {settings.report_file}")
        )
    if result["stopped_early"]:
        print(f"chaos: stopped early: {result['stopped_early']}", file=sys.stderr)
    sys.exit(0 if result["ok"] else 1)
