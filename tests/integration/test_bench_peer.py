"""``orbitmq bench peer``: the orbitmq driver runs every workload of the contract through the
public client against a real name server and broker, and the command prints every figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orbitmq.bench.peer import Plan, run_driver
from orbitmq.bench.peer_orbitmq import OrbitmqCluster
from orbitmq.bench.peer_workloads import Workload

pytestmark = pytest.mark.timeout(180)

WORKLOADS = ("send_1", "send_8", "send_32", "batch_128", "consume", "latency_1000", "latency_10000")
KEYS = {"figure", "value", "unit", "baseline", "baseline_name", "target", "ratio"}


def expected_figures() -> set[str]:
    """Every figure a run of all workloads prints, spelled out (not derived from the code)."""
    names = {"broker_rss_mb", "broker_private_mb", "broker_peak_rss_mb", "first_message_s"}
    for workload in WORKLOADS:
        cpu = {
            f"{workload}_cpu_us_per_msg",
            f"{workload}_broker_cpu_us_per_msg",
            f"{workload}_client_cpu_us_per_msg",
        }
        names |= cpu
        if workload.startswith("latency"):
            names |= {f"{workload}_p99_ms", f"{workload}_p50_ms", f"{workload}_msg_per_s"}
        else:
            names.add(workload)
            if workload != "consume":
                names.add(f"{workload}_p99_ms")
    for workload in ("send_8", "send_32"):
        names |= {
            f"{workload}_vs_autobatch",
            f"{workload}_vs_autobatch_p99_ms",
            f"{workload}_vs_autobatch_cpu_us_per_msg",
        }
    return names


def test_the_orbitmq_driver_runs_each_workload_and_marks_its_timed_phase(tmp_path: Path) -> None:
    runs = [
        Plan("send_8", Workload("send", 300, in_flight=8, warmup=30), topic="Sends"),
        Plan("batch_128", Workload("batch", 1000, in_flight=4, batch=128, warmup=128), topic="Sends"),
        Plan("consume", Workload("consume", 300 + 30 + 1000 + 128), topic="Sends"),
        Plan("latency_1000", Workload("latency", 200, rate=1000, warmup=100), topic="Paced"),
    ]
    with OrbitmqCluster(tmp_path / "cluster") as cluster:
        cluster.create_topic("Sends", 8)
        cluster.create_topic("Paced", 8)
        results = {
            plan.name: run_driver(cluster, plan, plan.topic, f"g_{plan.name}", tmp_path) for plan in runs
        }

    for name, measured in results.items():
        result = measured.result
        assert result.errors == 0, (name, result)
        assert measured.marked, name
        assert measured.messages == result.messages, name
        assert measured.client_cpu_s > 0, name
        assert measured.broker_cpu_s >= 0, name
        assert result.msg_per_s > 0, name
    assert results["send_8"].result.messages == 300
    assert results["send_8"].result.extra["calls"] == 300
    assert results["batch_128"].result.extra["calls"] == 8  # 7 of 128 and one of 104
    # The consumer drained everything the two send runs stored (warm-up messages included).
    assert results["consume"].result.extra["seen"] == 300 + 30 + 1000 + 128
    assert results["consume"].result.first_message_s is not None
    latency = results["latency_1000"].result
    assert latency.messages == 200
    assert latency.p50_ms is not None and latency.p99_ms is not None
    assert 0 < latency.p50_ms <= latency.p99_ms
    assert 0.15 < latency.seconds < 1.0  # 200 sends paced at 1 000 msg/s


def test_bench_peer_of_orbitmq_alone_prints_every_figure(tmp_path: Path) -> None:
    command = [
        "bench",
        "peer",
        "--json",
        "--rounds",
        "1",
        "--messages",
        "100",
        "--warmup",
        "50",
        "--systems",
        "orbitmq",
        "--work-dir",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", *command, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    figures = {}
    for line in done.stdout.splitlines():
        figure = json.loads(line)
        assert set(figure) == KEYS, figure
        figures[figure["figure"]] = figure
    assert set(figures) == expected_figures()
    for name, figure in figures.items():
        # CPU is read in clock ticks (10 ms): a broker may show none over a few dozen sends
        assert figure["value"] >= 0 if "cpu" in name else figure["value"] > 0, figure
        assert figure["baseline"] is None, name  # RocketMQ did not run
    assert list(tmp_path.iterdir()) == []  # each cluster's directory is removed


@pytest.mark.slow
@pytest.mark.timeout(600)  # the first run builds RocketMQ's peer with Maven
def test_bench_peer_prints_every_figure_with_a_rocketmq_baseline(tmp_path: Path) -> None:
    """One round of both systems with tiny counts (~90 s once the peer is built): the harness
    works end to end, not what the figures are."""
    command = ["bench", "peer", "--json", "--rounds", "1", "--messages", "100", "--warmup", "50"]
    command += ["--heap-mb", "256"]
    done = subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", *command, "--work-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    figures = {json.loads(line)["figure"]: json.loads(line) for line in done.stdout.splitlines()}
    assert set(figures) == expected_figures()
    for name, figure in figures.items():
        assert figure["baseline"] is not None, (name, figure, done.stderr[-3000:])
        assert "RocketMQ 5.3.3" in figure["baseline_name"], figure
        if "cpu" not in name:  # CPU is read in clock ticks: a tiny run may show none
            assert figure["value"] > 0 and figure["baseline"] > 0, figure
    assert "autoBatch" in figures["send_8_vs_autobatch"]["baseline_name"]
    # every run of both systems reported itself on standard error, none with errors
    for system in ("rocketmq", "orbitmq"):
        runs = [
            line
            for line in done.stderr.splitlines()
            if line.startswith(f"round 1/1 {system} ") and " msg/s" in line
        ]
        assert len(runs) == (10 if system == "rocketmq" else 8), runs
    assert "ERRORS" not in done.stderr
    assert list(tmp_path.iterdir()) == []
