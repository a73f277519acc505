"""Apache RocketMQ as ``orbitmq bench peer``'s baseline: the peer builds, a real name server and
broker start, a topic gets its 8 queues, and the Java driver's send and consume workloads report
what the contract (:mod:`orbitmq.bench.peer_workloads`) asks for.

The first run builds the peer with Maven (~10 s with a warm ~/.m2, longer when Maven Central
must be reached); later runs find it in the cache and take ~20 s, mostly the JVMs starting.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orbitmq.bench.peer_rocketmq import RocketMQCluster, RocketMQPeerError, build_peer
from orbitmq.bench.peer_workloads import TIMED_MARK, DriverResult, Workload

pytestmark = pytest.mark.timeout(600)  # a cold build downloads RocketMQ's jars

QUEUES = 8
SENT = 300
WARMUP = 50


@pytest.fixture(scope="module")
def built() -> Path:
    return build_peer()


def _drive(
    cluster: RocketMQCluster, workload: Workload, topic: str, group: str
) -> tuple[list[str], DriverResult]:
    argv = cluster.driver_command() + workload.flags(cluster.namesrv, topic, group)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    return lines, DriverResult.from_json(lines[-1])


def test_send_then_consume_through_rocketmq(built: Path, tmp_path: Path) -> None:
    topic = "peer_smoke"
    with RocketMQCluster(tmp_path, heap_mb=256) as cluster:
        cluster.create_topic(topic, QUEUES)

        lines, sent = _drive(cluster, Workload("send", SENT, in_flight=8, warmup=WARMUP), topic, "smoke_send")
        assert lines[:-1] == [TIMED_MARK]  # the mark, then the result: no log line on stdout
        assert (sent.workload, sent.messages, sent.errors) == ("send", SENT, 0)
        assert sent.msg_per_s > 0 and sent.seconds > 0
        assert sent.p50_ms is not None and sent.p99_ms is not None and 0 < sent.p50_ms <= sent.p99_ms
        assert sent.extra["cpu_s"] > 0
        # The broker holds the topic with its 8 queues, and the producer spread the sends over them.
        queue_dirs = tmp_path / "store" / "consumequeue" / topic
        assert sorted(int(queue.name) for queue in queue_dirs.iterdir()) == list(range(QUEUES))

        stored = SENT + WARMUP
        lines, consumed = _drive(cluster, Workload("consume", stored), topic, "smoke_consume")
        assert lines[:-1] == [TIMED_MARK]
        assert (consumed.workload, consumed.messages, consumed.errors) == ("consume", stored, 0)
        assert consumed.first_message_s is not None and consumed.first_message_s > 0
        assert consumed.msg_per_s > 0 and consumed.extra["cpu_s"] > 0

        # With a warm-up, the first messages drained are not timed (nor their CPU charged).
        warm = Workload("consume", SENT, warmup=WARMUP)
        lines, consumed = _drive(cluster, warm, topic, "smoke_consume_warm")
        assert lines[:-1] == [TIMED_MARK]
        assert (consumed.messages, consumed.errors) == (SENT, 0)
        # Present once the mark is passed; the JVM counts process CPU in 10 ms clock ticks, and
        # 300 messages already prefetched during the warm-up may drain inside one tick.
        assert consumed.extra["cpu_s"] >= 0
        broker_pid = cluster.broker_pid
        assert Path(f"/proc/{broker_pid}").exists()
    with pytest.raises(ProcessLookupError):
        os.kill(broker_pid, 0)  # stopped and reaped
    assert _processes_of(tmp_path) == []


def test_build_names_the_missing_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBITMQ_PEER_CACHE", str(tmp_path / "cache"))  # nothing built there
    monkeypatch.setenv("PATH", str(tmp_path))  # neither mvn nor java
    with pytest.raises(
        RocketMQPeerError, match=r"needs mvn and java on PATH.*apt-get install -y maven openjdk-17"
    ):
        build_peer()


def _processes_of(work_dir: Path) -> list[int]:
    """Processes whose command line names ``work_dir`` (each RocketMQ JVM's -Duser.home does)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(work_dir).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue  # exited meanwhile
    return found


def test_a_broker_that_cannot_start_says_why(built: Path, tmp_path: Path) -> None:
    why = r"(?s)broker exited with 1 while starting.*Too small maximum heap"
    with pytest.raises(RocketMQPeerError, match=why), RocketMQCluster(tmp_path, heap_mb=1):
        pytest.fail("a broker with a 1 MB heap started")
    assert _processes_of(tmp_path) == []  # the name server it had started is stopped too


def test_servers_do_not_outlive_the_python_process_that_started_them(tmp_path: Path) -> None:
    # A child starts a server (a stand-in for a JVM, in its own session as RocketMQ's are) and
    # ends without stopping it, as a benchmark that dies on an error would.
    child = f"""
import os, sys
from pathlib import Path
from orbitmq.bench.peer_rocketmq import ServerProcess
work_dir = Path({str(tmp_path)!r})
server = ServerProcess("broker", ["sleep", "300"], work_dir, work_dir, dict(os.environ))
print(server.popen.pid, flush=True)
sys.exit(3)
"""
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 3, done.stderr
    server_pid = int(done.stdout.split()[0])
    deadline = time.monotonic() + 5
    while Path(f"/proc/{server_pid}").exists() and _state(server_pid) != "Z":
        assert time.monotonic() < deadline, f"server {server_pid} still runs after its parent exited"
        time.sleep(0.05)


def _state(pid: int) -> str:
    """The process state letter from /proc (Z: a zombie waiting for init to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
