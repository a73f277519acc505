"""A real orbitmq cluster for Spark tests, and a local SparkSession with the data source.

Spark's calls block the test's thread for seconds at a time, while the name server and
brokers are asyncio servers: the cluster therefore runs on its own event loop in a thread
(:class:`ThreadCluster`), and the tests stay plain synchronous functions. Spark's Python workers
are separate processes that reach the cluster over TCP, as executors would.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import Cluster, start_cluster

from orbitmq.client.admin import Admin
from orbitmq.client.message import Message, SendResult
from orbitmq.client.producer import Producer
from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.client.queue import MessageQueue
from orbitmq.store.record import StoredMessage

T = TypeVar("T")


Place = tuple[str, int, int]
"""(broker, queue, queue offset): where a message is stored, once."""


def spark_submit(job: Path, args: list[str]) -> list[str]:
    """The command line running ``job`` with the venv's ``spark-submit`` on ``local[2]``."""
    return [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        str(job),
        *args,
    ]


class ThreadCluster:
    """A name server and brokers on an event loop of their own (see the module docstring)."""

    def __init__(
        self, root: Path, brokers: tuple[str, ...] = ("broker-a", "broker-b"), **overrides: Any
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="orbitmq-cluster", daemon=True)
        self._thread.start()
        self.cluster: Cluster = self.run(start_cluster(root, brokers, **overrides))
        self.namesrv = self.cluster.address

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def close(self) -> None:
        try:
            self.run(self.cluster.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    # -- helpers run on the cluster's loop -------------------------------------------------------

    def create_topic(self, topic: str, queues: int, broker: str | None = None) -> None:
        """``topic`` with ``queues`` read/write queues on every broker (or only ``broker``)."""

        async def create() -> None:
            async with Admin(self.namesrv) as admin:
                address = self.cluster.brokers[broker].broker.address if broker else None
                await admin.create_topic(
                    topic,
                    read_queue_nums=queues,
                    write_queue_nums=queues,
                    broker_addr=address,
                    update_existing=True,
                )

        self.run(create())

    def send(
        self, messages: Iterable[Message], *, sharding: dict[int, str] | None = None
    ) -> list[SendResult]:
        """Send one by one (``sharding``: message index -> sharding key); results in order."""

        async def send_all() -> list[SendResult]:
            async with Producer("spark-test-producer", self.namesrv) as producer:
                return [
                    await producer.send(m, sharding_key=(sharding or {}).get(i))
                    for i, m in enumerate(messages)
                ]

        return self.run(send_all())

    def read_all(self, topic: str, group: str = "spark-test-check") -> list[StoredMessage]:
        """Every message of ``topic`` (all queues, from min to max) with the pull consumer."""
        return list(self.stored(topic, group).values())

    def stored(self, topic: str, group: str = "spark-test-check") -> dict[Place, StoredMessage]:
        """Every message of ``topic`` by where it is stored, queue by queue from min to max."""

        async def read() -> dict[Place, StoredMessage]:
            found: dict[Place, StoredMessage] = {}
            async with PullConsumer(group, self.namesrv) as consumer:
                for mq in await consumer.queues(topic, refresh=True):
                    offset, end = await consumer.min_offset(mq), await consumer.max_offset(mq)
                    while offset < end:
                        result = await consumer.pull(mq, offset, max_nums=256)
                        for m in result.messages:
                            found[(mq.broker_name, mq.queue_id, m.queue_offset)] = m
                        offset = result.next_begin_offset
            return found

        return self.run(read())

    def queues(self, topic: str) -> list[MessageQueue]:
        async def listing() -> list[MessageQueue]:
            async with PullConsumer("spark-test-check", self.namesrv) as consumer:
                return await consumer.queues(topic, refresh=True)

        return self.run(listing())


GATEWAY_ATTEMPTS = 3


def _start(builder: Any) -> Any:
    """``getOrCreate`` with a retry when the JVM dies before reporting its port: on a loaded
    2-core machine a start has failed that way once in a while (the error names no cause), and
    a failed start leaves nothing behind, so trying again is safe."""
    from pyspark.errors import PySparkRuntimeError

    for attempt in range(1, GATEWAY_ATTEMPTS + 1):
        try:
            return builder.getOrCreate()
        except PySparkRuntimeError as error:
            if error.getCondition() != "JAVA_GATEWAY_EXITED" or attempt == GATEWAY_ATTEMPTS:
                raise
            logging.getLogger(__name__).warning("Spark's JVM exited at start (attempt %d); again", attempt)
            time.sleep(1)
    raise AssertionError("unreachable")


def spark_session(app: str) -> Any:
    """A ``local[2]`` SparkSession with the ``orbitmq`` format registered; its Python workers
    run this interpreter (the venv's, where orbitmq_spark is installed)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # py4j logs at INFO while the interpreter shuts down, after pytest closed the log stream.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from pyspark.sql import SparkSession

    import orbitmq_spark

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.streaming.pollingDelay", "100ms")
    )
    spark = _start(builder)
    spark.sparkContext.setLogLevel("WARN")
    orbitmq_spark.register(spark)
    return spark
