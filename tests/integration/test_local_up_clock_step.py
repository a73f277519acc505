"""``orbitmq local up --slaves 1`` fails over on time when its wall clock is stepped.

Local up declares a master dead once it has not answered for ``--failover-after-ms``. It timed
that on the wall clock: after a step back of two minutes (NTP correcting a fast clock, an
operator's ``date -s``) a hung master was replaced two minutes late, its group taking no writes
meanwhile; a step forward would replace a master that had merely missed one observation. The
whole cluster runs under libfaketime here (local up and, inheriting its environment, every
child), one offset file for all.

Needs Debian's libfaketime (scripts/test installs it); skipped without it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import grpc
import pytest

from orbitmq.chaos.clockfault import library, set_offset
from orbitmq.v1 import broker_pb2, broker_pb2_grpc

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(library() is None, reason="needs libfaketime (apt-get install libfaketime)"),
]

FAILOVER_AFTER_MS = 1_000
PORTS = [
    arg
    for flag in ("--namesrv-port", "--broker-port", "--namesrv-metrics-port", "--broker-metrics-port")
    for arg in (flag, "0")
]


async def role(address: str) -> str | None:
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            state = await broker_pb2_grpc.BrokerStub(channel).GetHaState(
                broker_pb2.GetHaStateRequest(), timeout=1
            )
    except grpc.aio.AioRpcError:
        return None
    return str(state.role)


async def test_a_hung_master_is_replaced_on_time_though_the_clock_stepped_back(tmp_path: Path) -> None:
    offsets = tmp_path / "cluster.faketime"
    set_offset(offsets, 0)
    env = {
        **os.environ,
        "LD_PRELOAD": str(library()),
        "FAKETIME_TIMESTAMP_FILE": str(offsets),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    command = [sys.executable, "-m", "orbitmq.cli.main", "local", "up", "--slaves", "1", "--json"]
    command += ["--data-dir", str(tmp_path / "data"), "--failover-after-ms", str(FAILOVER_AFTER_MS), *PORTS]
    up = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env
    )
    assert up.stdout is not None
    report = json.loads(await asyncio.wait_for(up.stdout.readline(), 60))
    master = int(report["components"]["broker broker-a"]["pid"])
    slave = report["components"]["broker broker-a-s1"]["address"]
    try:
        assert await role(slave) == "SLAVE"
        os.kill(master, signal.SIGSTOP)  # hung: only the failover window tells
        set_offset(offsets, -120)  # then the whole cluster's wall clock two minutes back
        hung = time.monotonic()
        while await role(slave) == "SLAVE" and time.monotonic() - hung < 15:  # noqa: ASYNC110 - polling a broker
            await asyncio.sleep(0.2)
        took = time.monotonic() - hung
        assert await role(slave) not in ("SLAVE", None), f"no failover {took:.1f} s after the master hung"
        assert took < 10, took
    finally:
        os.kill(master, signal.SIGCONT)
        up.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(up.wait(), 30)
        except TimeoutError:
            up.kill()
            await up.wait()
