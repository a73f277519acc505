"""What a long-running server process holds, on its ``/metrics`` page: a leak shows here first.

Every orbitmq server exports, beside its own families:

* prometheus_client's process families (``process_resident_memory_bytes``,
  ``process_open_fds``, ``process_cpu_seconds_total``, ...): each server has a registry of its
  own, which prometheus_client's default process collector is not on;
* ``orbitmq_process_threads`` — the OS threads of the process (gRPC's pollers, the metrics HTTP
  server, ``asyncio.to_thread`` workers);
* ``orbitmq_asyncio_tasks`` — tasks not yet done on the server's event loop (a task per stream,
  long poll, timer, background loop: one that is never awaited or cancelled grows this);
* ``orbitmq_server_table_entries{table}`` — entries of each table the server keeps per client,
  stream or request (clients, sessions, held messages, ...): after clients leave and the
  expiry timeouts pass, each must return to its baseline. ``orbitmq bench soak`` and the soak
  test read these from the real process, as an operator's dashboard would.

All of it is read when Prometheus scrapes (the metrics HTTP thread), so nothing is paid per
request. Reading the loop's task set from that thread is what :func:`asyncio.all_tasks` itself
allows (it retries when the set changes under it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

TableSize = Callable[[], int]
"""Returns the number of entries of one table now (called from the metrics thread: it must only
read, e.g. ``len`` of a dict)."""


class RuntimeCollector(Collector):
    """Threads, event-loop tasks and the tables registered with :meth:`table`."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        """The server's event loop, set when it starts (no task gauge before that)."""
        self._tables: dict[str, TableSize] = {}

    def table(self, name: str, size: TableSize) -> None:
        """Export ``size()`` as ``orbitmq_server_table_entries{table=name}``."""
        self._tables[name] = size

    def collect(self) -> Iterator[GaugeMetricFamily]:
        threads = _threads()
        if threads is not None:
            yield GaugeMetricFamily("orbitmq_process_threads", "OS threads of the process", value=threads)
        loop = self.loop
        if loop is not None and not loop.is_closed():
            yield GaugeMetricFamily(
                "orbitmq_asyncio_tasks",
                "Tasks not yet done on the server's event loop",
                value=len(asyncio.all_tasks(loop)),
            )
        tables = GaugeMetricFamily(
            "orbitmq_server_table_entries",
            "Entries of a table the server keeps per client, stream or request "
            "(returns to its baseline once clients leave and their expiry passes)",
            labels=["table"],
        )
        for name, size in sorted(self._tables.items()):
            try:
                tables.add_metric([name], size())
            except RuntimeError as error:  # a dict resized under a read from this thread
                log.debug("table %s not read this scrape: %s", name, error)
        yield tables


def register_runtime(registry: CollectorRegistry) -> RuntimeCollector:
    """Put the process families and a :class:`RuntimeCollector` on ``registry``."""
    ProcessCollector(registry=registry)
    collector = RuntimeCollector()
    registry.register(collector)
    return collector


def _threads() -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None
