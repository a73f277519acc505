"""The sidecar example of docs/operations/client-library.md runs as written against a real sidecar
and cluster."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import start_cluster
from test_sidecar import start_sidecar

pytestmark = pytest.mark.timeout(90)
PAGE = Path(__file__).resolve().parents[3] / "docs/operations/client-library.md"


async def test_readme_sidecar_example_runs(tmp_path: Path) -> None:
    match = re.search(r"<!-- example: sidecar .*?-->\s*```python\n(.*?)```", PAGE.read_text(), re.S)
    assert match, f"{PAGE.name} lost its sidecar example block"
    script = tmp_path / "app.py"
    script.write_text(match.group(1))
    cluster = await start_cluster(tmp_path)
    sidecar = await start_sidecar(cluster, "billing", "--subscribe", "Orders:TagA || TagB", name="readme")
    try:
        result = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(script)],
            env={**os.environ, "ORBITMQ_SIDECAR": sidecar.address},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        lines = result.stdout.splitlines()
        assert lines[0].startswith("sent ")
        assert lines[-1].startswith("Orders ") and lines[-1].endswith(" order 1")
    finally:
        sidecar.signal(signal.SIGTERM)
        await sidecar.wait()
        await cluster.close()
