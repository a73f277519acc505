"""The ports a local cluster listens on: derived from the few the user gives, checked before start.

Every component of ``orbitmq local up`` listens twice: gRPC and Prometheus metrics. A user
who runs a second cluster gives it other ``--namesrv-port``/``--broker-port``; the metrics
ports follow them (name server +1, broker +2, each slave +10 after its master, which keeps
RocketMQ's 9876/10911 and orbitmq's 9877/10913 as the defaults) unless given, and ``0`` means
any free port. Deriving them is pure (:func:`plan_ports`); finding who holds a wanted port
(:func:`taken_ports`) reads /proc, so a clash names the port, who wanted it and who has it.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orbitmq.common.procs import command_of, port_listeners
from orbitmq.common.server import StartupError

MAX_PORT = 65535
NAMESRV_METRICS_OFFSET = 1
"""Name-server metrics port = name-server port + 1 (9876 → 9877)."""
BROKER_METRICS_OFFSET = 2
"""Broker metrics port = broker port + 2 (10911 → 10913; RocketMQ's 10912 is its HA port)."""
SLAVE_PORT_STEP = 10
"""Slave N listens N x 10 above its master, on both ports."""


@dataclass(frozen=True)
class WantedPort:
    """A port a component will listen on, and how it was chosen (for messages)."""

    component: str
    """``namesrv``, ``broker broker-a``, ``broker broker-a-s1`` …"""
    port: int
    """0: any free port (nothing to check)."""
    source: str
    """The flag it comes from, e.g. ``--broker-port + 10`` or ``--namesrv-port + 1``."""
    metrics: bool = False

    @property
    def label(self) -> str:
        return f"{self.component} metrics" if self.metrics else self.component


@dataclass(frozen=True)
class LocalPorts:
    namesrv: WantedPort
    namesrv_metrics: WantedPort
    brokers: list[tuple[WantedPort, WantedPort]]
    """(gRPC, metrics) of the master, then of each slave."""

    def all(self) -> list[WantedPort]:
        return [self.namesrv, self.namesrv_metrics, *(p for pair in self.brokers for p in pair)]


def _derived(component: str, base: int, base_flag: str, offset: int, metrics: bool) -> WantedPort:
    """``base + offset`` (0 stays 0: any free port), with the flag arithmetic as its source."""
    source = f"{base_flag} + {offset}" if offset else base_flag
    return WantedPort(component, base + offset if base else 0, source, metrics)


def plan_ports(
    *,
    namesrv_port: int,
    broker_port: int,
    namesrv_metrics_port: int | None,
    broker_metrics_port: int | None,
    broker_names: list[str],
) -> LocalPorts:
    """Every port of the cluster; a metrics port not given (None) follows its gRPC port.

    ``broker_names``: the master's directory name first, then the slaves'. Raises StartupError
    naming the port and the rule when a port would be above 65535 or two components would
    want the same port.
    """
    if namesrv_metrics_port is None:
        namesrv_metrics = _derived("namesrv", namesrv_port, "--namesrv-port", NAMESRV_METRICS_OFFSET, True)
    else:
        namesrv_metrics = WantedPort("namesrv", namesrv_metrics_port, "--namesrv-metrics-port", True)
    if broker_metrics_port is None:
        metrics_base, metrics_flag, metrics_offset = broker_port, "--broker-port", BROKER_METRICS_OFFSET
    else:
        metrics_base, metrics_flag, metrics_offset = broker_metrics_port, "--broker-metrics-port", 0
    brokers = []
    for index, name in enumerate(broker_names):
        component, step = f"broker {name}", SLAVE_PORT_STEP * index
        grpc_port = _derived(component, broker_port, "--broker-port", step, False)
        metrics = _derived(component, metrics_base, metrics_flag, metrics_offset + step, True)
        brokers.append((grpc_port, metrics))
    plan = LocalPorts(WantedPort("namesrv", namesrv_port, "--namesrv-port"), namesrv_metrics, brokers)
    _check(plan.all())
    return plan


def _check(wanted: list[WantedPort]) -> None:
    by_port: dict[int, WantedPort] = {}
    for port in wanted:
        if port.port > MAX_PORT:
            raise StartupError(
                f"{port.label} would listen on port {port.port} ({port.source}), above {MAX_PORT}; "
                "give lower ports (0 picks free ones)"
            )
        other = by_port.setdefault(port.port, port) if port.port else port
        if other is not port:
            raise StartupError(
                f"port {port.port} is wanted by both {other.label} ({other.source}) and {port.label} "
                f"({port.source}); give ports further apart (metrics ports follow the name server "
                f"+{NAMESRV_METRICS_OFFSET} and brokers +{BROKER_METRICS_OFFSET}, slaves "
                f"+{SLAVE_PORT_STEP} each) or set the metrics ports (0 picks free ones)"
            )


def taken_ports(
    wanted: list[WantedPort],
    host: str = "127.0.0.1",
    listeners_of: Callable[[int], list[int]] = port_listeners,
) -> list[str]:
    """One sentence per wanted port that a process already listens on: the port, who wanted
    it and why, and the process that has it (from /proc). A port that cannot be bound on
    ``host`` while /proc shows no owner (another user's process, or no /proc) is named too."""
    found = []
    for port in wanted:
        if not port.port:
            continue
        pids = listeners_of(port.port)
        if pids:
            owners = ", ".join(describe_owner(pid) for pid in pids)
        elif _bind_refused(host, port.port):
            owners = "a process this user cannot see"
        else:
            continue
        found.append(f"port {port.port} ({port.label}, {port.source}) is taken by {owners}")
    return found


def _bind_refused(host: str, port: int) -> bool:
    """Whether ``host:port`` is in use (as the servers bind: with SO_REUSEADDR, so a port
    whose old connections linger in TIME_WAIT counts as free)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False


def describe_owner(pid: int) -> str:
    """A listening process as a person needs it: its PID, what it is and what to do about it."""
    argv = _argv(pid)
    command = " ".join(argv)[:160] or "command not visible"
    supervisor = _local_up_parent(pid)
    if supervisor is not None:
        data_dir = _flag_value(_argv(supervisor), "--data-dir") or "its default --data-dir"
        return (
            f"PID {pid} ({command}), part of another running `orbitmq local up` (PID {supervisor}, "
            f"data in {data_dir})"
        )
    if _is_orbitmq(argv):
        return f"PID {pid} ({command}; not part of a running local up: stop it with: kill {pid})"
    return f"PID {pid} ({command})"


def _is_orbitmq(argv: list[str]) -> bool:
    """``orbitmq …`` or ``python -m orbitmq.cli.main …`` (how local up starts its children)."""
    return any(Path(arg).name == "orbitmq" or arg == "orbitmq.cli.main" for arg in argv[:3])


def _argv(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return command_of(pid).split()
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]


def _local_up_parent(pid: int) -> int | None:
    """The PID of the ``orbitmq local up`` that started ``pid``, if its parent is one."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    parent = int(stat.rsplit(")", 1)[1].split()[1])  # after "(comm)": state, then ppid
    argv = _argv(parent)
    is_local_up = any(argv[i : i + 2] == ["local", "up"] for i in range(len(argv)))
    return parent if is_local_up else None


def _flag_value(argv: list[str], flag: str) -> str | None:
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None
