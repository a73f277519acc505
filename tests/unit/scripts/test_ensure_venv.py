"""scripts/local-up and scripts/test reinstall orbitmq only when an install input changed.

A throw-away venv (ORBITMQ_VENV) whose `python` and `orbitmq` only record how they were
called stands in for the real one, so the scripts run for real but pip never does.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.timeout(60)

TEST_INSTALL = "python -m pip install --quiet -e .[test] -e ./operator[monitoring]"
"""The test extra also installs the operator's distribution, with its monitoring extra."""
_RECORDER = '#!/bin/sh\necho "$(basename "$0") $*" >> "$ORBITMQ_TEST_CALLS"\n'


@pytest.fixture
def fake_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name in ("python", "orbitmq"):
        (venv / "bin" / name).write_text(_RECORDER)
        (venv / "bin" / name).chmod(0o755)
    (venv / "pyvenv.cfg").write_text("version = 3.11.7\n")
    return venv


def _run(script: str, venv: Path, *args: str) -> list[str]:
    """Run a repo script against the fake venv; return the calls it made into the venv."""
    calls = venv.parent / "calls.txt"
    calls.unlink(missing_ok=True)
    env = dict(os.environ, ORBITMQ_VENV=str(venv), ORBITMQ_TEST_CALLS=str(calls))
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return calls.read_text().splitlines() if calls.exists() else []


def test_local_up_installs_on_the_first_start_only(fake_venv: Path, tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    first = _run("local-up", fake_venv, "--data-dir", data)
    assert "python -m pip install --quiet -e ." in first
    assert first[-1] == f"orbitmq local up --data-dir {data}"
    second = _run("local-up", fake_venv, "--data-dir", data)
    assert second == [f"orbitmq local up --data-dir {data}"]


def test_test_extra_is_installed_once_and_covers_the_base_install(fake_venv: Path) -> None:
    assert TEST_INSTALL in _run("ensure-venv", fake_venv, "test")
    assert _run("ensure-venv", fake_venv, "test") == []
    assert _run("ensure-venv", fake_venv) == []


def test_base_install_does_not_count_as_the_test_extra(fake_venv: Path) -> None:
    _run("ensure-venv", fake_venv)
    assert TEST_INSTALL in _run("ensure-venv", fake_venv, "test")


def test_a_changed_input_reinstalls(fake_venv: Path) -> None:
    _run("ensure-venv", fake_venv, "test")
    # A venv recreated with another Python is an input like pyproject.toml, setup.py, _native.c.
    (fake_venv / "pyvenv.cfg").write_text("version = 3.12.1\n")
    assert TEST_INSTALL in _run("ensure-venv", fake_venv, "test")
    assert _run("ensure-venv", fake_venv, "test") == []
