"""Subscription groups through the admin API: what is asked for is what the brokers keep."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from clusterkit import Cluster, start_cluster

from orbitmq.client.admin import Admin

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path)
    yield running
    await running.close()


async def test_zero_retries_is_kept_and_the_default_is_sixteen(cluster: Cluster) -> None:
    async with Admin(cluster.address) as admin:
        await admin.create_group("NoRetries", retry_max_times=0)
        await admin.create_group("Defaults")
        groups = await admin.groups()
    assert groups["NoRetries"].retry_max_times == 0, "zero retries: the first failure is a dead letter"
    assert groups["Defaults"].retry_max_times == 16
