"""Runs a local cluster's processes and stops them cleanly.

Each component is a real ``orbitmq`` child process (the same commands Kubernetes runs); the
supervisor reads the one line each prints once it is serving, reports the endpoints, and on
Ctrl-C or SIGTERM stops brokers before name servers (so brokers can unregister), waiting a
bounded time before SIGKILL. A component that dies on its own stops the cluster with its
exit code and the tail of its error output, rather than leaving half a cluster running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

READY_LINE = re.compile(r"listening on (?P<address>\S+) metrics (?P<metrics>\S+)")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


class ComponentFailed(RuntimeError):
    """A component exited or never became ready; the message carries its error output."""


@dataclass
class Component:
    name: str
    args: list[str]
    process: asyncio.subprocess.Process | None = None
    address: str = ""
    metrics_url: str = ""
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=20))

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "orbitmq.cli.main",
            *self.args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # Ctrl-C reaches the supervisor only; it stops children in order
        )
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                while True:
                    assert self.process.stdout is not None
                    line = (await self.process.stdout.readline()).decode()
                    if not line:
                        await self.process.wait()
                        await asyncio.sleep(0.05)
                        raise ComponentFailed(self._failure("exited while starting"))
                    match = READY_LINE.search(line)
                    if match:
                        self.address, self.metrics_url = match["address"], match["metrics"]
                        break
        except TimeoutError:
            raise ComponentFailed(self._failure(f"not ready after {START_TIMEOUT_S:.0f} s")) from None
        self._stdout_task = asyncio.ensure_future(self._drain_stdout())

    def _failure(self, what: str) -> str:
        code = self.process.returncode if self.process else None
        tail = "\n  ".join(self.stderr_tail) or "(no error output)"
        return f"{self.name} {what} (exit code {code}):\n  {tail}"

    async def _drain_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        async for raw in self.process.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.stderr_tail.append(line)
            log.debug("%s: %s", self.name, line)

    async def _drain_stdout(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        async for raw in self.process.stdout:
            log.info("%s: %s", self.name, raw.decode(errors="replace").rstrip())

    async def wait(self) -> int:
        assert self.process is not None
        return await self.process.wait()

    async def stop(self) -> int | None:
        process = self.process
        if process is None or process.returncode is not None:
            return process.returncode if process else None
        process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(STOP_TIMEOUT_S):
                return await process.wait()
        except TimeoutError:
            log.warning("%s did not stop in %.0f s; killing it", self.name, STOP_TIMEOUT_S)
            process.kill()
            return await process.wait()


@dataclass
class LocalCluster:
    data_dir: Path
    namesrv_port: int = 9876
    broker_port: int = 10911
    namesrv_metrics_port: int = 9877
    broker_metrics_port: int = 10913
    host: str = "127.0.0.1"
    components: list[Component] = field(default_factory=list)

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        namesrv = Component(
            "namesrv",
            [
                "namesrv",
                "--listen",
                f"{self.host}:{self.namesrv_port}",
                "--metrics-listen",
                f"{self.host}:{self.namesrv_metrics_port}",
            ],
        )
        await self._start(namesrv)
        broker = Component(
            "broker broker-a",
            [
                "broker",
                "--listen",
                f"{self.host}:{self.broker_port}",
                "--metrics-listen",
                f"{self.host}:{self.broker_metrics_port}",
                "--namesrv",
                namesrv.address,
                "--data-dir",
                str(self.data_dir / "broker-a"),
                "--broker-name",
                "broker-a",
            ],
        )
        await self._start(broker)

    async def _start(self, component: Component) -> None:
        self.components.append(component)
        try:
            await component.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Brokers first (they unregister from name servers), then name servers."""
        for component in reversed(self.components):
            code = await component.stop()
            log.info("%s stopped (exit code %s)", component.name, code)

    async def watch(self, stop: asyncio.Event) -> Component | None:
        """Wait for ``stop`` or for a component to exit; returns the component that died."""
        waits = {asyncio.ensure_future(c.wait()): c for c in self.components}
        stopper = asyncio.ensure_future(stop.wait())
        done, _ = await asyncio.wait({stopper, *waits}, return_when=asyncio.FIRST_COMPLETED)
        for task in [stopper, *waits]:
            if task not in done:
                task.cancel()
        for task in done:
            if task in waits:
                return waits[task]
        return None

    @property
    def namesrv(self) -> Component:
        return self.components[0]

    def endpoints(self) -> dict[str, dict[str, str]]:
        return {c.name: {"address": c.address, "metrics": c.metrics_url} for c in self.components}


async def run_local(cluster: LocalCluster, report: Callable[[LocalCluster], None]) -> int:
    """Start, report, supervise until a signal; returns the process exit code."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await cluster.start()
    except ComponentFailed as error:
        print(f"orbitmq local: {error}", file=sys.stderr, flush=True)
        return 1
    report(cluster)
    died = await cluster.watch(stop)
    with contextlib.suppress(Exception):
        await cluster.stop()
    if died is not None:
        print(f"orbitmq local: {died._failure('exited unexpectedly')}", file=sys.stderr, flush=True)
        return 1
    print("orbitmq local: stopped", flush=True)
    return 0
