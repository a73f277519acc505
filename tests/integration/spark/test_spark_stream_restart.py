"""``spark-jobs/jobs/stream_copy.py`` under ``spark-submit --master local[2]``: a streaming query
from a topic into Spark's Parquet file sink, SIGKILLed in the middle of a micro-batch while a
producer keeps sending, restarted on its checkpoint — every message in the sink exactly once,
checked row by row against the brokers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sparkkit import Place, ThreadCluster, spark_submit

from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.store.record import StoredMessage

pytestmark = pytest.mark.timeout(360)

JOB = Path(__file__).resolve().parents[3] / "spark-jobs" / "jobs" / "stream_copy.py"
ENV = {
    **os.environ,
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
    "SPARK_LOCAL_IP": "127.0.0.1",
}


def _command(args: list[str]) -> list[str]:
    return spark_submit(JOB, args)


@pytest.fixture
def launched() -> Iterator[list[subprocess.Popen[str]]]:
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


def _start(launched: list[subprocess.Popen[str]], args: list[str], log: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        _command(args),
        env=ENV,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the JVM, the Python driver and Spark's Python workers: one group
    )
    launched.append(process)
    return process


def _kill(process: subprocess.Popen[str]) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


class Sender:
    """Sends a batch of 10 messages every 200 ms from a thread until stopped (a paced producer,
    so the capped query catches up)."""

    def __init__(self, cluster: ThreadCluster, topic: str) -> None:
        self._cluster, self._topic = cluster, topic
        self._stop = threading.Event()
        self.batches = 0
        self._thread = threading.Thread(target=self._run, name="stream-restart-sender", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # One producer for the whole run, so its round robin spreads the batches over the queues.
        producer = Producer("spark-stream-restart", self._cluster.namesrv)
        self._cluster.run(producer.start())
        try:
            while not self._stop.is_set():
                messages = [Message(self._topic, f"live-{self.batches}-{i}".encode()) for i in range(10)]
                self._cluster.run(producer.send_batch(messages))
                self.batches += 1
                time.sleep(0.2)
        finally:
            self._cluster.run(producer.close())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def _produced(cluster: ThreadCluster, topic: str) -> dict[Place, StoredMessage]:
    return cluster.stored(topic, "spark-stream-restart-check")


def _batches(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.glob("*") if p.name.isdigit()) if folder.exists() else []


def _wait(
    condition: Callable[[], bool], process: subprocess.Popen[str], log: Path, within: float, what: str
) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert process.poll() is None, f"the query exited before {what}: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        time.sleep(0.01)


def test_a_killed_stream_restarts_from_its_checkpoint_without_loss_or_duplicates(
    spark: Any, cluster: ThreadCluster, tmp_path: Path, launched: list[subprocess.Popen[str]]
) -> None:
    topic = "SparkStreamKill"
    cluster.create_topic(topic, 2)  # four queues over two brokers
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    args = [
        "--namesrv",
        cluster.namesrv,
        "--topic",
        topic,
        "--output",
        str(out),
        "--checkpoint",
        str(checkpoint),
    ]
    args += ["--max-offsets-per-trigger", "200", "--trigger-ms", "100"]
    sender = Sender(cluster, topic)
    try:
        first = _start(launched, args, tmp_path / "first.log")

        def mid_batch() -> bool:  # a batch planned (offsets logged) but not committed, after two done
            planned, done = _batches(checkpoint / "offsets"), _batches(checkpoint / "commits")
            return len(done) >= 2 and planned[-1] > done[-1]

        _wait(mid_batch, first, tmp_path / "first.log", 200, "two micro-batches and a third under way")
        _kill(first)
        done = _batches(checkpoint / "commits")
        time.sleep(1)  # the producer goes on while the query is down

        second = _start(launched, args, tmp_path / "second.log")
        _wait(
            lambda: len(_batches(checkpoint / "commits")) >= len(done) + 3,
            second,
            tmp_path / "second.log",
            200,
            "three micro-batches after the restart",
        )
    finally:
        sender.stop()
    produced = _produced(cluster, topic)
    assert sender.batches * 10 == len(produced)
    assert len({place[:2] for place in produced}) == 4  # every queue had messages

    def caught_up() -> bool:
        return spark.read.parquet(str(out)).count() >= len(produced)

    _wait(caught_up, second, tmp_path / "second.log", 200, f"all {len(produced)} messages in the sink")
    time.sleep(1)  # a batch more would show a duplicate
    _kill(second)

    rows = spark.read.parquet(str(out)).collect()  # the sink's log: committed batches only
    places = [(r.broker, r.queue, r.queue_offset) for r in rows]
    assert len(places) == len(set(places)), "a message copied twice"
    assert set(places) == set(produced), f"missing {sorted(set(produced) - set(places))[:5]}"
    assert all(r.body == produced[(r.broker, r.queue, r.queue_offset)].body for r in rows)

    # After two kills, a run with --available-now finds nothing left and prints its summary.
    ended = subprocess.run(
        _command([*args, "--available-now"]), env=ENV, capture_output=True, text=True, timeout=200
    )
    assert ended.returncode == 0, ended.stderr[-3000:]
    summary = json.loads(ended.stdout.strip().splitlines()[-1])
    assert summary["status"] == "ok" and summary["rows"] == 0, summary
    assert len(spark.read.parquet(str(out)).collect()) == len(produced)


def test_help_bad_arguments_and_an_unknown_topic_exit_before_spark_starts(
    cluster: ThreadCluster, tmp_path: Path
) -> None:
    def job(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(JOB), *args], capture_output=True, text=True, env=ENV, timeout=60
        )

    shown = job("--help")
    assert shown.returncode == 0 and "--checkpoint" in shown.stdout and "--available-now" in shown.stdout
    common = ["--output", str(tmp_path / "o"), "--checkpoint", str(tmp_path / "c")]
    bad = job("--namesrv", "127.0.0.1:1", "--topic", "T", *common, "--max-offsets-per-trigger", "0")
    assert bad.returncode == 2 and "--max-offsets-per-trigger" in bad.stderr and "1 or more" in bad.stderr
    unknown = job("--namesrv", cluster.namesrv, "--topic", "NoSuchStreamTopic", *common)
    assert unknown.returncode == 2, unknown.stderr
    line = json.loads(unknown.stdout.strip().splitlines()[-1])
    assert line["status"] == "error" and "--topic" in line["error"] and "NoSuchStreamTopic" in line["error"]
    assert not (tmp_path / "c").exists()
