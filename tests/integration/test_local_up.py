"""``orbitmq local up`` as a user runs it: real child processes, SIGTERM/SIGHUP/SIGKILL, restarts
on the same data with and without slaves, leftovers named, one-line errors."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from orbitmq.client.admin import Admin
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(120)


MIB = 1024 * 1024


ANY_FREE_PORTS = [
    arg
    for flag in ("--namesrv-port", "--broker-port", "--namesrv-metrics-port", "--broker-metrics-port")
    for arg in (flag, "0")
]
"""Every port of a local cluster on a free port (a later flag of the same name wins)."""


def _local_up(data_dir: Path, *args: str) -> list[str]:
    """The ``orbitmq local up`` command line for ``data_dir``."""
    return [sys.executable, "-m", "orbitmq.cli.main", "local", "up", "--data-dir", str(data_dir), *args]


def _up(data_dir: Path, *extra: str) -> tuple[subprocess.Popen[str], dict[str, object]]:
    process = subprocess.Popen(
        _local_up(data_dir, "--json", *ANY_FREE_PORTS, *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, process.stderr.read() if process.stderr else ""
    return process, json.loads(line)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(p) for p in text.split()]


def _stop(process: subprocess.Popen[str], signum: int = signal.SIGTERM) -> tuple[int, list[int], str]:
    """Signal the supervisor, wait; with --json everything it printed on stdout must be JSON.
    Returns its exit code, the children it had and its stderr."""
    children = _children(process.pid)
    process.send_signal(signum)
    out, err = process.communicate(timeout=30)
    for line in out.splitlines():
        json.loads(line)  # a human note here would break `local up --json | jq`
    return process.returncode, children, err


def _wait_gone(pids: list[int], timeout_s: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (alive := [pid for pid in pids if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


async def _send_and_read(namesrv: str, body: bytes) -> list[bytes]:
    async with Admin(namesrv) as admin:
        await admin.create_topic("LocalTopic", read_queue_nums=1, write_queue_nums=1)
        route = await admin.route("LocalTopic")
        address = route.broker_datas[0].broker_addrs[0]  # broker id 0: the master
    async with grpc.aio.insecure_channel(address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        if body:
            reply = await stub.SendMessage(
                broker_pb2.SendMessageRequest(
                    producer_group="P",
                    topic="LocalTopic",
                    queue_id=0,
                    messages=[common_pb2.Message(topic="LocalTopic", body=body)],
                )
            )
            assert reply.status == broker_pb2.SendStatus.SEND_OK, reply
        pulled = await stub.PullMessage(
            broker_pb2.PullMessageRequest(
                consumer_group="C",
                topic="LocalTopic",
                queue_id=0,
                queue_offset=0,
                max_msg_nums=32,
                commit_offset=-1,
            )
        )
        return [decode(r).body for r in pulled.records]


async def test_up_serves_stops_cleanly_and_restarts_on_the_same_data(tmp_path: Path) -> None:
    data_dir = tmp_path / "local"
    process, info = _up(data_dir)
    try:
        components = info["components"]
        assert set(components) == {"namesrv", "broker broker-a"}  # type: ignore[arg-type]
        assert all(str(c["metrics"]).startswith("http://") for c in components.values())  # type: ignore[union-attr]
        assert await _send_and_read(str(info["namesrv"]), b"first life") == [b"first life"]
    finally:
        code, children, _ = _stop(process)
    assert code == 0 and len(children) == 2
    assert not [pid for pid in children if _alive(pid)], "children left behind"
    assert (data_dir / "broker-a" / "commitlog").is_dir()

    process, info = _up(data_dir)
    try:
        assert await _send_and_read(str(info["namesrv"]), b"second life") == [b"first life", b"second life"]
    finally:
        assert _stop(process)[0] == 0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_busy_port_is_reported_not_hung(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            _local_up(tmp_path / "d", *ANY_FREE_PORTS, "--namesrv-port", str(port)),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert "namesrv" in result.stderr and str(port) in result.stderr


def _pids(info: dict[str, object]) -> dict[str, int]:
    return {name: int(c["pid"]) for name, c in info["components"].items()}  # type: ignore[attr-defined]


async def _ha_state(address: str) -> broker_pb2.HaState | None:
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            return await broker_pb2_grpc.BrokerStub(channel).GetHaState(
                broker_pb2.GetHaStateRequest(), timeout=2
            )
    except grpc.aio.AioRpcError:
        return None


async def _wait_for(what: str, check, timeout_s: float = 30):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = await check()
        if result:
            return result
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


async def _replicating(master: str) -> bool:
    state = await _ha_state(master)
    return (
        state is not None and state.role != "SLAVE" and bool(state.slaves) and state.slaves[0].lag_bytes == 0
    )


async def test_single_and_master_slave_runs_continue_on_the_masters_data(tmp_path: Path) -> None:
    """The new user's path: topics made on a single broker are there with --slaves 1 and after."""
    data_dir = tmp_path / "local"
    process, info = _up(data_dir)
    try:
        assert await _send_and_read(str(info["namesrv"]), b"single") == [b"single"]
    finally:
        assert _stop(process)[0] == 0
    segments = list((data_dir / "broker-a" / "commitlog").iterdir())
    assert [s.stat().st_size for s in segments] == [64 * MIB], "local brokers reserve 64 MiB, not 1 GiB"

    process, info = _up(data_dir, "--slaves", "1")
    try:
        assert set(info["components"]) == {"namesrv", "broker broker-a", "broker broker-a-s1"}  # type: ignore[arg-type]
        master = str(info["components"]["broker broker-a"]["address"])  # type: ignore[index]
        await _wait_for("the slave to catch up", lambda: _replicating(master))
        assert await _send_and_read(str(info["namesrv"]), b"group") == [b"single", b"group"]
    finally:
        assert _stop(process)[0] == 0
    assert sorted(p.name for p in data_dir.iterdir() if p.is_dir()) == ["broker-a", "broker-a-s1"]

    process, info = _up(data_dir)
    try:
        assert await _send_and_read(str(info["namesrv"]), b"") == [b"single", b"group"]
    finally:
        assert _stop(process)[0] == 0


async def test_after_a_failover_a_single_broker_continues_on_the_promoted_data(tmp_path: Path) -> None:
    """The promoted slave holds the newest data; the next single-broker run must be on it, and
    able to write (its recorded SYNC_MASTER role would refuse every send without a slave)."""
    data_dir = tmp_path / "local"
    process, info = _up(data_dir, "--slaves", "1", "--failover-after-ms", "500", "--segment-mib", "5")
    try:
        components = info["components"]
        master = str(components["broker broker-a"]["address"])  # type: ignore[index]
        slave = str(components["broker broker-a-s1"]["address"])  # type: ignore[index]
        await _wait_for("the slave to catch up", lambda: _replicating(master))
        assert await _send_and_read(str(info["namesrv"]), b"before") == [b"before"]
        await _wait_for("the slave to catch up", lambda: _replicating(master))
        os.kill(_pids(info)["broker broker-a"], signal.SIGKILL)
        await _wait_for("the slave's promotion", lambda: _replicating(slave))
        assert await _send_and_read(str(info["namesrv"]), b"after") == [b"before", b"after"]
    finally:
        assert _stop(process)[0] == 0

    process, info = _up(data_dir, "--segment-mib", "5")
    try:
        assert await _send_and_read(str(info["namesrv"]), b"single") == [b"before", b"after", b"single"]
    finally:
        code, _, err = _stop(process)
    assert code == 0
    assert "broker-a-s1 became master" in err


def test_children_die_with_a_killed_supervisor(tmp_path: Path) -> None:
    """SIGKILL leaves the supervisor no chance to stop them: the kernel's parent-death signal does."""
    process, info = _up(tmp_path / "local", "--segment-mib", "5")
    children = list(_pids(info).values())
    process.kill()
    process.wait(10)
    assert not _wait_gone(children), "children outlived a SIGKILLed supervisor"
    process, _ = _up(tmp_path / "local", "--segment-mib", "5")  # ports, lock and run file are free
    assert _stop(process)[0] == 0


def test_closing_the_terminal_stops_the_cluster(tmp_path: Path) -> None:
    process, info = _up(tmp_path / "local", "--segment-mib", "5")
    code, _, _ = _stop(process, signal.SIGHUP)
    assert code == 0
    assert not _wait_gone(list(_pids(info).values()), 5)
    assert not (tmp_path / "local" / "local-up.json").exists()


def test_a_leftover_broker_is_named_with_its_pid(tmp_path: Path) -> None:
    """A broker left on the data directory (an older run, a manual start) is named, not traced back."""
    data_dir = tmp_path / "local"
    leftover = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orbitmq.cli.main",
            "broker",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
            "--data-dir",
            str(data_dir / "broker-a"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert leftover.stdout is not None and "listening on" in leftover.stdout.readline()
        result = _run_up(data_dir)
    finally:
        leftover.terminate()
        leftover.wait(15)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert f"PID {leftover.pid}" in line and f"kill {leftover.pid}" in line and str(data_dir) in line


def _run_up(data_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _local_up(data_dir, *ANY_FREE_PORTS, *extra), capture_output=True, text=True, timeout=60
    )


def test_an_unusable_data_dir_is_one_line(tmp_path: Path) -> None:
    result = _run_up(Path("/proc/nope"))
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert "/proc/nope" in line and "--data-dir" in line


def test_a_leftover_name_server_on_the_port_is_named(tmp_path: Path) -> None:
    """A name server an older release left running (no run file, no lock) holds the port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    leftover = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orbitmq.cli.main",
            "namesrv",
            "--listen",
            f"127.0.0.1:{port}",
            "--metrics-listen",
            "",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert leftover.stdout is not None and "listening on" in leftover.stdout.readline()
        result = _run_up(tmp_path / "local", "--namesrv-port", str(port))
    finally:
        leftover.terminate()
        leftover.wait(15)
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert f"port {port}" in line and f"PID {leftover.pid}" in line and f"kill {leftover.pid}" in line


def _free_bases(*spans: int) -> list[int]:
    """For each span, a port p with p .. p + span all free now (so the ports derived from it are
    free too), the runs apart from each other: ports are held until every run is chosen (the
    kernel often hands out neighbouring ports, and one cluster's broker port must not be the
    other's name server metrics port)."""
    held: list[socket.socket] = []
    bases = []
    try:
        for span in spans:
            for _ in range(50):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", 0))
                    base = probe.getsockname()[1]
                run = [socket.socket() for _ in range(span + 1)]
                try:
                    for offset, sock in enumerate(run):
                        sock.bind(("127.0.0.1", base + offset))
                except OSError:
                    for sock in run:
                        sock.close()
                    continue
                held += run
                bases.append(base)
                break
            else:
                raise AssertionError("no run of free ports found")
    finally:
        for sock in held:
            sock.close()
    return bases


def _free_base(span: int) -> int:
    return _free_bases(span)[0]


def _ports_only(data_dir: Path, namesrv_port: int, broker_port: int) -> list[str]:
    """``local up`` given only its two ports, as a user starting a second cluster does."""
    return _local_up(
        data_dir, "--namesrv-port", str(namesrv_port), "--broker-port", str(broker_port), "--segment-mib", "5"
    )


def _up_at(
    data_dir: Path, namesrv_port: int, broker_port: int
) -> tuple[subprocess.Popen[str], dict[str, object]]:
    process = subprocess.Popen(
        [*_ports_only(data_dir, namesrv_port, broker_port), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.wait(30)
        raise AssertionError(process.stderr.read() if process.stderr else "no output")
    return process, json.loads(line)


def _metrics_port(info: dict[str, object], component: str) -> int:
    url = str(info["components"][component]["metrics"])  # type: ignore[index]
    return int(url.rsplit(":", 1)[1].split("/")[0])


def test_two_clusters_given_only_their_ports_and_a_clash_names_port_and_owner(tmp_path: Path) -> None:
    """The metrics ports follow --namesrv-port/--broker-port, so a second cluster given only
    those starts beside the first; a third that wants a port of the first is told which port,
    for what, and which process of which cluster has it (not that its own new data directory
    is in use)."""
    ns_a, br_a, ns_b, br_b = _free_bases(1, 2, 1, 2)
    a, info_a = _up_at(tmp_path / "a", ns_a, br_a)
    try:
        assert _metrics_port(info_a, "namesrv") == ns_a + 1
        assert _metrics_port(info_a, "broker broker-a") == br_a + 2
        b, info_b = _up_at(tmp_path / "b", ns_b, br_b)
        try:
            assert _metrics_port(info_b, "broker broker-a") == br_b + 2
        finally:
            assert _stop(b)[0] == 0
        clash = subprocess.run(
            _ports_only(tmp_path / "c", _free_base(1), br_a), capture_output=True, text=True, timeout=60
        )
    finally:
        assert _stop(a)[0] == 0
    assert clash.returncode == 1
    [line] = clash.stderr.strip().splitlines()
    broker_pid = _pids(info_a)["broker broker-a"]
    assert f"port {br_a} (broker broker-a, --broker-port) is taken by PID {broker_pid}" in line, line
    assert f"another running `orbitmq local up` (PID {a.pid}, data in {tmp_path / 'a'})" in line, line
    assert "in use by" not in line and "kill" not in line, "a healthy cluster is not a leftover"


def test_a_killed_broker_is_restarted_on_its_address_without_slaves(tmp_path: Path) -> None:
    data_dir = tmp_path / "local"
    process, info = _up(data_dir, "--segment-mib", "5")
    try:
        namesrv = str(info["namesrv"])
        address = str(info["components"]["broker broker-a"]["address"])  # type: ignore[index]
        assert asyncio.run(_send_and_read(namesrv, b"before")) == [b"before"]
        killed = _pids(info)["broker broker-a"]
        os.kill(killed, signal.SIGKILL)

        def restarted() -> int | None:
            run = json.loads((data_dir / "local-up.json").read_text())
            pid = run["components"]["broker broker-a"]
            return pid if pid != killed else None

        deadline = time.monotonic() + 30
        while not (new_pid := restarted()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert new_pid and process.poll() is None, "the supervisor restarted the broker and runs on"
        assert asyncio.run(_send_and_read(namesrv, b"after")) == [b"before", b"after"]
    finally:
        code, _, err = _stop(process)
    assert code == 0, err
    assert "broker broker-a exited unexpectedly (exit code -9)" in err
    assert f"restarting it on {address} (restart 1 of at most 3 in 60 s)" in err
