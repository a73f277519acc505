"""The suite's soak: ``orbitmq bench soak`` small (issue 27, item 4). 10 000 clients come and go
against a real broker, proxy and sidecar (one in ten without a word), then 45 s of traffic at
half the measured capacity through the Python client, the proxy and the sidecar.

Checked from the real processes' own ``/metrics`` and ``/proc``: every per-client table, open
file, thread and event-loop task back at its level once the expiry passed; no series left on
any metrics page by clients that are gone; every acknowledged message consumed. (Growth over
time is the hour-long benchmark's: a 45 s run's warm-up is too short to judge memory.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

SERVERS = ("namesrv", "broker", "proxy", "sidecar")


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("soak")
    out = work / "result.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "orbitmq.cli.main",
            "bench",
            "soak",
            "--duration-s",
            "45",
            "--capacity-s",
            "5",
            "--sample-s",
            "2",
            "--churn",
            "10000",
            "--expiry-ms",
            "5000",
            "--dir",
            str(work),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert out.exists(), f"exit {done.returncode}, no result:\n{done.stderr[-4000:]}"
    data = json.loads(out.read_text())
    data["exit"] = done.returncode
    data["stdout"] = done.stdout
    assert "Task was destroyed but it is pending" not in done.stderr
    return data


def test_clients_that_come_and_go_leave_every_table_and_resource_at_its_level(result: dict) -> None:
    churn = result["churn"]
    assert churn["clients"] == 10_000 and not churn["failed"], churn["failed"]
    assert churn["above_before"] == {}, churn["above_before"]
    # the gauges are the real processes' and saw the churn: silent consumers waited for expiry
    before, peak = churn["before"], churn["right_after"]
    assert peak["broker/table:broker_clients"] > before["broker/table:broker_clients"]
    for server in SERVERS:
        assert f"{server}/asyncio_tasks" in before and f"{server}/open_fds" in before
    for table in ("broker/table:broker_client_sessions", "proxy/table:proxy_telemetry_streams"):
        assert table in before
    assert "sidecar/table:sidecar_app_streams" in before and "namesrv/table:namesrv_brokers" in before


def test_every_acknowledged_message_is_consumed_on_every_path(result: dict) -> None:
    assert set(result["paths"]) == {"client", "proxy", "sidecar"}
    for name, path in result["paths"].items():
        assert path["acknowledged"] > 0, name
        assert path["lost"] == 0 and path["consumed"] == path["acknowledged"], (name, path)
        assert path["e2e_p99_ms_per_minute"], name


def test_growth_is_reported_for_every_server_and_the_run_passes(result: dict) -> None:
    for server in SERVERS:
        figures = result["growth"][server]
        for series in ("rss_mb", "rss_anon_mb", "open_fds", "threads", "asyncio_tasks"):
            assert series in figures, (server, series)
    for server in SERVERS:  # judged idle, before the traffic and after its drain
        assert {f"{server}/asyncio_tasks", f"{server}/open_sockets"} <= set(result["idle"]), server
    assert result["exit"] == 0 and result["stdout"].rstrip().endswith("PASS"), result["stdout"]
