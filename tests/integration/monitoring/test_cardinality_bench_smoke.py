"""``benchmarks/cardinality_bench.py --quick --json`` finishes on a real cluster and a real
Prometheus and prints figures that make sense: one JSON object a line, the broker's series
growing exactly linearly with topics (every per-(topic, queue, group) family populated at each
size), and every dashboard panel query answering without an error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from promkit import REPO_ROOT, prometheus_binary, promtool_binary

# The first use may build the monitoring tools (minutes, cold); the run itself takes ~25 s.
pytestmark = pytest.mark.timeout(60 * 60)

BENCH = REPO_ROOT / "benchmarks" / "cardinality_bench.py"
KEYS = {"figure", "value", "unit", "baseline", "baseline_name", "target", "ratio"}


def test_quick_run_prints_linear_series_and_answers_every_panel_query() -> None:
    env = {
        **os.environ,
        # built (or found) here, so the benchmark's own look-up is a no-op
        "ORBITMQ_PROMETHEUS": str(prometheus_binary()),
        "ORBITMQ_PROMTOOL": str(promtool_binary()),
    }
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stderr[-4000:]}"
    figures = {}
    for line in done.stdout.splitlines():
        figure = json.loads(line)
        assert set(figure) == KEYS, figure
        figures[figure["figure"]] = figure

    # --quick: 1, 2 and 3 topics of 8 queues, 2 groups; 4 processes.
    master = [figures[f"series_master_{t}_topics"]["value"] for t in (1, 2, 3)]
    idle = figures["series_master_1_topics"]["baseline"]
    assert idle < master[0] < master[1] < master[2], master
    # Per topic at least offset, lag and lock owner for each of 8 queues x 2 groups, and the
    # queue's min and max offsets.
    assert master[1] - master[0] == master[2] - master[1] >= 3 * 8 * 2 + 2 * 8, master
    assert figures["broker_series_fit_max_dev"]["value"] == 0
    assert figures["broker_series_per_triple"]["value"] >= 3
    for process in ("namesrv", "slave", "sidecar"):
        assert figures[f"series_{process}_3_topics"]["value"] > 0, process

    assert figures["dashboard_query_over_target"]["baseline"] > 20  # panel queries run
    assert figures["dashboard_query_errors"]["value"] == 0
    assert figures["drilldown_query_errors"]["value"] == 0
    assert 0 < figures["dashboard_query_p50_ms"]["value"] <= figures["dashboard_query_max_ms"]["value"]
    assert figures["dashboard_query_max_ms"]["baseline"] > 0  # the `up` baseline ran
