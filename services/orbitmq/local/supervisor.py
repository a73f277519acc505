"""Runs a local cluster's processes and stops them cleanly.

Each component is a real ``orbitmq`` child process (the same commands Kubernetes runs); the
supervisor reads the one line each prints once it is serving, reports the endpoints, and on
Ctrl-C, SIGTERM or SIGHUP (the terminal closed) stops brokers before name servers (so brokers
can unregister), waiting a bounded time before SIGKILL; if the supervisor itself is killed,
its children get SIGTERM from the kernel (:mod:`orbitmq.local.lifeline`). A component that
dies on its own is started again on the address it had (with ``--slaves``, the failover loop
restarts brokers as slaves of the live master); one that keeps dying (more than
:mod:`orbitmq.local.restarts` allows) stops the cluster with its exit code and its one-line
error, rather than flapping or leaving half a cluster running. :mod:`orbitmq.local.datadir`
decides which directory the master continues on and names processes an earlier run left
behind; :mod:`orbitmq.local.ports` derives the ports and names whoever holds one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from orbitmq.broker.ha import RoleState
from orbitmq.common.credentials import Credentials
from orbitmq.common.server import StartupError
from orbitmq.ha import Decision, Policy
from orbitmq.ha.group import BrokerGroupFailover, GroupMember
from orbitmq.local import datadir
from orbitmq.local.auth import server_env, super_user
from orbitmq.local.lifeline import SUPERVISOR_PID_ENV
from orbitmq.local.ports import LocalPorts, plan_ports, taken_ports
from orbitmq.local.restarts import RestartBudget
from orbitmq.store.config import MIB, BrokerRole
from orbitmq.v1 import broker_pb2

log = logging.getLogger(__name__)

POLL_S = 0.5
"""How often the failover loop looks at the brokers."""
READY_LINE = re.compile(r"listening on (?P<address>\S+) metrics (?P<metrics>\S+)")
METRICS_ADDRESS = re.compile(r"^http://(?P<address>[^/]+)/")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
LOCAL_SEGMENT_BYTES = 64 * MIB
"""Commit-log segment size of local brokers: each broker reserves one whole segment on disk at
once, and the production default (1 GiB) made a laptop's three-broker group take 3 GiB empty."""


def note(text: str) -> None:
    """A message for the person running ``local up``: stderr, so stdout stays the report."""
    print(f"orbitmq local: {text}", file=sys.stderr, flush=True)


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
    env: dict[str, str] = field(default_factory=dict)
    """Added to the supervisor's environment (auth settings: kept out of the arguments)."""

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "orbitmq.cli.main",
            *self.args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # Ctrl-C reaches the supervisor only; it stops children in order
            env={**os.environ, **self.env, SUPERVISOR_PID_ENV: str(os.getpid())},  # they die with us
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
        self._pin_addresses()

    def _pin_addresses(self) -> None:
        """A restart listens where this start did (port 0 chose a port once): the banner,
        the name server's address the brokers were given, and clients stay right."""
        metrics = METRICS_ADDRESS.match(self.metrics_url)
        pinned = {"--listen": self.address, "--metrics-listen": metrics["address"] if metrics else None}
        for index, arg in enumerate(self.args[:-1]):
            if pinned.get(arg):
                self.args[index + 1] = pinned[arg]  # type: ignore[assignment]

    def _failure(self, what: str) -> str:
        """One line: the component, what happened, and its own last word (its one-line error)."""
        code = self.process.returncode if self.process else None
        last = next((line.strip() for line in reversed(self.stderr_tail) if line.strip()), "")
        last = last.removeprefix("Error: ") or "(no error output)"
        return f"{self.name} {what} (exit code {code}): {last}"

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
class BrokerMember:
    """One broker of the local broker group: its process, its data, and its failover record."""

    component: Component
    data_dir: Path
    ha: GroupMember = field(init=False)

    def __post_init__(self) -> None:
        self.ha = GroupMember(self.component.name, None)

    @property
    def running(self) -> bool:
        process = self.component.process
        return process is not None and process.returncode is None

    @property
    def state(self) -> broker_pb2.HaState | None:
        return self.ha.state


@dataclass
class LocalCluster:
    data_dir: Path
    namesrv_port: int = 9876
    broker_port: int = 10911
    namesrv_metrics_port: int | None = None
    """None: the name-server port + 1 (0 when that is 0); see :mod:`orbitmq.local.ports`."""
    broker_metrics_port: int | None = None
    """None: the broker port + 2 (each slave + 10 more)."""
    host: str = "127.0.0.1"
    slaves: int = 0
    """Slaves of broker-a; with any, the master is SYNC_MASTER and failover is on."""
    segment_bytes: int = LOCAL_SEGMENT_BYTES
    """Segment size of new brokers; an existing store keeps the size it was created with."""
    failover_after_ms: int = 3_000
    """A master unseen this long is replaced (the decision module's detection window)."""
    auth: bool = False
    """Auth on in every process, as :attr:`credentials` (a super user kept in the data dir)."""
    credentials: Credentials | None = None
    components: list[Component] = field(default_factory=list)
    brokers: list[BrokerMember] = field(default_factory=list)
    _group: BrokerGroupFailover | None = field(default=None, init=False, repr=False)
    _restarts: dict[str, RestartBudget] = field(default_factory=dict, init=False, repr=False)

    @property
    def ports(self) -> LocalPorts:
        names = [datadir.MASTER_DIR, *(datadir.slave_dir(n) for n in range(1, self.slaves + 1))]
        return plan_ports(
            namesrv_port=self.namesrv_port,
            broker_port=self.broker_port,
            namesrv_metrics_port=self.namesrv_metrics_port,
            broker_metrics_port=self.broker_metrics_port,
            broker_names=names,
        )

    @property
    def group(self) -> BrokerGroupFailover:
        """The failover of broker-a's group (:mod:`orbitmq.ha.group`, shared with the operator)."""
        if self._group is None:
            policy = Policy(detection_window_ms=self.failover_after_ms)
            self._group = BrokerGroupFailover(
                [b.ha for b in self.brokers], self.master_role, policy, self.credentials
            )
        return self._group

    @property
    def failovers(self) -> int:
        return self.group.failovers

    @property
    def master_role(self) -> str:
        return "SYNC_MASTER" if self.slaves else "ASYNC_MASTER"

    def prepare(self) -> int:
        """Check nobody else uses the data directory and put the master's data in ``broker-a``;
        returns the master's epoch. Raises StartupError (one line) when it cannot."""
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StartupError(
                f"data directory {self.data_dir} cannot be created ({error.strerror}); "
                "choose a writable one with --data-dir"
            ) from None
        ports = self.ports  # a bad combination of ports is refused before anything else
        found = datadir.leftovers(self.data_dir)
        if found:
            named = ", ".join(f"{name} PID {pid}" for name, pid in found)
            raise StartupError(
                f"{self.data_dir} is in use by {named} (left over from an earlier `orbitmq local up`, "
                f"or still running); stop them with: kill {' '.join(str(pid) for _, pid in found)}"
            )
        taken = taken_ports(ports.all(), self.host)
        if taken:
            raise StartupError(
                "; ".join(taken) + "; give other --namesrv-port/--broker-port (the metrics ports "
                "follow them) or 0 for any free port"
            )
        for text in datadir.migrate_legacy(self.data_dir) + datadir.put_master_in_place(self.data_dir):
            note(text)
        if self.auth:
            self.credentials = super_user(self.data_dir)
        master = self.data_dir / datadir.MASTER_DIR
        state = datadir.read_member(master)
        if state.role is not None:  # recorded by a failover: make it this run's kind of master
            datadir.set_role(master, BrokerRole(self.master_role), 0, state.epoch)
        return state.epoch

    async def start(self) -> None:
        epoch = self.prepare()
        ports = self.ports
        namesrv = Component(
            "namesrv",
            [
                "namesrv",
                "--listen",
                f"{self.host}:{ports.namesrv.port}",
                "--metrics-listen",
                f"{self.host}:{ports.namesrv_metrics.port}",
            ],
            env=self._auth_env,
        )
        await self._start(namesrv)
        for index in range(self.slaves + 1):
            # The master always continues on broker-a, with or without slaves (see datadir).
            name = datadir.MASTER_DIR if index == 0 else datadir.slave_dir(index)
            data = self.data_dir / name
            if index:  # a slave follows this run's master, whatever its directory last recorded
                master_addr = self.brokers[0].component.address
                datadir.set_role(data, BrokerRole.SLAVE, index, epoch, master_addr)
            segment_bytes = datadir.check_segment_bytes(data, self.segment_bytes)
            if segment_bytes != self.segment_bytes:
                note(f"{name} keeps the {segment_bytes // MIB} MiB segments its store was created with")
            port, metrics = (p.port for p in ports.brokers[index])
            component = Component(
                f"broker {name}",
                [
                    "broker",
                    "--listen",
                    f"{self.host}:{port}",
                    "--metrics-listen",
                    f"{self.host}:{metrics}",
                    "--namesrv",
                    namesrv.address,
                    "--data-dir",
                    str(data),
                    "--broker-name",
                    "broker-a",
                    "--broker-role",
                    self.master_role if index == 0 else "SLAVE",
                    "--broker-id",
                    str(index),
                    "--segment-bytes",
                    str(segment_bytes),
                    "--auto-create-topic",  # a laptop's cluster: the first send makes the topic
                ],
                env=self._auth_env,
            )
            await self._start(component)
            self.brokers.append(BrokerMember(component, data))
        self._write_run_file()
        if self.slaves:
            # observed once before anyone is told the cluster is up: a master lost before the
            # failover loop's first step is then a lost master, not a member that never
            # answered (which a group with no master seen yet waits a start-up grace for)
            await self.failover_step()

    @property
    def _auth_env(self) -> dict[str, str]:
        return server_env(self.credentials) if self.credentials is not None else {}

    def _write_run_file(self) -> None:
        pids = {c.name: c.process.pid for c in self.components if c.process and c.process.returncode is None}
        datadir.write_run_file(self.data_dir, pids)

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
        datadir.remove_run_file(self.data_dir)

    async def watch(self, stop: asyncio.Event) -> str | None:
        """Supervise until ``stop``; returns why the cluster must stop on its own (None: asked to).

        A component that dies is started again where it listened (:meth:`_restart`); with
        slaves, brokers are the failover loop's (it replaces a lost master and restarts dead
        brokers as slaves), so only the name server is watched here.
        """
        failover = asyncio.ensure_future(self._failover_loop()) if self.slaves else None
        try:
            while True:
                died = await self._first_exit([self.namesrv] if self.slaves else self.components, stop)
                if died is None:
                    return None
                failure = await self._restart(died)
                if failure is not None:
                    return failure
        finally:
            if failover is not None:
                failover.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await failover

    @staticmethod
    async def _first_exit(watched: list[Component], stop: asyncio.Event) -> Component | None:
        """The first of ``watched`` to exit, or None when ``stop`` is set first."""
        waits = {asyncio.ensure_future(c.wait()): c for c in watched}
        stopper = asyncio.ensure_future(stop.wait())
        done, pending = await asyncio.wait({stopper, *waits}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if stopper in done:
            return None
        return waits[next(iter(done))]

    async def _restart(self, died: Component) -> str | None:
        """Start ``died`` again on its address; returns the reason to stop when it keeps dying
        (or cannot start), else None."""
        budget = self._restarts.setdefault(died.name, RestartBudget())
        failure = died._failure("exited unexpectedly")
        while budget.take():
            note(
                f"{failure}; restarting it on {died.address} (restart {budget.used} of at most "
                f"{budget.max_restarts} in {budget.window_s:.0f} s)"
            )
            try:
                await died.start()
            except ComponentFailed as error:
                failure = str(error)
                continue
            self._write_run_file()
            if died is self.namesrv:
                note(
                    "the brokers register with the restarted name server at their next "
                    "registration (every 30 s); until then it knows no routes"
                )
            return None
        return (
            f"{failure}; not restarted again after {budget.max_restarts} restarts within "
            f"{budget.window_s:.0f} s: the cluster stops"
        )

    # -- failover ------------------------------------------------------------------------------

    async def _failover_loop(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            try:
                await self.failover_step()
            except (grpc.aio.AioRpcError, ComponentFailed, OSError, ValueError) as error:
                log.warning("failover step failed: %s", error)

    async def failover_step(self) -> Decision | None:
        """Observe every broker, apply the decision module's verdict, restart dead brokers."""
        for broker in self.brokers:
            broker.ha.address = broker.component.address if broker.running else None
        before = self.group.failovers
        # The monotonic clock: a master unseen for the failover window is timed by it, so a step
        # of the wall clock neither replaces a live master at once nor a hung one minutes late.
        decision = await self.group.step(int(time.monotonic() * 1000))
        if decision is not None and decision.promote is not None and self.group.failovers > before:
            note(
                f"failover {self.group.failovers}: {decision.promote} is master at epoch "
                f"{decision.epoch} ({decision.reason})"
            )
        await self._restart_dead()
        return decision

    async def _restart_dead(self) -> None:
        """A dead broker comes back as a slave of the live master; with no other master it
        comes back as it was (nothing was decided without it)."""
        group = self.group
        live = group.live_master()
        master = next((b for b in self.brokers if b.ha is live), None)
        for broker in self.brokers:
            if broker.running:
                continue
            if master is not None and master is not broker:
                assert master.state is not None
                role = RoleState(broker.data_dir, BrokerRole.SLAVE, 1)
                leaving = broker.state.broker_id if broker.state else None
                role.change(
                    BrokerRole.SLAVE,
                    group.free_slave_id(leaving),
                    master.state.epoch,
                    master.component.address,
                )
                log.warning("restarting %s as a slave of %s", broker.component.name, master.component.name)
            elif broker.state is not None and broker.state.role != "SLAVE":
                continue  # the lost master: wait for the decision (a blip, or no candidate yet)
            await broker.component.start()
            self._write_run_file()

    @property
    def namesrv(self) -> Component:
        return self.components[0]

    def endpoints(self) -> dict[str, dict[str, str | int]]:
        return {
            c.name: {"address": c.address, "metrics": c.metrics_url, "pid": c.process.pid if c.process else 0}
            for c in self.components
        }


async def run_local(cluster: LocalCluster, report: Callable[[LocalCluster], None]) -> int:
    """Start, report, supervise until a signal; returns the process exit code."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # SIGHUP: the terminal closed
        loop.add_signal_handler(signum, stop.set)
    try:
        await cluster.start()
    except (ComponentFailed, StartupError) as error:
        note(str(error))
        return 1
    report(cluster)
    failure = await cluster.watch(stop)
    with contextlib.suppress(Exception):
        await cluster.stop()
    if failure is not None:
        note(failure)
        return 1
    note("stopped")
    return 0
