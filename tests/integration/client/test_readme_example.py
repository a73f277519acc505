"""The client examples of README.md and docs/operations/client-library.md run as written against a
real cluster: a reader copies them first, so an example that stopped working must fail here."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from clusterkit import Cluster, start_cluster

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[3]


def example(document: str, name: str) -> str:
    text = (ROOT / document).read_text()
    match = re.search(rf"<!-- example: {name}\b.*?-->\s*```python\n(.*?)```", text, re.S)
    assert match, f"{document} lost its {name} example block"
    return match.group(1)


async def run_example(cluster: Cluster, tmp_path: Path, code: str) -> list[str]:
    script = tmp_path / "example.py"
    script.write_text(code)
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(script)],
        env={**os.environ, "ORBITMQ_NAMESRV": cluster.address, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()


async def test_the_readme_example_sends_and_reads_back(tmp_path: Path) -> None:
    cluster = await start_cluster(tmp_path)
    try:
        lines = await run_example(cluster, tmp_path, example("README.md", "readme"))
        sent = [line for line in lines if line.startswith("sent ")]
        read = sorted(line.split(" from queue")[0] for line in lines if line.startswith("read "))
        assert len(sent) == 4, lines
        assert read == [f"read hello {i}" for i in range(4)], lines
    finally:
        await cluster.close()


async def test_the_client_library_example_runs(tmp_path: Path) -> None:
    cluster = await start_cluster(tmp_path)
    try:
        lines = await run_example(cluster, tmp_path, example("docs/operations/client-library.md", "client"))
        assert sum(line.startswith("SEND_OK ") for line in lines) == 10
        assert lines[-1] == str(sorted(["order 0", "order 2", "order 4", "order 6", "order 8", "paid"]))
    finally:
        await cluster.close()
