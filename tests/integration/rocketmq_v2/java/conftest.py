"""The official RocketMQ 5 Java client's program, built once per session (from the cache when
its pom and sources are unchanged): before any test starts a cluster on its event loop, since a
cold Maven build blocks for seconds."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from orbitmq.interop import java_client


@pytest.fixture(scope="session", autouse=True)
def java_client_built() -> Path:
    return java_client.build()
