"""``orbitmq chaos`` with the gateway and transaction workloads: transactions with check-backs,
POP consumers through a real ``orbitmq proxy``, an application behind a real ``orbitmq sidecar``
(both run and restarted by the harness), while the proxy is killed and the sidecar paused; then
the run's own history, broken on purpose, must make the new checkers fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orbitmq.chaos.checkers import check_groups, check_transactions, recovery
from orbitmq.chaos.history import Delivery, History, Outcome

pytestmark = pytest.mark.timeout(120)

SEED = 2
"""Draws kill-proxy, then pause-sidecar."""
FAULTS = ["kill-proxy", "pause-sidecar"]


def test_transactions_pop_and_sidecar_through_gateway_faults(tmp_path: Path) -> None:
    out, history_file = tmp_path / "result.json", tmp_path / "history.json"
    command = [sys.executable, "-m", "orbitmq.cli.main", "--log-level", "error", "chaos", "--rounds", "2"]
    command += ["--seed", str(SEED), "--data-dir", str(tmp_path / "data"), "--out", str(out)]
    command += ["--workload", "transaction", "--workload", "pop", "--workload", "sidecar"]
    command += [a for fault in FAULTS for a in ("--fault", fault)]
    command += ["--history", str(history_file), "--no-report", "--json"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=110)
    logs = "\n".join(
        (tmp_path / "data" / name).read_text()[-2000:] for name in ("local-up.log", "gateways.log")
    )
    assert finished.returncode == 0, f"{finished.stdout[-3000:]}\n{finished.stderr[-3000:]}\n{logs}"
    result = json.loads(finished.stdout)
    assert [f["fault"] for f in result["history"]["faults"]] == FAULTS
    assert result["clients"]["gateway_restarts"] == {"proxy": 1}  # killed, restarted; paused, not

    checks = result["checks"]
    tx = checks["transactions"]["summary"]
    assert tx["committed"] > 10 and tx["rolled_back"] > 3
    assert tx["local_unknown"] > 0 and tx["checked_back"] >= tx["local_unknown"]  # the broker asked
    assert tx["committed_missing_live"] == tx["committed_missing_stored"] == tx["rolled_back_visible"] == 0
    assert checks["groups"]["summary"]["ChaosPop"] == {"missing": 0}
    assert checks["groups"]["summary"]["ChaosSidecar"] == {"missing": 0}
    history = History.load(history_file)
    sent_by_sidecar = [
        s for s in history.sends if s.workload == "sidecar" and s.outcome is Outcome.ACKNOWLEDGED
    ]
    assert len(sent_by_sidecar) > 50
    for row in recovery(history):  # the gateway's own clients resumed: the sidecar app's sends, POP reads
        assert row["writes_s"] is not None and row["caught_up_s"] is not None, row

    _broken_history_fails_the_checkers(history)


def _broken_history_fails_the_checkers(history: History) -> None:
    """A rolled-back transaction delivered, a committed one never, a POP delivery missing: each
    checker names exactly that."""
    rolled_back = next(t for t in history.transactions if not t.commit)
    committed = next(t for t in history.transactions if t.commit and t.half == Outcome.ACKNOWLEDGED.value)
    history.deliveries.append(Delivery(rolled_back.message_id, "ChaosTxConsumer", 1.0, 0, 99_999))
    history.deliveries = [d for d in history.deliveries if d.message_id != committed.message_id]
    check = check_transactions(history)
    assert not check.ok
    assert check.summary["rolled_back_visible"] == 1 and check.summary["committed_missing_live"] == 1
    assert {v["message_id"] for v in check.violations} == {rolled_back.message_id, committed.message_id}

    popped = next(d for d in history.deliveries if d.group == "ChaosPop")
    history.deliveries = [
        d for d in history.deliveries if (d.group, d.message_id) != ("ChaosPop", popped.message_id)
    ]
    groups = check_groups(history)
    assert not groups.ok
    assert groups.summary["ChaosPop"] == {"missing": 1}
    assert groups.summary["ChaosTxConsumer"] == {"missing": 1}  # the committed one removed above
    assert groups.violations == [
        {"group": "ChaosPop", "message_id": popped.message_id},
        {"group": "ChaosTxConsumer", "message_id": committed.message_id},
    ]


def test_a_gateway_fault_without_its_workload_is_refused_before_anything_starts(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "orbitmq.cli.main",
        "chaos",
        "--workload",
        "sync",
        "--fault",
        "kill-proxy",
    ]
    command += ["--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "r.json"), "--no-report"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 2, finished.stderr
    assert "kill-proxy: no chosen workload runs that process" in finished.stderr
    assert not (tmp_path / "data").exists()  # no cluster was started
