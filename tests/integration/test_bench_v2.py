"""``orbitmq bench v2 --clients java``: the official Java client's sends and SimpleConsumer drains
through a real proxy (name server, broker and proxy as child processes, the client in its own
JVM) print their rates, the sends' p99 and each process's CPU per message, each against
orbitmq's own client measured in the same run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orbitmq.interop import java_client

pytestmark = pytest.mark.timeout(180)

JAVA_FIGURES = {
    "v2_java_send_per_s",
    "v2_java_send_p99_ms",
    "v2_java_send_client_cpu_us",
    "v2_java_send_proxy_cpu_us",
    "v2_java_send_broker_cpu_us",
    "v2_java_receive_ack_per_s",
    "v2_java_receive_client_cpu_us",
    "v2_java_receive_proxy_cpu_us",
    "v2_java_receive_broker_cpu_us",
}


def test_the_java_client_figures(tmp_path: Path) -> None:
    java_client.build()  # a cold Maven build is not what this test times
    flags = ["--clients", "java", "--messages", "100", "--json", "--dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", "bench", "v2", *flags],
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = {f["figure"]: f for f in map(json.loads, done.stdout.splitlines()) if f.get("figure")}
    assert set(figures) == JAVA_FIGURES
    for name in ("v2_java_send_per_s", "v2_java_receive_ack_per_s"):
        assert figures[name]["value"] > 0 and figures[name]["baseline"] > 0, figures[name]
        assert figures[name]["unit"] == "msg/s"
    assert 0 < figures["v2_java_send_p99_ms"]["value"] < 10_000
    for name in JAVA_FIGURES - {"v2_java_send_per_s", "v2_java_receive_ack_per_s", "v2_java_send_p99_ms"}:
        figure = figures[name]
        assert figure["unit"] == "us/msg"
        # Every process on the path did work for each message, and not seconds of it (the
        # broker's share of 100 messages may be under one 10 ms CPU tick).
        floor = -1 if "_broker_" in name else 0
        assert floor < figure["value"] < 100_000, figure
        # The proxy is on the official client's path only: no baseline to compare with.
        assert (figure["baseline"] is None) == ("_proxy_" in name), figure
