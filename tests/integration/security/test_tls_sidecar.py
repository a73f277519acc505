"""``orbitmq sidecar`` serving TLS to its application while its consumer reads a TLS cluster."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tlskit import start_tls_cluster

from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.common.tls import ClientTls
from orbitmq.sidecar.client import SidecarClient

pytestmark = pytest.mark.timeout(120)


async def test_application_reads_through_a_tls_sidecar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = await start_tls_cluster(tmp_path)
    monkeypatch.setenv("ORBITMQ_TLS_CA", str(cluster.pki.ca))  # inherited by the sidecar: its consumer
    edge = cluster.pki.issue("sidecar")
    env = {**os.environ, "HOME": str(tmp_path)}
    process = subprocess.Popen(  # noqa: ASYNC220 - its output is read in a thread
        [
            sys.executable,
            "-m",
            "orbitmq.cli.main",
            "sidecar",
            "--namesrv",
            cluster.address,
            "--group",
            "tls-app",
            "--subscribe",
            "Sealed",
            "--consume-from",
            "first",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
            "--tls-cert",
            str(edge.cert),
            "--tls-key",
            str(edge.key),
        ],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "sidecar.log").open("w"),
        text=True,
        env=env,
    )
    try:
        async with Producer("tls-app-producer", cluster.address) as producer:
            for index in range(3):
                await producer.send(Message("Sealed", f"sealed {index}".encode()))
        assert process.stdout is not None
        line = await asyncio.to_thread(process.stdout.readline)
        assert "listening on" in line, (tmp_path / "sidecar.log").read_text()
        address = line.split("listening on ")[1].split()[0]
        received: list[str] = []
        async with SidecarClient(address, tls=ClientTls(tls_ca=cluster.pki.ca)) as client:

            async def read() -> None:
                async for delivery in client.deliveries(app_id="tls-app"):
                    received.append(delivery.body.decode())
                    await delivery.ack()
                    if len(received) == 3:
                        return

            await asyncio.wait_for(read(), 30)
        assert sorted(received) == ["sealed 0", "sealed 1", "sealed 2"]
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait, 30)
        await cluster.close()
