"""``orbitmq chaos`` as a user runs it: a real ``local up --slaves 1`` (SYNC_MASTER, SYNC_FLUSH),
three rounds of SIGKILL/SIGSTOP faults on the master, the slave and the name server, judged by
the checkers; then the run's own history, broken on purpose, must make them fail."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from orbitmq.chaos.checkers import check_acknowledged_consumed, check_order, check_unacknowledged
from orbitmq.chaos.history import History, Outcome

pytestmark = pytest.mark.timeout(180)

SEED = 34
"""Draws pause-namesrv, kill-master, kill-slave from :data:`PROCESS_FAULTS`: every role and both
actions in three rounds."""
PROCESS_FAULTS = [f"{a}-{r}" for a in ("kill", "pause") for r in ("master", "namesrv", "slave")]
"""Named, so faults added to the registry later do not change what this seed draws."""
WORKLOADS = ["sync", "batch", "ordered"]
"""The client library's senders and push groups (the gateways' and transactions' run in
``test_chaos_workloads.py``): what this run's figures in docs/operations/fault-injection.md were
measured with."""


def test_three_fault_rounds_lose_no_acknowledged_message_and_keep_order(tmp_path: Path) -> None:
    out, history_file = tmp_path / "result.json", tmp_path / "history.json"
    command = [sys.executable, "-m", "orbitmq.cli.main", "--log-level", "error", "chaos", "--rounds", "3"]
    command += ["--seed", str(SEED), "--data-dir", str(tmp_path / "data"), "--out", str(out)]
    command += ["--history", str(history_file), "--json"]
    command += [arg for fault in PROCESS_FAULTS for arg in ("--fault", fault)]
    command += [arg for workload in WORKLOADS for arg in ("--workload", workload)]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=170)
    log = (tmp_path / "data" / "local-up.log").read_text()
    assert finished.returncode == 0, f"{finished.stdout[-3000:]}\n{finished.stderr[-3000:]}\n{log[-3000:]}"
    result = json.loads(finished.stdout)
    assert json.loads(out.read_text()) == result
    assert [f["fault"] for f in result["history"]["faults"]] == ["pause-namesrv", "kill-master", "kill-slave"]
    checks = result["checks"]
    assert checks["acknowledged_consumed"]["summary"]["acknowledged"] > 500
    assert checks["acknowledged_consumed"]["summary"]["lost_live"] == 0
    assert checks["acknowledged_consumed"]["summary"]["lost_stored"] == 0
    assert checks["order"]["summary"]["checked"] > 100
    assert checks["order"]["summary"]["violations"] == 0
    per_fault = checks["recovery"]["summary"]["per_fault"]
    assert all(row["writes_s"] is not None and row["caught_up_s"] is not None for row in per_fault)
    assert "failover 1: broker broker-a-s1 is master" in log  # the kill-master round did fail over

    _broken_history_fails_the_checkers(History.load(history_file))


def _broken_history_fails_the_checkers(history: History) -> None:
    """The same real history, with one acknowledged message's deliveries removed and two of an
    ordered key's first deliveries swapped: each checker names exactly that."""
    acked = next(s for s in history.sends if s.outcome is Outcome.ACKNOWLEDGED and s.workload == "sync")
    history.deliveries = [d for d in history.deliveries if d.message_id != acked.message_id]
    history.drained = [d for d in history.drained if d.message_id != acked.message_id]
    lost = check_acknowledged_consumed(history)
    assert not lost.ok
    assert lost.summary["lost_live"] == 1 and lost.summary["lost_stored"] == 1
    assert {v["message_id"] for v in lost.violations} == {acked.message_id}

    ordered = [i for i, d in enumerate(history.deliveries) if d.sharding_key == "key0"]
    first, second = ordered[0], next(i for i in ordered if history.deliveries[i].seq == 1)
    deliveries = history.deliveries
    deliveries[first], deliveries[second] = replace(deliveries[second]), replace(deliveries[first])
    order = check_order(history)
    assert not order.ok
    assert order.violations[0]["sharding_key"] == "key0"
    assert (order.violations[0]["seq"], order.violations[0]["after"]) == (0, 1)

    history.sends.append(replace(acked, message_id="never-stored", outcome=Outcome.UNKNOWN))
    assert check_acknowledged_consumed(history).summary["lost_stored"] == 1  # unknown: not loss
    unacked = check_unacknowledged(history)
    assert unacked.ok
    assert unacked.summary["unknown"]["messages"] >= 1  # type: ignore[index]
