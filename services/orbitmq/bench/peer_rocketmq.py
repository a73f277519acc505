"""Apache RocketMQ 5.3.3 as the baseline of ``orbitmq bench peer`` (issue 24): its name server,
one broker and the Java driver of ``benchmarks/peer/``, all from Maven Central.

The peer is built once by Maven (:func:`build_peer`) and cached under a hash of the pom and the
Java sources, so a changed driver rebuilds and an unchanged one costs nothing; the name server,
the broker and the drivers all run from that one classpath (the driver's jar plus the dependency
jars), with no RocketMQ distribution to download or unpack. :class:`RocketMQCluster` runs the
name server and the broker as child processes at RocketMQ's defaults but for what a benchmark
on a shared machine must set (free ports, a store, logs and ``user.home`` under its work
directory, the heap), with the JVM options of RocketMQ's own start scripts (:data:`SERVER_JVM_OPTIONS`).
It offers what :class:`orbitmq.bench.peer_orbitmq.OrbitmqCluster` offers, so the orchestrator
(:mod:`orbitmq.bench.peer`) treats both alike.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import random
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from orbitmq.common import maven

PEER_SOURCES = Path(__file__).resolve().parents[3] / "benchmarks" / "peer"
"""The Maven project (pom.xml, src/main/java/...): part of the repository, not of the package."""
CACHE_ENV = "ORBITMQ_PEER_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "orbitmq" / "peer"
DRIVER_JAR = "peer-driver.jar"
DRIVER_CLASS = "io.orbitmq.peer.PeerDriver"
TOPIC_ADMIN_CLASS = "io.orbitmq.peer.TopicAdmin"

NAMESRV_HEAP_MB = 256
"""The name server only holds routes: a small heap, so the machine's memory goes to the broker."""
SERVER_JVM_OPTIONS = (
    "-server",
    # G1 with RocketMQ's tuning, from its bin/runbroker.sh and runserver.sh (Java >= 9 branch),
    # so the baseline is RocketMQ as its scripts run it: regions of 16 MB, a quarter of the
    # heap held back against evacuation failures, concurrent marking from 30 % occupancy, soft
    # references cleared at the first collection that can.
    "-XX:+UseG1GC",
    "-XX:G1HeapRegionSize=16m",
    "-XX:G1ReservePercent=25",
    "-XX:InitiatingHeapOccupancyPercent=30",
    "-XX:SoftRefLRUPolicyMSPerMB=0",
    # runbroker.sh: full stack traces even for exceptions the JIT has seen often (the logs quoted
    # when a start fails need them).
    "-XX:-OmitStackTraceInFastThrow",
)
"""JVM options of both servers. runbroker.sh's -XX:-UseBiasedLocking is left out: biased
locking is off by default since Java 15, and Java 17 warns about the flag."""
BROKER_JVM_OPTIONS = (
    # runbroker.sh: the whole heap is touched at start, as in RocketMQ's deployments; its RSS
    # (the memory figure of the benchmark) is then the heap from the first message on.
    "-XX:+AlwaysPreTouch",
    # runbroker.sh: a direct-memory cap far above the heap (Netty's pooled buffers live there).
    "-XX:MaxDirectMemorySize=15g",
    # runbroker.sh: no huge pages, even where the machine offers them.
    "-XX:-UseLargePages",
)
"""JVM options of the broker beside :data:`SERVER_JVM_OPTIONS` and its ``-Xms``/``-Xmx``."""
DRIVER_JVM_OPTIONS = ("-Drmq.logback.configurationFile=rmq.client.logback.xml",)
"""The driver runs at the JVM's defaults, as an application would. Its logging config is named
because the broker's jar is on the same classpath and logback would pick the broker's
(whose deprecation warning makes logback print its whole status to stdout, the result channel)."""

START_TIMEOUT_S = 120.0
"""The broker is routed ~10 s after its JVM starts (its first registration that lands is its
scheduled one), ~15 s in all on 2 quiet cores; a machine busy with other tests takes longer."""
STOP_GRACE_S = 5.0
"""SIGTERM runs RocketMQ's shutdown hooks; SIGKILL after this. The broker's whole shutdown takes
~15 s (its services stop one at a time, several waiting out a polling interval), and a benchmark
throws its store away, so it is not waited for."""
TOPIC_TIMEOUT_S = 90.0
PORT_RANGE = (20000, 32000)
"""Below Linux's ephemeral range (32768-60999), so no outgoing connection holds a port the
broker was given between the check and its bind."""
BROKER_NAME = "broker-a"
CLUSTER_NAME = "DefaultCluster"
GET_BROKER_CLUSTER_INFO = 106
"""RocketMQ remoting request code (RequestCode.GET_BROKER_CLUSTER_INFO)."""
LOG_TAIL_CHARS = 3000


class RocketMQPeerError(RuntimeError):
    """The peer could not be built or started; the message says why and what to do."""


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def build_peer() -> Path:
    """The built peer's directory (``peer-driver.jar`` and ``lib/*.jar``), from the cache under
    ``$ORBITMQ_PEER_CACHE`` (default ``~/.cache/orbitmq/peer``) or built there first
    (:func:`orbitmq.common.maven.build`: keyed by the pom's and sources' hash, one build at a time)."""
    return maven.build(PEER_SOURCES, DRIVER_JAR, cache_root(), RocketMQPeerError, what="the RocketMQ peer")


def classpath(built: Path) -> str:
    return maven.classpath(built, DRIVER_JAR)


def _port_free(port: int) -> bool:
    """Whether ``port`` can be bound on every address (as the servers bind, with SO_REUSEADDR)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_ports() -> tuple[int, int]:
    """A name-server port and a broker port whose neighbours the broker also binds are free:
    ``port - 2`` (its fast/VIP channel) and ``port + 1`` (HA)."""
    chooser = random.Random()
    for _ in range(1000):
        namesrv, broker = chooser.randrange(*PORT_RANGE), chooser.randrange(*PORT_RANGE)
        wanted = {namesrv, broker - 2, broker, broker + 1}
        if len(wanted) == 4 and all(_port_free(port) for port in wanted):
            return namesrv, broker
    raise RocketMQPeerError(f"no free ports for RocketMQ in {PORT_RANGE[0]}-{PORT_RANGE[1]}")


def cluster_info(namesrv: str, timeout_s: float = 2.0) -> str:
    """The name server's cluster table (its JSON body, as text), from one remoting request.

    The frame: total length, then the header's length (serialization JSON = 0 in its top
    byte), the JSON header, the body (none here). fastjson writes integer map keys unquoted,
    so the body is not strict JSON: callers look for the text they need.
    """
    host, port = namesrv.rsplit(":", 1)
    header = json.dumps(
        {"code": GET_BROKER_CLUSTER_INFO, "language": "PYTHON", "version": 0, "opaque": 1, "flag": 0}
    ).encode()
    with socket.create_connection((host, int(port)), timeout=timeout_s) as connection:
        connection.sendall(struct.pack(">ii", 4 + len(header), len(header)) + header)
        (length,) = struct.unpack(">i", _read_exactly(connection, 4))
        frame = _read_exactly(connection, length)
    header_length = struct.unpack(">i", frame[:4])[0] & 0xFFFFFF
    reply = json.loads(frame[4 : 4 + header_length])
    if reply.get("code") != 0:
        raise RocketMQPeerError(f"name server {namesrv} answered cluster info with {reply}")
    return frame[4 + header_length :].decode(errors="replace")


def _read_exactly(connection: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = connection.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the name server closed the connection mid-reply")
        data += chunk
    return data


_LIVE_GROUPS: set[int] = set()
"""Process groups of started servers not yet stopped, killed at interpreter exit."""


def _kill_live_groups() -> None:
    for group in list(_LIVE_GROUPS):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    _LIVE_GROUPS.clear()


atexit.register(_kill_live_groups)


class ServerProcess:
    """A server (one of RocketMQ's JVMs) in its own session, so its whole process group can be
    signalled; its output goes to ``<log_dir>/<name>.out``. Until it is reaped, an atexit hook
    SIGKILLs its group, so no server outlives the Python process that started it."""

    def __init__(self, name: str, argv: list[str], home: Path, log_dir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.home = home
        self.output = log_dir / f"{name}.out"
        with self.output.open("wb") as output:
            self.popen = subprocess.Popen(
                argv, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )  # fmt: skip
        _LIVE_GROUPS.add(self.popen.pid)

    def log_tail(self) -> str:
        """The tail of its output and of its main RocketMQ log, for error messages."""
        parts = []
        logs = sorted((self.home / "logs" / "rocketmqlogs").glob(f"{self.name}*.log"))
        for path in [self.output, *logs[:2]]:
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace")
                # logback's configuration status lines drown the few that matter
                lines = [line for line in text.splitlines() if " |-" not in line]
                parts.append(f"--- {path}:\n" + "\n".join(lines)[-LOG_TAIL_CHARS:])
        return "\n".join(parts)

    def terminate(self) -> None:
        """SIGTERM to its group: RocketMQ's shutdown hook starts."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)

    def reap(self, deadline: float) -> None:
        """Wait for it until ``deadline`` (monotonic), then SIGKILL its group."""
        try:
            self.popen.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
        _LIVE_GROUPS.discard(self.popen.pid)


class RocketMQCluster:
    """A RocketMQ name server and one broker (ASYNC_MASTER, ASYNC_FLUSH) under ``work_dir``.

    ``work_dir`` (the caller's; nothing in it is removed) gets ``store/``, ``logs/`` (the servers'
    output), and ``namesrv/``, ``broker/``, ``driver/`` as each JVM's ``user.home`` (RocketMQ
    writes its logs to ``~/logs/rocketmqlogs``). ``heap_mb`` is the broker's heap (-Xms = -Xmx,
    touched at start); the name server gets :data:`NAMESRV_HEAP_MB`. ``stop_grace_s``: how long
    ``__exit__`` lets both shut down after SIGTERM before it SIGKILLs them.
    """

    name = "rocketmq"

    def __init__(self, work_dir: Path, heap_mb: int = 1024, stop_grace_s: float = STOP_GRACE_S) -> None:
        self.work_dir = work_dir
        self.heap_mb = heap_mb
        self.stop_grace_s = stop_grace_s
        self.namesrv = ""
        self.broker_addr = ""
        self.broker_pid = 0
        self.start_seconds = 0.0
        """From the name server's spawn to the broker's registration with it."""
        self._classpath = ""
        self._servers: list[ServerProcess] = []

    def __enter__(self) -> RocketMQCluster:
        self._classpath = classpath(build_peer())
        # a cached build needs no Maven, but every server is a JVM
        maven.require_tools("java", what="the RocketMQ peer", error_cls=RocketMQPeerError)
        try:
            self._start()
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop()

    def _start(self) -> None:
        namesrv_port, broker_port = free_ports()
        self.namesrv = f"127.0.0.1:{namesrv_port}"
        self.broker_addr = f"127.0.0.1:{broker_port}"
        logs = self.work_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        namesrv_config = self._write_config("namesrv", {"listenPort": namesrv_port})
        self._spawn(
            "namesrv",
            [f"-Xms{NAMESRV_HEAP_MB}m", f"-Xmx{NAMESRV_HEAP_MB}m"],
            ["org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(namesrv_config)],
        )
        store = self.work_dir / "store"
        broker_config = self._write_config(
            "broker",
            {
                "brokerClusterName": CLUSTER_NAME,
                "brokerName": BROKER_NAME,
                "brokerId": 0,
                "namesrvAddr": self.namesrv,
                "brokerIP1": "127.0.0.1",
                "listenPort": broker_port,
                "haListenPort": broker_port + 1,
                "brokerRole": "ASYNC_MASTER",
                "flushDiskType": "ASYNC_FLUSH",
                "storePathRootDir": store,
                "storePathCommitLog": store / "commitlog",  # its default is ~/store, not the root's
            },
        )
        broker = self._spawn(
            "broker",
            [f"-Xms{self.heap_mb}m", f"-Xmx{self.heap_mb}m", *BROKER_JVM_OPTIONS],
            ["org.apache.rocketmq.broker.BrokerStartup", "-c", str(broker_config)],
        )
        self.broker_pid = broker.popen.pid
        # Both JVMs start at once: the broker's first registration that lands is its scheduled
        # one, 10 s after its start (the one in its start finds no name server its client has
        # yet scanned as available), by which time the name server has long been up.
        registered = f'"{self.broker_addr}"'
        deadline = started + START_TIMEOUT_S
        self._await("broker's registration", lambda: registered in (self._cluster_table() or ""), deadline)
        self.start_seconds = time.monotonic() - started

    def _write_config(self, name: str, settings: dict[str, object]) -> Path:
        path = self.work_dir / f"{name}.properties"
        path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        return path

    def _spawn(self, name: str, jvm_options: list[str], main: list[str]) -> ServerProcess:
        home = self.work_dir / name
        home.mkdir(parents=True, exist_ok=True)
        argv = [
            "java", *jvm_options, *SERVER_JVM_OPTIONS,
            f"-Duser.home={home}",  # RocketMQ's logs and the name server's kv config
            f"-Drocketmq.home.dir={self.work_dir}",  # both refuse to start without a home
            f"-Drmq.logback.configurationFile=rmq.{name}.logback.xml",
            "-cp", self._classpath, *main,
        ]  # fmt: skip
        env = dict(os.environ, ROCKETMQ_HOME=str(self.work_dir))
        server = ServerProcess(name, argv, home, self.work_dir / "logs", env)
        self._servers.append(server)
        return server

    def _cluster_table(self) -> str | None:
        """The name server's cluster table, None while it does not answer."""
        try:
            return cluster_info(self.namesrv)
        except OSError:
            return None

    def _await(self, what: str, ready: Callable[[], bool], deadline: float) -> None:
        """Until ``ready()``; fails with the servers' log tails when one exits or time runs out."""
        while not ready():
            for server in self._servers:
                if server.popen.poll() is not None:
                    raise RocketMQPeerError(
                        f"RocketMQ's {server.name} exited with {server.popen.returncode} while starting\n"
                        f"{server.log_tail()}"
                    )
            if time.monotonic() > deadline:
                tails = "\n".join(server.log_tail() for server in self._servers)
                raise RocketMQPeerError(
                    f"RocketMQ not started within {START_TIMEOUT_S:.0f} s: waited for the {what} "
                    f"(name server {self.namesrv}, broker {self.broker_addr})\n{tails}"
                )
            time.sleep(0.1)

    def _stop(self) -> None:
        """SIGTERM to both servers at once, SIGKILL to what still runs ``stop_grace_s`` later."""
        for server in self._servers:
            server.terminate()
        deadline = time.monotonic() + self.stop_grace_s
        for server in self._servers:
            server.reap(deadline)
        self._servers.clear()

    def create_topic(self, topic: str, queues: int) -> None:
        """Create ``topic`` with ``queues`` read and write queues on the broker (RocketMQ's admin
        API, ``TopicAdmin``); returns once the name server routes it with those counts."""
        argv = [
            "java", *DRIVER_JVM_OPTIONS, f"-Duser.home={self.work_dir / 'driver'}", "-cp", self._classpath,
            TOPIC_ADMIN_CLASS, self.namesrv, self.broker_addr, topic, str(queues),
        ]  # fmt: skip
        try:
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TOPIC_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            raise RocketMQPeerError(f"creating topic {topic} took over {TOPIC_TIMEOUT_S:.0f} s") from None
        if done.returncode != 0:
            raise RocketMQPeerError(
                f"creating topic {topic} ({queues} queues) on {self.broker_addr} failed "
                f"(exit {done.returncode}): {(done.stdout + done.stderr)[-LOG_TAIL_CHARS:]}"
            )

    def driver_command(self) -> list[str]:
        """``java ... io.orbitmq.peer.PeerDriver``; the orchestrator appends the workload's flags."""
        home = self.work_dir / "driver"
        return ["java", *DRIVER_JVM_OPTIONS, f"-Duser.home={home}", "-cp", self._classpath, DRIVER_CLASS]
