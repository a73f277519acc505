"""The README's client example runs as written against a real cluster."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from clusterkit import start_cluster

pytestmark = pytest.mark.timeout(90)

README = Path(__file__).resolve().parents[3] / "README.md"


def example() -> str:
    text = README.read_text()
    match = re.search(r"<!-- example: client .*?-->\s*```python\n(.*?)```", text, re.S)
    assert match, "README.md lost its client example block"
    return match.group(1)


async def test_readme_client_example_runs(tmp_path: Path) -> None:
    cluster = await start_cluster(tmp_path)
    try:
        script = tmp_path / "example.py"
        script.write_text(example())
        result = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(script)],
            env={**os.environ, "ORBITMQ_NAMESRV": cluster.address, "HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        lines = result.stdout.splitlines()
        assert sum(line.startswith("SEND_OK ") for line in lines) == 10
        assert lines[-1] == str(sorted(["order 0", "order 2", "order 4", "order 6", "order 8", "paid"]))
    finally:
        await cluster.close()
