"""``spark-jobs/jobs/lag_report.py`` as an operator runs it: ``spark-submit --master local[2]``
against a real cluster, its Parquet output checked row by row against the brokers' offsets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sparkkit import ThreadCluster

from orbitmq.client.admin import Admin
from orbitmq.client.message import Message
from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.client.queue import MessageQueue

pytestmark = pytest.mark.timeout(180)

JOB = Path(__file__).resolve().parents[3] / "spark-jobs" / "jobs" / "lag_report.py"
BIN = Path(sys.executable).parent


def _run(
    args: list[str], *, submit: bool, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The job with ``args``, as a user runs it: no SPARK_LOCAL_IP (the job picks the local
    driver address itself), ``env`` added (e.g. ORBITMQ_NAMESRV instead of --namesrv)."""
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME")},
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        **(env or {}),
    }
    command = (
        [
            str(BIN / "spark-submit"),
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            str(JOB),
            *args,
        ]
        if submit
        else [sys.executable, str(JOB), *args]
    )
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=150)


def test_help_and_bad_arguments_exit_before_spark_starts() -> None:
    shown = _run(["--help"], submit=False)
    assert shown.returncode == 0 and "--namesrv" in shown.stdout and "--output" in shown.stdout
    bad = _run(["--namesrv", "127.0.0.1:1", "--group", "bad group!", "--output", "/tmp/x"], submit=False)
    assert bad.returncode == 2 and "--group" in bad.stderr and "invalid group name" in bad.stderr, bad.stderr
    line = json.loads(bad.stdout.strip().splitlines()[-1])  # argparse's errors end with it too
    assert line["ok"] is False and line["status"] == "error" and "--group" in line["error"], line


def test_unknown_group_is_refused_with_a_json_error_line(cluster: ThreadCluster, tmp_path: Path) -> None:
    done = _run(
        ["--namesrv", cluster.namesrv, "--group", "NoSuchLagGroup", "--output", str(tmp_path)], submit=False
    )
    assert done.returncode == 2, done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["status"] == "error" and "NoSuchLagGroup" in line["error"]


def test_lag_report_under_spark_submit_appends_the_brokers_offsets(
    spark: Any, cluster: ThreadCluster, tmp_path: Path
) -> None:
    topic, group = "SparkLag", "spark-lag-group"
    cluster.create_topic(topic, 2)  # four queues over two brokers
    cluster.send([Message(topic, f"lag-{i}".encode()) for i in range(40)])
    queues = cluster.queues(topic)

    async def commit_and_read_progress() -> list[Any]:
        async with PullConsumer(group, cluster.namesrv) as consumer:
            for index, mq in enumerate(queues):
                await consumer.commit_offset(MessageQueue(topic, mq.broker_name, mq.queue_id), index * 2)
        async with Admin(cluster.namesrv) as admin:
            return list(await admin.consume_progress(group, topic))

    progress = cluster.run(commit_and_read_progress())
    expected = {
        (group, q.topic, q.broker_name, q.queue_id): (q.consumer_offset, q.broker_offset, q.lag)
        for q in progress
    }
    assert len(expected) == 4 and sum(v[2] for v in expected.values()) == 40 - (0 + 2 + 4 + 6)

    out = tmp_path / "lag"
    # The name servers from ORBITMQ_NAMESRV, no SPARK_LOCAL_IP: the local driver on 127.0.0.1
    # (Spark's default, the host's first non-loopback address, may not be bindable).
    done = _run(
        ["--group", group, "--output", str(out)], submit=True, env={"ORBITMQ_NAMESRV": cluster.namesrv}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "BlockManagerId(driver, 127.0.0.1," in done.stderr, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert (
        summary["ok"] is True
        and summary["status"] == "ok"
        and summary["groups"] == 1
        and summary["queues"] == 4
    )
    assert summary["total_lag"] == 28
    assert "spark-lag-group" in done.stdout  # the summary table

    rows = spark.read.parquet(str(out)).collect()
    got = {(r.group, r.topic, r.broker, r.queue): (r.committed_offset, r.max_offset, r.lag) for r in rows}
    assert len(rows) == 4 and got == expected
    assert {str(r.date) for r in rows} == {summary["at"][:10]}  # partition discovery reads a date
    assert all(p.name.startswith("date=") for p in out.iterdir() if p.is_dir())
