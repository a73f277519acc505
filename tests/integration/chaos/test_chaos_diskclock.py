"""The disk-full fault as ``orbitmq chaos`` runs it: the brokers' stores on tmpfs mounts of their
own, the master's filled past the refusal ratio for a few seconds, then the slave's. Sends to the
full master are refused with DISK_FULL and recorded failed (none stored), writes come back within
a disk check of the ballast's removal, nothing acknowledged is lost, and every store reads back
whole from its first byte afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orbitmq.chaos.history import History, Outcome

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.geteuid() != 0, reason="tmpfs store mounts need root"),
]


def test_a_full_master_disk_refuses_sends_as_failed_and_writes_resume(tmp_path: Path) -> None:
    out, history_file, data = tmp_path / "result.json", tmp_path / "history.json", tmp_path / "data"
    command = [sys.executable, "-m", "orbitmq.cli.main", "--log-level", "error", "chaos", "--rounds", "2"]
    command += ["--fault", "disk-full-master", "--fault", "disk-full-slave", "--seed", "1"]
    command += ["--data-dir", str(data), "--out", str(out), "--history", str(history_file), "--json"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=110)
    log = (data / "local-up.log").read_text()
    assert finished.returncode == 0, f"{finished.stdout[-3000:]}\n{finished.stderr[-3000:]}\n{log[-3000:]}"
    result = json.loads(finished.stdout)
    assert result["disk"]["store_mounts"] == ["broker-a", "broker-a-s1"]
    assert result["disk"]["store_check"] == []
    assert not any(p.is_mount() for p in data.iterdir())  # unmounted after the run
    history = History.load(history_file)
    master, slave = history.faults
    assert (master.fault, slave.fault) == ("disk-full-master", "disk-full-slave")
    assert "broker refusing" in master.note and "NOT" not in master.note, master.note
    assert master.healed_at is not None

    refused = [s for s in history.sends if "DISK_FULL" in s.error]
    assert len(refused) > 20
    assert {s.outcome for s in refused} == {Outcome.FAILED}
    assert all(master.injected_at - 1.0 <= s.started <= master.healed_at + 1.5 for s in refused)
    checks = result["checks"]
    assert checks["unacknowledged"]["summary"]["failed"]["stored_anyway"] == 0
    assert checks["acknowledged_consumed"]["summary"]["lost_stored"] == 0
    recovered = checks["recovery"]["summary"]["per_fault"][0]["writes_s"]
    assert master.healed_at - master.injected_at < recovered < master.healed_at - master.injected_at + 2.5
    assert not [s for s in history.sends if "DISK_FULL" in s.error and s.started > slave.injected_at - 1.0]
