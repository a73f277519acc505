"""``spark-jobs/jobs/archive.py`` under ``spark-submit --master local[2]`` against a real cluster:
runs that resume from the last archived offsets (a queue added mid-way included), and runs
SIGKILLed mid-write and between the Parquet commit and the offsets file, then rerun — every
message in the Parquet archive exactly once, checked row by row against what was produced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sparkkit import Place, ThreadCluster, spark_submit

from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.store.record import StoredMessage

pytestmark = pytest.mark.timeout(480)

JOB = Path(__file__).resolve().parents[3] / "spark-jobs" / "jobs" / "archive.py"
ENV = {
    **os.environ,
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
    "SPARK_LOCAL_IP": "127.0.0.1",
}


def _command(args: list[str]) -> list[str]:
    return spark_submit(JOB, args)


def _archive(namesrv: str, topic: str, out: Path, *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        _command(["--namesrv", namesrv, "--topic", topic, "--output", str(out), *extra]),
        env=ENV,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["status"] == "ok", summary
    return summary


@pytest.fixture
def launched() -> Iterator[list[subprocess.Popen[str]]]:
    """spark-submit processes started by a test, each in a session of its own, killed at the end."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


def _start(
    launched: list[subprocess.Popen[str]], args: list[str], log: Path, **env: str
) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        _command(args),
        env={**ENV, **env},
        stdout=log.open("w"),  # spark-submit merges the Python driver's stderr into its stdout
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the JVM, the Python driver and Spark's Python workers: one group
    )
    launched.append(process)
    return process


def _kill(process: subprocess.Popen[str]) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


def _send_batches(cluster: ThreadCluster, topic: str, prefix: str, batches: int, size: int) -> None:
    """``batches`` batch sends of ``size`` messages (tags and keys on each), round robin."""

    async def send() -> None:
        async with Producer("spark-archive-test", cluster.namesrv) as producer:
            for b in range(batches):
                messages = [
                    Message(topic, f"{prefix}-{b}-{i}".encode(), tags=f"t{i % 3}", keys=[f"k{b}-{i}"])
                    for i in range(size)
                ]
                await producer.send_batch(messages)

    cluster.run(send())


def _produced(cluster: ThreadCluster, topic: str) -> dict[Place, StoredMessage]:
    return cluster.stored(topic, "spark-archive-check")


def _assert_archive_is(spark: Any, out: Path, expected: dict[Place, StoredMessage]) -> None:
    """Every produced message is in the archive exactly once, with its body, tags, keys, msg id."""
    rows = spark.read.parquet(str(out)).collect()
    places = [(r.broker, r.queue, r.queue_offset) for r in rows]
    assert len(places) == len(set(places)), "a message archived twice"
    assert set(places) == set(expected), (
        f"missing {sorted(set(expected) - set(places))[:5]}, extra {sorted(set(places) - set(expected))[:5]}"
    )
    for row in rows:
        message = expected[(row.broker, row.queue, row.queue_offset)]
        assert row.body == message.body and row.tags == message.properties.get("TAGS")
        assert row.keys == list(message.keys) and row.topic == message.topic
        assert str(row.date) == time.strftime("%Y-%m-%d", time.gmtime(message.store_timestamp_ms / 1000))


def test_help_and_bad_arguments_exit_before_spark_starts() -> None:
    shown = subprocess.run([sys.executable, str(JOB), "--help"], capture_output=True, text=True, env=ENV)
    assert shown.returncode == 0 and "--topic" in shown.stdout and "--output" in shown.stdout
    for args, words in (
        (["--namesrv", "nohost", "--topic", "T", "--output", "/tmp/x"], ("--namesrv", "host:port")),
        (["--namesrv", "127.0.0.1:1", "--topic", "bad topic!", "--output", "/tmp/x"], ("--topic",)),
        (
            ["--namesrv", "127.0.0.1:1", "--topic", "T", "--output", "/tmp/x", "--min-partitions", "0"],
            ("--min-partitions", "1 or more"),
        ),
    ):
        bad = subprocess.run([sys.executable, str(JOB), *args], capture_output=True, text=True, env=ENV)
        assert bad.returncode == 2 and all(w in bad.stderr for w in words), bad.stderr


def test_unknown_topic_is_refused_with_a_json_error_line(cluster: ThreadCluster, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(JOB),
            "--namesrv",
            cluster.namesrv,
            "--topic",
            "NoSuchArchiveTopic",
            "--output",
            str(tmp_path / "a"),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["status"] == "error" and "--topic" in line["error"] and "NoSuchArchiveTopic" in line["error"]
    assert not (tmp_path / "a").exists()


def test_runs_resume_from_the_last_archived_offsets_across_a_queue_added_mid_way(
    spark: Any, cluster: ThreadCluster, tmp_path: Path
) -> None:
    topic, out = "SparkArchive", tmp_path / "archive"
    cluster.create_topic(topic, 2)  # four queues over two brokers
    _send_batches(cluster, topic, "first", 8, 5)
    cluster.create_topic(topic, 3)  # a queue more on each broker, mid-way
    _send_batches(cluster, topic, "second", 12, 5)
    first = _produced(cluster, topic)
    assert {place[:2] for place in first} >= {("broker-a", 2), ("broker-b", 2)}

    one = _archive(cluster.namesrv, topic, out)
    assert (one["run"], one["rows"], one["expected"], one["removed_by_retention"]) == (1, 100, 100, 0)
    assert one["queues"] == 6
    _assert_archive_is(spark, out, first)
    offsets = json.loads((out / "_offsets" / "run-000001.json").read_text())
    assert sum(offsets["offsets"][topic].values()) == 100

    _send_batches(cluster, topic, "third", 7, 3)
    two = _archive(cluster.namesrv, topic, out)
    assert (two["run"], two["rows"], two["expected"], two["retried_leftovers"]) == (2, 21, 21, 0)
    _assert_archive_is(spark, out, _produced(cluster, topic))

    idle = _archive(cluster.namesrv, topic, out)  # nothing new: no run
    assert idle["run"] is None and idle["rows"] == 0 and idle["last_run"] == 2
    _assert_archive_is(spark, out, _produced(cluster, topic))


def _wait_for(path_glob: tuple[Path, str], process: subprocess.Popen[str], within: float) -> None:
    folder, pattern = path_glob
    deadline = time.monotonic() + within
    while not (folder.exists() and any(folder.glob(pattern))):
        assert process.poll() is None, f"the job exited ({process.returncode}) before {pattern} appeared"
        assert time.monotonic() < deadline, f"{pattern} did not appear under {folder} within {within} s"
        time.sleep(0.02)


def test_runs_killed_mid_write_and_before_the_offsets_file_rerun_without_loss_or_duplicates(
    spark: Any, cluster: ThreadCluster, tmp_path: Path, launched: list[subprocess.Popen[str]]
) -> None:
    topic, out = "SparkArchiveKill", tmp_path / "archive"
    cluster.create_topic(topic, 2)
    _send_batches(cluster, topic, "a", 40, 50)  # 2 000 messages
    args = ["--namesrv", cluster.namesrv, "--topic", topic, "--output", str(out), "--min-partitions", "16"]

    # Killed while Spark's tasks write (16 tasks on two cores): before anything is committed.
    writing = _start(launched, args, tmp_path / "writing.log")
    _wait_for((out, "_temporary/*"), writing, 150)
    _kill(writing)
    assert not (out / "_offsets").exists(), "the kill landed after the run had committed"
    rerun = _archive(cluster.namesrv, topic, out)
    assert (rerun["run"], rerun["rows"], rerun["expected"]) == (1, 2000, 2000)
    assert rerun["retried_leftovers"] >= 1  # the killed attempt's _temporary was removed first
    _assert_archive_is(spark, out, _produced(cluster, topic))

    # Killed after the Parquet commit and the check, before the offsets file: run 2's rows are in
    # the dataset, but run 2 is not committed, so the rerun is run 2 again over the same range.
    _send_batches(cluster, topic, "b", 10, 30)
    log = tmp_path / "stalled.log"
    stalled = _start(launched, args, log, ORBITMQ_ARCHIVE_FAILPOINT="before-offsets")
    _wait_for((tmp_path, "stalled.log"), stalled, 5)
    deadline = time.monotonic() + 150
    while "failpoint before-offsets" not in log.read_text():
        assert stalled.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the job did not reach the failpoint"
        time.sleep(0.1)
    assert list(out.glob("date=*/run=2/*.parquet"))  # committed to Parquet, not to the offsets
    _kill(stalled)
    assert not (out / "_offsets" / "run-000002.json").exists()
    assert spark.read.parquet(str(out)).count() == 2300  # the uncommitted rows are there once
    _send_batches(cluster, topic, "c", 4, 25)  # more arrives before the rerun
    again = _archive(cluster.namesrv, topic, out)
    assert (again["run"], again["rows"], again["expected"]) == (2, 400, 400)
    assert again["retried_leftovers"] >= 1
    _assert_archive_is(spark, out, _produced(cluster, topic))
