"""The metrics reference against real processes: every ``orbitmq_*`` family a running name
server and broker expose, after a message went through, is on ``reference/metrics.md`` with
its type (the page is generated from source; this checks the source reading misses nothing)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from orbitmq.docsgen import metrics_page

pytestmark = pytest.mark.timeout(180)

_TYPE = re.compile(r"^# TYPE (orbitmq_\w+) (\w+)$", re.MULTILINE)
_ROW = re.compile(r'^\| <a id="([a-z0-9-]+)"></a>`\w+` \| (\w+) \|', re.MULTILINE)


def _orbitmq(*args: str, env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", *args],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
    )


def _families(text: str) -> dict[str, str]:
    """Family name -> type, from an exposition; a Counter's ``_created`` gauge and the
    ``_total`` suffix are prometheus_client's spelling of one counter family."""
    out: dict[str, str] = {}
    for name, kind in _TYPE.findall(text):
        if name.endswith("_created"):
            continue
        out[name.removesuffix("_total")] = kind
    return out


def test_every_family_a_live_name_server_and_broker_expose_is_on_the_page(tmp_path: Path) -> None:
    ports = [arg for flag in ("--namesrv-port", "--broker-port") for arg in (flag, "0")]
    cluster = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orbitmq.cli.main",
            "local",
            "up",
            "--json",
            "--data-dir",
            str(tmp_path),
            *ports,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert cluster.stdout is not None
        line = cluster.stdout.readline()
        assert line, cluster.stderr.read() if cluster.stderr else ""
        up = json.loads(line)
        env = {**os.environ, "ORBITMQ_NAMESRV": up["namesrv"]}
        _orbitmq("produce", "--topic", "DocsMetrics", "--body", "one", env=env)
        _orbitmq(
            "consume",
            "--topic",
            "DocsMetrics",
            "--group",
            "docs-metrics",
            "--from",
            "first",
            "--count",
            "1",
            env=env,
        )
        live: dict[str, str] = {}
        for component in up["components"].values():
            with urllib.request.urlopen(component["metrics"], timeout=10) as response:
                live.update(_families(response.read().decode()))
    finally:
        cluster.send_signal(signal.SIGTERM)
        cluster.communicate(timeout=30)

    page = {anchor: kind for anchor, kind in _ROW.findall(metrics_page.render())}
    assert len(live) > 30  # the broker's and the name server's families, not an empty scrape
    missing = {name: kind for name, kind in live.items() if name.replace("_", "-") not in page}
    assert not missing, f"exposed but not on reference/metrics.md: {missing}"
    for name, kind in live.items():
        assert page[name.replace("_", "-")] == kind, name
