"""What ``orbitmq bench peer`` asks each system's client to do, and what a client reports.

Both systems are driven the same way: a *driver* process per workload, started with the
command-line flags below, connects to the system's name server through its public client API
(orbitmq: :class:`orbitmq.client.producer.Producer` / :class:`~orbitmq.client.consumer.PushConsumer`,
``python -m orbitmq.bench.peer_driver``; Apache RocketMQ: ``DefaultMQProducer`` /
``DefaultMQPushConsumer``, the Java driver in ``benchmarks/peer/``), runs the workload and prints
one JSON object (:class:`DriverResult`) as its last line of standard output. The orchestrator
measures the broker's CPU and RSS from ``/proc`` around each driver run, and the driver's own
CPU from its exit (``resource.getrusage(RUSAGE_CHILDREN)``), so a driver reports only what it
alone can see: counts, elapsed time and latencies.

Start-up, JIT and warm-up are charged to neither system when the driver marks its timed phase:
it prints the line ``timed`` (:data:`TIMED_MARK`, flushed at once) just before the phase starts
(``send``, ``batch``, ``latency``: after the warm-up; ``consume``: just before the consumer's
start call) and puts the CPU seconds its own process spent from then to the end of the phase in
``extra["cpu_s"]`` (Java: ``OperatingSystemMXBean.getProcessCpuTime``; Python:
``time.process_time``). The orchestrator reads the broker's CPU when it sees ``timed`` and again
when it sees the result line. A driver that prints no mark is measured over its whole run
(broker and driver CPU over ``N + W`` messages).

Driver flags (both drivers take exactly these):

``--namesrv HOST:PORT --topic T --group G --workload {send,batch,consume,latency}
--messages N --size BYTES --in-flight K --batch B --rate R --warmup W [--auto-batch]``

* ``send``: ``K`` concurrent senders (threads in Java, tasks in Python), each sending one
  message at a time and waiting for its result (a sync send), ``N`` messages in all after ``W``
  warm-up messages that are not timed. Reports ``msg_per_s`` and the per-send latency
  percentiles. ``--auto-batch`` turns the RocketMQ producer's ``autoBatch`` on (orbitmq ignores
  it: its producer's coalescing is its default).
* ``batch``: ``K`` concurrent senders, each sending batches of ``B`` messages (one call per
  batch), ``N`` messages in all after ``W`` warm-up messages.
* ``consume``: a push consumer (clustering, concurrent listener that only counts) subscribed to
  ``*`` from the first offset drains ``N`` messages that are already stored; reports
  ``msg_per_s`` (from the first message to the ``N``-th) and ``first_message_s`` (from the
  consumer's start call to its first message).
* ``latency``: a push consumer subscribed, then a producer paced at ``R`` msg/s sends ``N``
  messages whose body starts with the send's wall-clock time in nanoseconds (8 bytes, big
  endian); latency is from that time to the listener seeing the message. Reports
  percentiles of that latency. The pacing is open loop: message ``i`` goes out at
  ``start + i / R`` whether or not earlier sends have been answered (an asynchronous send:
  RocketMQ's ``send(message, SendCallback)``, orbitmq a task per ``Producer.send``), so a slow
  answer does not lower the offered rate; ``msg_per_s`` is ``N`` over the sending time. ``W``
  warm-up messages, paced the same way, go first and are not counted; the timed ``N`` start
  once the listener has seen a warm-up message (waiting up to 30 s), so the consumer's start
  and first rebalance are not what this measures. Each latency run gets a topic of its
  own, empty, so the consumer may start from either end. Waits up to 10 s after the last send
  for the last message; messages not seen by then are ``errors``.

Every body is ``--size`` bytes. A group name is fresh per run, so offsets never carry over.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

WORKLOADS = ("send", "batch", "consume", "latency")
TIMED_MARK = "timed"
"""The line a driver prints just before its timed phase (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class Workload:
    """One driver run's parameters (the driver flags above)."""

    workload: str
    messages: int
    size: int = 1024
    in_flight: int = 1
    batch: int = 128
    rate: int = 0
    warmup: int = 0
    auto_batch: bool = False

    def flags(self, namesrv: str, topic: str, group: str) -> list[str]:
        flags = [
            "--namesrv", namesrv, "--topic", topic, "--group", group,
            "--workload", self.workload, "--messages", str(self.messages), "--size", str(self.size),
            "--in-flight", str(self.in_flight), "--batch", str(self.batch), "--rate", str(self.rate),
            "--warmup", str(self.warmup),
        ]  # fmt: skip
        return flags + (["--auto-batch"] if self.auto_batch else [])


@dataclass(slots=True)
class DriverResult:
    """What a driver prints as its last line (JSON): everything but CPU and memory."""

    workload: str
    messages: int
    seconds: float
    msg_per_s: float
    p50_ms: float | None = None
    p99_ms: float | None = None
    first_message_s: float | None = None
    errors: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, line: str) -> DriverResult:
        return cls(**json.loads(line))
