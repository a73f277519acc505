"""One cluster (two broker groups) and one local SparkSession for all the Spark tests: starting
Spark costs seconds, and its Python workers are reused from test to test. Each test uses topics
of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sparkkit import ThreadCluster, spark_session


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadCluster]:
    running = ThreadCluster(Path(tmp_path_factory.mktemp("spark-cluster")), register_interval_ms=1_000)
    yield running
    running.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = spark_session("orbitmq-tests")
    yield session
    session.stop()
