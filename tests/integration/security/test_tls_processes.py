"""``orbitmq namesrv`` and ``orbitmq broker`` started with their TLS flags as processes, under
mutual TLS: the broker registers with its certificate, the CLI produces and consumes with its
own, and a client without one is refused naming the cause."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tlskit import Pki

pytestmark = pytest.mark.timeout(120)


def _environment(home: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ORBITMQ_TLS_", "ORBITMQ_NAMESRV"))}
    return {**clean, "HOME": str(home)}


@contextmanager
def _process(args: list[str], home: Path, log: Path) -> Iterator[str]:
    """Start ``orbitmq ARGS``; yields the address its first line says it listens on."""
    process = subprocess.Popen(
        [sys.executable, "-m", "orbitmq.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        env=_environment(home),
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert " listening on " in line, log.read_text()
        yield line.split(" listening on ")[1].split()[0]
    finally:
        process.terminate()
        process.wait(30)


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", *args],
        env=_environment(home),
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_mutual_tls_cluster_of_processes(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    server = pki.issue("server")
    client = pki.issue("client", ("orbitmq-cli",))
    tls = ["--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-ca", str(pki.ca)]
    mutual = [*tls, "--tls-require-client-cert"]
    namesrv_args = ["namesrv", "--listen", "127.0.0.1:0", "--metrics-listen", "", *mutual]
    with _process(namesrv_args, tmp_path, tmp_path / "namesrv.log") as namesrv:
        broker_args = [
            "broker",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
            "--namesrv",
            namesrv,
            "--data-dir",
            str(tmp_path / "broker"),
            *mutual,
        ]
        with _process(broker_args, tmp_path, tmp_path / "broker.log"):
            own = [
                "--namesrv",
                namesrv,
                "--tls-ca",
                str(pki.ca),
                "--tls-cert",
                str(client.cert),
                "--tls-key",
                str(client.key),
            ]
            produced = await asyncio.to_thread(
                _cli, tmp_path, "produce", *own, "--topic", "Mutual", "--body", "m{i}", "--count", "4"
            )
            assert produced.returncode == 0, produced.stderr
            consumed = await asyncio.to_thread(
                _cli,
                tmp_path,
                "consume",
                *own,
                "--topic",
                "Mutual",
                "--group",
                "mutual",
                "--from",
                "first",
                "--count",
                "4",
                "--json",
            )
            assert consumed.returncode == 0, consumed.stderr
            lines = [json.loads(line) for line in consumed.stdout.splitlines()]
            assert sorted(line["body"] for line in lines if "body" in line) == ["m0", "m1", "m2", "m3"]

            refused = await asyncio.to_thread(
                _cli, tmp_path, "admin", "cluster", "list", "--namesrv", namesrv, "--tls-ca", str(pki.ca)
            )
            assert refused.returncode == 1
            assert "requires a client certificate" in refused.stderr and "--tls-cert" in refused.stderr
