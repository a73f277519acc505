"""``orbitmq local up`` as a user runs it: real child processes, SIGTERM, restart on the same data."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from orbitmq.client.admin import Admin
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(120)


def _up(data_dir: Path) -> tuple[subprocess.Popen[str], dict[str, object]]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orbitmq.cli.main",
            "local",
            "up",
            "--data-dir",
            str(data_dir),
            "--json",
            "--namesrv-port",
            "0",
            "--broker-port",
            "0",
            "--namesrv-metrics-port",
            "0",
            "--broker-metrics-port",
            "0",
        ],
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


def _stop(process: subprocess.Popen[str]) -> tuple[int, list[int]]:
    children = _children(process.pid)
    process.send_signal(signal.SIGTERM)
    code = process.wait(30)
    return code, children


async def _send_and_read(namesrv: str, body: bytes) -> list[bytes]:
    async with Admin(namesrv) as admin:
        await admin.create_topic("LocalTopic", read_queue_nums=1, write_queue_nums=1)
        route = await admin.route("LocalTopic")
        address = route.broker_datas[0].broker_addrs[0]
    async with grpc.aio.insecure_channel(address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        if body:
            await stub.SendMessage(
                broker_pb2.SendMessageRequest(
                    producer_group="P",
                    topic="LocalTopic",
                    queue_id=0,
                    messages=[common_pb2.Message(topic="LocalTopic", body=body)],
                )
            )
        reply = await stub.PullMessage(
            broker_pb2.PullMessageRequest(
                consumer_group="C",
                topic="LocalTopic",
                queue_id=0,
                queue_offset=0,
                max_msg_nums=32,
                commit_offset=-1,
            )
        )
        return [decode(r).body for r in reply.records]


async def test_up_serves_stops_cleanly_and_restarts_on_the_same_data(tmp_path: Path) -> None:
    data_dir = tmp_path / "local"
    process, info = _up(data_dir)
    try:
        components = info["components"]
        assert set(components) == {"namesrv", "broker broker-a"}  # type: ignore[arg-type]
        assert all(str(c["metrics"]).startswith("http://") for c in components.values())  # type: ignore[union-attr]
        assert await _send_and_read(str(info["namesrv"]), b"first life") == [b"first life"]
    finally:
        code, children = _stop(process)
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
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "orbitmq.cli.main",
                "local",
                "up",
                "--data-dir",
                str(tmp_path / "d"),
                "--namesrv-port",
                str(port),
                "--broker-port",
                "0",
                "--namesrv-metrics-port",
                "0",
                "--broker-metrics-port",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert "namesrv" in result.stderr and str(port) in result.stderr
