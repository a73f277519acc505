"""The clock-step and disk-full faults as ``orbitmq chaos`` runs them, in one run of two rounds:
the master's wall clock stepped two minutes forward and back (libfaketime, that process only),
then its store (a tmpfs mount of its own) filled past the refusal ratio for a few seconds. The
step lands and changes nothing the checkers see. Sends to the full master are refused with
DISK_FULL and recorded failed (none stored), writes come back within a disk check of the
ballast's removal, nothing acknowledged is lost or reordered, and every store reads back whole
from its first byte afterwards."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from orbitmq.chaos import clockfault
from orbitmq.chaos.clockfault import library
from orbitmq.chaos.history import History, Outcome
from orbitmq.cli.main import main

pytestmark = pytest.mark.timeout(120)

SEED = 26
"""Draws clock-step-master (forward), then disk-full-master."""


@pytest.mark.skipif(os.geteuid() != 0, reason="tmpfs store mounts need root")
@pytest.mark.skipif(library() is None, reason="needs libfaketime (apt-get install libfaketime)")
def test_a_clock_step_and_a_full_disk_lose_nothing_and_writes_resume(tmp_path: Path) -> None:
    out, history_file, data = tmp_path / "result.json", tmp_path / "history.json", tmp_path / "data"
    command = [sys.executable, "-m", "orbitmq.cli.main", "--log-level", "error", "chaos", "--rounds", "2"]
    command += ["--fault", "clock-step-master", "--fault", "disk-full-master", "--seed", str(SEED)]
    command += ["--workload", "sync", "--workload", "batch", "--workload", "ordered", "--no-report"]
    command += ["--data-dir", str(data), "--out", str(out), "--history", str(history_file), "--json"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=110)
    log = (data / "local-up.log").read_text()
    assert finished.returncode == 0, f"{finished.stdout[-3000:]}\n{finished.stderr[-3000:]}\n{log[-3000:]}"
    result = json.loads(finished.stdout)
    assert result["ok"]
    assert result["disk"]["store_mounts"] == ["broker-a", "broker-a-s1"]
    assert result["disk"]["store_check"] == []
    assert not any(p.is_mount() for p in data.iterdir())  # unmounted after the run
    history = History.load(history_file)
    step, full = history.faults
    assert (step.fault, full.fault) == ("clock-step-master", "disk-full-master")

    stepped = int(step.note.split("stepped ")[1].split(" s ")[0])
    assert stepped >= 90, step.note
    read = re.search(r"read ([+-]\d+) s while stepped, ([+-]\d+) s after", step.note)
    assert read, step.note
    assert abs(int(read[1]) - stepped) <= 1 and abs(int(read[2])) <= 1, step.note  # landed, went back

    assert "broker refusing" in full.note and "NOT" not in full.note, full.note
    assert full.healed_at is not None
    refused = [s for s in history.sends if "DISK_FULL" in s.error]
    assert len(refused) > 20
    assert {s.outcome for s in refused} == {Outcome.FAILED}
    assert all(s.ended >= full.injected_at - 1.0 and s.started <= full.healed_at + 1.5 for s in refused)
    checks = result["checks"]
    assert checks["unacknowledged"]["summary"]["failed"]["stored_anyway"] == 0
    assert checks["acknowledged_consumed"]["summary"]["lost_stored"] == 0
    held = full.healed_at - full.injected_at
    assert held < checks["recovery"]["summary"]["per_fault"][1]["writes_s"] < held + 2.5


def test_a_clock_fault_asked_for_without_libfaketime_is_refused_before_any_cluster_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(clockfault, "LIBRARY_GLOBS", ())  # as on a machine without the package
    refused = CliRunner().invoke(main, ["chaos", "--fault", "clock-step-master", "--no-report"])
    assert refused.exit_code == 1, refused.output
    assert "clock faults cannot run here: libfaketime is not installed" in refused.output
