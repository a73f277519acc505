"""orbitmq as one side of ``orbitmq bench peer``: the same interface as
:class:`orbitmq.bench.peer_rocketmq.RocketMQCluster`, so the orchestrator treats both alike.

A name server and one broker run as child processes at their defaults (ASYNC_FLUSH, the
default segment size), started by :mod:`orbitmq.bench.broker`'s helpers as the other benches
start them; the broker's metrics port is off, as RocketMQ's broker exports none by default.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import TracebackType

from orbitmq.bench.broker import Process, broker_process, cli
from orbitmq.client.admin import Admin


class OrbitmqCluster:
    """A name server and a broker on a store under ``work_dir`` (which the caller owns)."""

    name = "orbitmq"

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.namesrv = ""
        self.broker_pid = 0
        self._namesrv: Process | None = None
        self._broker: Process | None = None

    def __enter__(self) -> OrbitmqCluster:
        self._namesrv = Process(cli("namesrv", "--listen", "127.0.0.1:0", "--metrics-listen", ""))
        self.namesrv = self._namesrv.address
        try:
            self._broker = broker_process(self.work_dir / "store", namesrv=self.namesrv)
        except BaseException:
            self._namesrv.stop()
            raise
        self.broker_pid = self._broker.popen.pid
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._broker is not None:
            self._broker.stop()
        if self._namesrv is not None:
            self._namesrv.stop()

    def create_topic(self, topic: str, queues: int) -> None:
        """Create ``topic`` with ``queues`` read and write queues; returns once the name server
        routes it (:meth:`Admin.create_topic` waits for that)."""

        async def create() -> None:
            async with Admin(self.namesrv) as admin:
                await admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)

        asyncio.run(create())

    def driver_command(self) -> list[str]:
        return [sys.executable, "-m", "orbitmq.bench.peer_driver"]
