"""promkit against real processes: a real `orbitmq namesrv` scraped by a real Prometheus.

Proves the kit the monitoring tests build on (start Prometheus, every target up, instant and
range queries, promtool) and holds the name server's /metrics to promtool's naming rules.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from promkit import fetch, promtool, run_prometheus

from orbitmq.local.supervisor import READY_LINE

# The first use may build the monitoring tools (minutes, cold); the session's own time is small.
pytestmark = pytest.mark.timeout(60 * 60)


@pytest.fixture
def namesrv() -> Iterator[str]:
    """A real `orbitmq namesrv` on free ports; its metrics URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORBITMQ_NAMESRV_")}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orbitmq.cli.main",
            "namesrv",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = READY_LINE.search(line)
        assert match, f"no startup line from orbitmq namesrv, got {line!r}"
        yield match["metrics"]
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def host_port(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


def test_prometheus_scrapes_a_real_name_server(namesrv: str, tmp_path: Path) -> None:
    started = time.time()
    with run_prometheus({"namesrv": [host_port(namesrv)]}, tmp_path / "prometheus") as prom:
        assert prom.value('up{job="namesrv"}') == 1.0
        names = {s["__name__"] for s in prom.series('{job="namesrv", __name__=~"orbitmq_.+"}')}
        assert "orbitmq_nameserver_registrations_total" in names, sorted(names)
        # A few scrapes later, the range query has a point per second of `up` (from the first
        # scrape on: the points before it have no sample to look back to).
        prom.wait_for('count_over_time(up{job="namesrv"}[1m]) >= 5')
        series = prom.query_range('up{job="namesrv"}', start=started, step=1)
        assert len(series) == 1 and len(series[0]["values"]) >= 3
        assert {value for _ts, value in series[0]["values"]} == {"1"}


def test_name_server_metrics_pass_promtool_check_metrics(namesrv: str) -> None:
    text = fetch(namesrv)
    assert "orbitmq_nameserver_" in text
    # promtool exits 1 and prints one line per naming/convention problem (stdout or stderr).
    done = promtool("check", "metrics", input=text, check=False)
    problems = (done.stdout + done.stderr).strip()
    assert done.returncode == 0 and not problems, f"promtool check metrics:\n{problems}"


def test_promtool_and_prometheus_are_the_pinned_release() -> None:
    version = promtool("--version").stdout
    assert "promtool, version 3.16.0" in version, version
