"""A real broker on a free port with its data in tmp_path, and stubs to talk to it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from brokerkit import RunningBroker, start_broker, stop_broker


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[RunningBroker]:
    running = await start_broker(tmp_path / "broker")
    yield running
    await stop_broker(running)
