"""``orbitmq bench e2e --consume-only``: a small drain through the real command (name server and
broker as child processes) prints the drain's rate and its CPU per message on both sides."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)


def test_the_drain_figures(tmp_path: Path) -> None:
    flags = ["--consume-only", "--messages", "2000", "--json", "--dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", "bench", "e2e", *flags],
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = {f["figure"]: f for f in map(json.loads, done.stdout.splitlines()) if f.get("figure")}
    assert set(figures) == {"e2e_consume", "e2e_consume_client_us", "e2e_consume_broker_us"}
    assert figures["e2e_consume"]["value"] > 0 and figures["e2e_consume"]["baseline"] > 0
    for side in ("client", "broker"):
        figure = figures[f"e2e_consume_{side}_us"]
        assert figure["unit"] == "us/msg"
        # CPU per message: more than nothing, less than a millisecond even on a loaded machine.
        assert 0 < figure["value"] < 1000 and 0 < figure["baseline"] < 1000, figure
