"""The proxy and the sidecar of a chaos run, started and restarted by the harness itself.

They are not the cluster's components but its clients' doorways: ``orbitmq proxy`` (what the
official RocketMQ 5 clients talk to) and ``orbitmq sidecar`` (one per application, with that
application's group and subscriptions, as a pod's second container). So local up does not start
them; the harness does, as a pod's restart policy would: a gateway that exits is started again
at once on the address it had, for as long as the run lasts (no restart budget: a kill fault is
the test, not a crash loop). Their stderr goes to ``gateways.log`` in the data directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from dataclasses import dataclass, field
from pathlib import Path

from orbitmq.chaos.cluster import signal_quietly
from orbitmq.local.supervisor import Component, ComponentFailed

PROXY = "proxy"
SIDECAR = "sidecar"
RESTART_PAUSE_S = 0.2
"""Between a gateway's exit (or a failed start) and its next start."""
SIDECAR_GROUP = "ChaosSidecar"
TIMINGS = {
    "--rebalance-ms": "2000",
    "--persist-ms": "500",
    "--heartbeat-ms": "1000",
    "--lock-renew-ms": "1000",
    "--route-refresh-ms": "1000",
    "--drain-timeout-ms": "1000",
}
"""The sidecar's consumer timings, shortened as the harness's own consumers' are."""
PROXY_ENV = {"ORBITMQ_PROXY_HEARTBEAT_MS": "1000", "ORBITMQ_PROXY_GRACE_MS": "200"}
"""The proxy's heartbeats (and with them its route refreshes) every second, as the harness's
clients; a short stop grace."""


class _Gateway(Component):
    """A :class:`~orbitmq.local.supervisor.Component` whose stderr goes to a file."""

    log_file: Path | None = None

    async def _drain_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        with (self.log_file or Path("/dev/null")).open("a") as out:
            async for raw in self.process.stderr:
                line = raw.decode(errors="replace").rstrip()
                self.stderr_tail.append(line)
                out.write(f"{self.name}: {line}\n")
                out.flush()


@dataclass
class Gateways:
    """The proxy and/or the sidecar (``which``), supervised until :meth:`stop`."""

    namesrv: str
    data_dir: Path
    which: tuple[str, ...]
    sidecar_topic: str = ""
    components: dict[str, _Gateway] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    _watchers: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self) -> None:
        local = "127.0.0.1:0"
        args = {
            PROXY: ["proxy", "--listen", local, "--metrics-listen", local, "--namesrv", self.namesrv],
            SIDECAR: [
                "sidecar",
                "--namesrv",
                self.namesrv,
                "--group",
                SIDECAR_GROUP,
                "--subscribe",
                self.sidecar_topic,
                "--consume-from",
                "first",
                "--listen",
                local,
                "--metrics-listen",
                local,
                "--instance-name",
                "chaos-sidecar",
                *(a for pair in TIMINGS.items() for a in pair),
            ],
        }
        for name in self.which:
            gateway = _Gateway(name, args[name], env=PROXY_ENV if name == PROXY else {})
            gateway.log_file = self.data_dir / "gateways.log"
            await gateway.start()
            self.components[name] = gateway
            self._watchers.append(asyncio.create_task(self._watch(gateway)))

    def address(self, name: str) -> str:
        return self.components[name].address

    def pids(self) -> dict[str, int]:
        """Gateway name -> PID of its live process (for the faults, as local up's run file)."""
        return {
            name: c.process.pid
            for name, c in self.components.items()
            if c.process is not None and c.process.returncode is None
        }

    async def _watch(self, gateway: _Gateway) -> None:
        while True:
            await gateway.wait()
            while True:
                await asyncio.sleep(RESTART_PAUSE_S)
                try:
                    await gateway.start()
                    break
                except ComponentFailed:
                    continue  # its port may linger a moment: try again
            self.restarts[gateway.name] = self.restarts.get(gateway.name, 0) + 1

    async def stop(self) -> None:
        for task in self._watchers:
            task.cancel()
        for task in self._watchers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for gateway in self.components.values():
            if gateway.process is not None:
                signal_quietly(gateway.process.pid, signal.SIGCONT)  # a paused one would not stop
            await gateway.stop()
