"""A server that cannot start says so in one line naming the value, never a traceback.

Real processes against a real broker: its gRPC port serves as the busy port (for --listen and
--metrics-listen) and as the wrong --namesrv (a broker, not a name server).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)


def _orbitmq(*args: str) -> list[str]:
    return [sys.executable, "-m", "orbitmq.cli.main", *args]


@pytest.fixture(scope="module")
def running_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real broker; its address is both a busy port and "not a name server"."""
    data = tmp_path_factory.mktemp("running") / "broker"
    process = subprocess.Popen(
        _orbitmq("broker", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", str(data)),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert "listening on" in line, line
    yield line.split()[line.split().index("on") + 1]
    process.terminate()
    process.wait(15)


def _fails_in_one_line(*args: str, status: int = 1) -> str:
    """Run a command that must fail to start (exit status 2 for a bad setting, 1 for anything
    else); its only output is one line, which is returned."""
    result = subprocess.run(_orbitmq(*args), capture_output=True, text=True, timeout=60)
    assert result.returncode == status, result
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # no traceback, no gRPC C-core log line (E1124 … add_port.cc)
    return lines[0]


ROLE_ARGS = {
    "broker": lambda tmp_path: ["--data-dir", str(tmp_path / "b")],
    "namesrv": lambda tmp_path: [],
    "sidecar": lambda tmp_path: ["--group", "G", "--subscribe", "T", "--namesrv", "127.0.0.1:1"],
}


@pytest.mark.parametrize("role", ["broker", "namesrv", "sidecar"])
def test_a_busy_port_is_named(role: str, running_broker: str, tmp_path: Path) -> None:
    port = running_broker.rsplit(":", 1)[1]
    extra = ROLE_ARGS[role](tmp_path)
    line = _fails_in_one_line(role, "--listen", running_broker, "--metrics-listen", "", *extra)
    assert f"port {port} is already in use by PID" in line and "--listen" in line


@pytest.mark.parametrize("role", ["broker", "namesrv"])
def test_a_busy_metrics_port_is_named(role: str, running_broker: str, tmp_path: Path) -> None:
    port = running_broker.rsplit(":", 1)[1]
    extra = ["--data-dir", str(tmp_path / "b")] if role == "broker" else []
    line = _fails_in_one_line(role, "--listen", "127.0.0.1:0", "--metrics-listen", running_broker, *extra)
    assert f"port {port} is already in use" in line and "--metrics-listen" in line


def test_a_data_dir_that_cannot_be_created_is_named() -> None:
    line = _fails_in_one_line(
        "broker", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", "/proc/nope"
    )
    assert "/proc/nope" in line and "No such file or directory" in line


def test_a_locked_data_dir_names_the_pid_holding_it(tmp_path: Path) -> None:
    data = tmp_path / "held"
    holder = subprocess.Popen(
        _orbitmq("broker", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", str(data)),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert holder.stdout is not None and "listening on" in holder.stdout.readline()
        line = _fails_in_one_line(
            "broker", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", str(data)
        )
    finally:
        holder.terminate()
        holder.wait(15)
    assert str(data) in line and f"PID {holder.pid}" in line and f"kill {holder.pid}" in line


def test_a_namesrv_that_is_a_broker_is_named(running_broker: str, tmp_path: Path) -> None:
    line = _fails_in_one_line(
        "broker",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "",
        "--data-dir",
        str(tmp_path / "b"),
        "--namesrv",
        running_broker,
    )
    assert f"{running_broker} is not a name server" in line and "--namesrv" in line
    assert "Method not found" not in line


def test_a_segment_too_small_for_the_largest_message_is_a_settings_error(tmp_path: Path) -> None:
    line = _fails_in_one_line(
        "broker", "--segment-bytes", "1048576", "--data-dir", str(tmp_path / "b"), status=2
    )
    assert "segment_bytes (1048576)" in line and "max_message_bytes" in line


def test_a_lock_without_a_pid_in_its_file_still_names_the_holder(tmp_path: Path) -> None:
    """Brokers of older releases left the lock file empty: /proc/locks names the holder."""
    data = tmp_path / "old"
    data.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('locked', flush=True); time.sleep(60)",
            str(data / "lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        line = _fails_in_one_line(
            "broker", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", str(data)
        )
    finally:
        holder.kill()
        holder.wait(5)
    assert f"PID {holder.pid}" in line


def test_an_existing_store_with_another_segment_size_is_named(tmp_path: Path) -> None:
    data = tmp_path / "b"
    segment = data / "commitlog" / f"{0:020d}"
    segment.parent.mkdir(parents=True)
    with segment.open("wb") as file:  # a store made with 8 MiB segments
        file.truncate(8 * 1024 * 1024)
    line = _fails_in_one_line(
        "broker", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", str(data),
        "--segment-bytes", str(16 * 1024 * 1024),
    )  # fmt: skip
    assert "8388608-byte segments" in line and "--segment-bytes 8388608" in line and str(data) in line
