"""``orbitmq bench fuzz``: property-based requests (hypothesis) at every RPC of every server.

A name server, a broker, a proxy and a sidecar run as child processes with their stderr in
files. Each RPC found in the descriptors (:mod:`orbitmq.bench.fuzz_wire`) gets an equal share of
``requests`` per server, drawn from valid-shaped, broken, random and deeply nested bytes, plus
one request over the receive limit. A call is a failure when its answer is UNKNOWN (an exception
escaped a handler) or, for a unary RPC, when the per-call deadline passes (a hang). Afterwards
every server must answer health SERVING, a producer's send and a pull must work, so must a send
through the sidecar, no log may hold a traceback, and the broker's store, stopped, must recover
from its first byte with nothing cut or dropped. The suite runs it small
(tests/integration/fuzz); this command runs the 10 000-requests-a-server version.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.protobuf.descriptor import MethodDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orbitmq.bench.fuzz_wire import FUZZ_TOPIC, SERVER_OF, huge_request, method_path, request_bytes, services

CHECK_TOPIC = "FuzzCheckTopic"
SEGMENT_BYTES = 8 * 1024 * 1024
UNARY_DEADLINE_S = 10.0
STREAM_DEADLINE_S = 0.5
LOG_FAULTS = re.compile(r"Traceback|Exception in callback|Task exception was never retrieved")
LOG_RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")  # a line that starts a log record
SERVERS = ("namesrv", "broker", "proxy", "sidecar")


@dataclass
class Tally:
    """Answers per method and status; ``failures`` are the calls that break the rules."""

    statuses: dict[str, Counter[str]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    stuck: str | None = None
    """Set when a server stopped answering: its remaining requests are not sent (each would
    wait out its deadline)."""

    def record(self, path: str, status: str, streaming: bool, detail: str = "") -> None:
        self.statuses.setdefault(path, Counter())[status] += 1
        if status == "UNKNOWN" or (status == "DEADLINE_EXCEEDED" and not streaming):
            self.failures.append(f"{path}: {status} {detail[:300]}")

    def calls(self, server: str) -> int:
        return sum(sum(c.values()) for path, c in self.statuses.items() if _server_of_path(path) == server)


def _server_of_path(path: str) -> str:
    return SERVER_OF[path.split("/")[1]]


def methods_by_server() -> dict[str, list[MethodDescriptor]]:
    """Every RPC of every service, under the server that answers it (KeyError: a service no
    server is known to answer, which fails the completeness check)."""
    found: dict[str, list[MethodDescriptor]] = {}
    for service in services():
        found.setdefault(SERVER_OF[service.full_name], []).extend(service.methods)
    return found


def _call(channel: grpc.Channel, method: MethodDescriptor, payload: bytes, tally: Tally) -> None:
    if tally.stuck:
        return
    path = method_path(method)
    streaming = method.client_streaming or method.server_streaming
    failures = len(tally.failures)
    try:
        if method.client_streaming:
            chunks = [payload, payload[: len(payload) // 2]] if payload else [payload]
            replies = channel.stream_stream(path)(iter(chunks), timeout=STREAM_DEADLINE_S)
            for _ in replies:
                pass
        elif method.server_streaming:
            for _ in channel.unary_stream(path)(payload, timeout=UNARY_DEADLINE_S):
                pass
        else:
            channel.unary_unary(path)(payload, timeout=UNARY_DEADLINE_S)
        tally.record(path, "OK", streaming)
    except grpc.RpcError as error:
        code = error.code()  # type: ignore[attr-defined]
        tally.record(path, code.name, streaming, str(error.details()))  # type: ignore[attr-defined]
    hung = len(tally.failures) > failures and "DEADLINE_EXCEEDED" in tally.failures[-1]
    if hung and not _answers_health(channel):
        tally.stuck = f"{path}: the server stopped answering after {payload[:64].hex()}... ({len(payload)} B)"
        tally.failures.append(tally.stuck)


def _answers_health(channel: grpc.Channel) -> bool:
    try:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3)
    except grpc.RpcError:
        return False
    return True


def fuzz_server(
    address: str, methods: list[MethodDescriptor], requests: int, tally: Tally, seed: int
) -> None:
    """``requests`` calls shared equally by ``methods``, hypothesis drawing each payload."""
    per_method = math.ceil(requests / len(methods))
    options = [("grpc.max_send_message_length", 16 * 1024 * 1024)]
    with grpc.insecure_channel(address, options=options) as channel:
        for method in methods:
            _call(channel, method, huge_request(method.input_type), tally)
            _fuzz_method(channel, method, per_method, tally, seed)
        tally.stuck = None  # the next server is fuzzed as usual


def _fuzz_method(
    channel: grpc.Channel, method: MethodDescriptor, examples: int, tally: Tally, seed: int
) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed

    @with_seed(seed)
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(request_bytes(method.input_type))
    def one(payload: bytes) -> None:
        _call(channel, method, payload, tally)

    one()


class Child:
    """A server child process; its stderr goes to ``log``, its first stdout line says where."""

    def __init__(self, name: str, args: list[str], log: Path) -> None:
        self.name, self.log = name, log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "orbitmq.cli.main", *args],
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if "listening on" not in line:
            self.process.kill()
            raise RuntimeError(f"{name} did not start: {line!r} {log.read_text()[-2000:]}")
        self.address = line.split("listening on ")[1].split()[0]

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def log_faults(self) -> list[str]:
        """Each traceback or asyncio complaint in the log, with the lines that follow it up to
        the next log record (the stack and the exception)."""
        lines = self.log.read_text(errors="replace").splitlines()
        faults = []
        for at, line in enumerate(lines):
            if LOG_FAULTS.search(line):
                block = [line]
                for after in lines[at + 1 : at + 40]:
                    if LOG_RECORD.match(after):
                        break
                    block.append(after)
                faults.append(f"{self.name}: " + "\n".join(block))
        return faults


@contextmanager
def servers(root: Path) -> Iterator[dict[str, Child]]:
    no_metrics = ["--metrics-listen", ""]
    started: dict[str, Child] = {}
    try:
        started["namesrv"] = Child(
            "namesrv", ["namesrv", "--listen", "127.0.0.1:0", *no_metrics], root / "namesrv.log"
        )
        namesrv = ["--namesrv", started["namesrv"].address]
        started["broker"] = Child(
            "broker",
            [
                "broker",
                "--listen",
                "127.0.0.1:0",
                *no_metrics,
                *namesrv,
                "--data-dir",
                str(root / "broker"),
                "--segment-bytes",
                str(SEGMENT_BYTES),
            ],
            root / "broker.log",
        )
        started["proxy"] = Child(
            "proxy", ["proxy", "--listen", "127.0.0.1:0", *no_metrics, *namesrv], root / "proxy.log"
        )
        started["sidecar"] = Child(
            "sidecar",
            [
                "sidecar",
                "--listen",
                "127.0.0.1:0",
                *no_metrics,
                *namesrv,
                "--group",
                "FuzzSidecar",
                "--subscribe",
                CHECK_TOPIC,
            ],
            root / "sidecar.log",
        )
        yield started
    finally:
        for child in reversed(started.values()):
            child.stop()


def _serving(address: str) -> str:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


async def _create_topics(namesrv: str) -> None:
    """The check's topic, and the one sane fuzzed requests mostly name (they may delete it)."""
    from orbitmq.client.admin import Admin

    async with Admin(namesrv) as admin:
        await admin.create_topic(CHECK_TOPIC, read_queue_nums=1, write_queue_nums=1)
        await admin.create_topic(FUZZ_TOPIC, read_queue_nums=4, write_queue_nums=4)


async def _send_and_pull(namesrv: str, broker: str, sidecar: str) -> list[str]:
    """A producer's send read back by a pull, and a send through the sidecar: the normal paths."""
    from orbitmq.client.message import Message
    from orbitmq.client.producer import Producer
    from orbitmq.sidecar.client import SidecarClient
    from orbitmq.store.record import decode
    from orbitmq.v1 import broker_pb2, broker_pb2_grpc

    problems: list[str] = []
    body = f"after-fuzz-{time.time_ns()}".encode()
    async with Producer("FuzzCheckProducer", namesrv) as producer:
        sent = await producer.send(Message(CHECK_TOPIC, body))
    async with grpc.aio.insecure_channel(broker) as channel:
        pull = broker_pb2.PullMessageRequest(
            consumer_group="FuzzCheckGroup",
            topic=CHECK_TOPIC,
            queue_id=sent.queue_id,
            queue_offset=sent.queue_offset,
            max_msg_nums=1,
            commit_offset=-1,
        )
        reply = await broker_pb2_grpc.BrokerStub(channel).PullMessage(pull, timeout=10)
        if [decode(record).body for record in reply.records] != [body]:
            problems.append(f"pull after the fuzz did not return the message sent: {reply.status}")
    async with SidecarClient(sidecar) as client:
        await client.send(CHECK_TOPIC, b"through the sidecar after the fuzz")
    return problems


def store_check(data_dir: Path) -> list[str]:
    """The stopped broker's store read back from its first byte (the chaos runs' check too)."""
    from orbitmq.chaos.diskfault import check_store

    return check_store(data_dir, SEGMENT_BYTES)


@dataclass
class Outcome:
    calls: dict[str, int]
    statuses: dict[str, dict[str, int]]
    problems: list[str]
    seconds: float


def run_fuzz(root: Path, requests: int, seed: int = 27) -> Outcome:
    """Fuzz the four servers with ``requests`` calls each; return what was answered and every
    rule broken (an empty ``problems`` is a pass)."""
    started = time.monotonic()
    tally = Tally()
    problems: list[str] = []
    by_server = methods_by_server()
    with servers(root) as children:
        asyncio.run(_create_topics(children["namesrv"].address))
        for name in SERVERS:
            fuzz_server(children[name].address, by_server[name], requests, tally, seed)
        for name, child in children.items():
            if child.process.poll() is not None:
                problems.append(f"{name} exited with {child.process.returncode}")
            elif (status := _serving(child.address)) != "SERVING":
                problems.append(f"{name} health is {status}")
        problems += asyncio.run(
            _send_and_pull(
                children["namesrv"].address, children["broker"].address, children["sidecar"].address
            )
        )
        logs = list(children.values())
    problems += tally.failures
    for child in logs:
        problems += child.log_faults()
    problems += store_check(root / "broker")
    fuzzed = {method_path(m) for methods in by_server.values() for m in methods}
    problems += [f"{path}: never called" for path in sorted(fuzzed - set(tally.statuses))]
    return Outcome(
        calls={name: tally.calls(name) for name in SERVERS},
        statuses={path: dict(counter) for path, counter in sorted(tally.statuses.items())},
        problems=problems,
        seconds=time.monotonic() - started,
    )


def run(requests: int, work_dir: Path | None, as_json: bool, seed: int = 27) -> bool:
    with tempfile.TemporaryDirectory(dir=work_dir) as scratch:
        outcome = run_fuzz(Path(scratch), requests, seed)
    if as_json:
        print(json.dumps(outcome.__dict__))
    else:
        for name, calls in outcome.calls.items():
            print(f"{name}: {calls} requests")
        print(
            f"{sum(outcome.calls.values())} requests in {outcome.seconds:.0f} s;",
            f"problems: {len(outcome.problems)}",
        )
        for problem in outcome.problems:
            print(f"  {problem}")
    sys.stdout.flush()
    return not outcome.problems
