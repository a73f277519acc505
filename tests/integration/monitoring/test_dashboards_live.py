"""Every dashboard panel's query returns a series on a real Prometheus scraping a real cluster.

A name server, an ASYNC_MASTER and its slave (replication), a consumer group of two push
consumers (one orderly: queue locks, one concurrent that fails some messages: retries and dead
letters; both with a small local cache: flow-control pauses), a producer (timed messages too),
a sidecar with an application consuming through it, and an ``orbitmq proxy`` with the official
RocketMQ 5 client's SimpleConsumer receiving through it (broker POP: acks, an expiry, a dead
letter); beside them a second name server and broker with auth on, where the super user creates
a user (an audited admin change) that is then denied a call and refused with a wrong secret
(the Security row): each server
with its own ``/metrics`` port (the consumers' through ``start_metrics_server``), all scraped
every second by one real Prometheus (jobs ``namesrv``, ``broker``, ``consumer``, ``sidecar``,
``proxy``; the secured broker is one more ``broker``).  After the traffic and a few scrapes:

- every query of every panel of every generated dashboard (charts/orbitmq/dashboards/*.json),
  with Grafana's variables substituted (template variables at "All", ``$__interval`` and
  ``$__rate_interval`` for a 1 s scrape, ``$__range`` since the cluster started), returns at
  least one series, both as an instant query and as the range query a time-series panel sends,
  except the panels listed in :data:`NEEDS_OPERATOR` with the reason;
- every template variable's ``label_values`` query has values;
- ``promtool check metrics`` passes on every process's ``/metrics``;
- ``promtool check rules`` passes on the generated alert rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from dashkit import DASHBOARDS, all_variables, label_values_args
from promkit import REPO_ROOT, PrometheusError, fetch, promtool, run_prometheus

sys.path.insert(0, str(REPO_ROOT / "operator"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration" / "broker"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration" / "client"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration" / "rocketmq_v2"))
import v2kit
from clusterkit import FAST, Cluster, eventually

from orbitmq.auth.signature import sign_v1
from orbitmq.client import Admin, Message, Producer
from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_metrics import ConsumerMetrics, start_metrics_server
from orbitmq.client.consumer_types import ConsumeFromWhere, ConsumeStatus, OrderlyStatus
from orbitmq.common.credentials import Credentials
from orbitmq.common.rpc import RpcFailure
from orbitmq.ha import Policy
from orbitmq.ha.group import BrokerGroupFailover, GroupMember
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.proxy.server import Proxy
from orbitmq.proxy.settings import ProxySettings
from orbitmq.rocketmq_v2 import definition_pb2, service_pb2, service_pb2_grpc
from orbitmq.sidecar.client import SidecarClient
from orbitmq.sidecar.server import Sidecar
from orbitmq.sidecar.settings import SidecarSettings
from orbitmq.store.record import StoredMessage
from orbitmq.v1 import broker_pb2, common_pb2
from orbitmq_operator import metrics as operator_metrics
from orbitmq_operator.monitoring.queries import (
    panel_queries,
    parse_duration,
    substitute_grafana_variables,
    variable_queries,
)

# The first use may build the monitoring tools (minutes, cold); the test itself takes ~16 s.
pytestmark = pytest.mark.timeout(60 * 60)

ALERT_RULES = REPO_ROOT / "charts" / "orbitmq" / "rules" / "orbitmq-alerts.yaml"
SCRAPE = "1s"
RANGE_S = 20

TOPIC = "Orders"
GROUP = "Billing"
SIDECAR_GROUP = "Shipping"
POP_GROUP = "Returns"
QUEUES = 4

# The cluster with auth on: its bootstrap super user, and the user it creates.
AUTH = {"auth_enabled": True, "auth_super_user": "root", "auth_super_secret": "root-secret"}
APP, APP_SECRET = "dashboard-app", "dashboard-app-secret"

# Retries a fraction of a second apart, so a failing message reaches the dead-letter queue fast.
BROKER = {
    "replica_config_interval_ms": 100,
    "slave_ack_timeout_ms": 2_000,
    "delay_levels": " ".join(["200ms"] * 18),
}

OPERATOR_ONLY = (
    "orbitmq_operator_* series come from the Kubernetes operator, which this local cluster has none of"
)
NEEDS_OPERATOR: dict[tuple[str, str], str] = {
    **{
        ("operator.json", title): OPERATOR_ONLY
        for title in (
            "Reconciles",
            "Reconcile errors",
            "Reconcile duration",
            "Object writes",
            "Operator failovers",
            "Last failover decision",
        )
    },
    ("overview.json", "orbitmq_operator_reconcile_errors_total"): OPERATOR_ONLY,
    ("storage-and-ha.json", "orbitmq_operator_failovers_total"): OPERATOR_ONLY,
}
"""(dashboard file, panel title or a metric its query uses) -> why it has no series here.  The
broker's own role changes (``orbitmq_broker_role_changes_total``) are not excluded: the test hands
mastership to the slave and back (a planned switchover, as the operator's rolling update does)."""


def excluded(dashboard: str, title: str, expr: str) -> str | None:
    for (file, what), reason in NEEDS_OPERATOR.items():
        if file == dashboard and (what == title or what in expr):
            return reason
    return None


def host_port(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


class Traffic:
    """Listeners of the two group members: tag ``fail`` is never consumed (retries, then the
    dead-letter queue); the rest succeed, slowly enough for the small local caches to pause
    pulls."""

    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0

    def concurrent(self, messages: list[StoredMessage]) -> ConsumeStatus:
        if any(m.tags == "fail" for m in messages):
            self.failed += 1
            return ConsumeStatus.RECONSUME_LATER
        time.sleep(0.005)
        self.ok += len(messages)
        return ConsumeStatus.CONSUME_SUCCESS

    def orderly(self, messages: list[StoredMessage]) -> OrderlyStatus:
        if any(m.tags == "fail" for m in messages):
            self.failed += 1
            return OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        time.sleep(0.002)
        self.ok += len(messages)
        return OrderlyStatus.SUCCESS


async def sidecar_app(address: str, seen: list[int]) -> None:
    """The application behind the sidecar: acknowledges, asks for a later retry of every
    fifth delivery (so in-flight, acks by status and redeliveries all move)."""
    async with SidecarClient(address) as sidecar:
        async for delivery in sidecar.deliveries(app_id="shipping-1", max_in_flight=8):
            seen.append(1)
            if len(seen) % 5 == 0 and delivery.reconsume_times == 0:
                await delivery.later()
            else:
                await delivery.ack()


async def test_every_dashboard_panel_returns_a_series(tmp_path: Path) -> None:
    started = time.time()
    stack = contextlib.AsyncExitStack()
    async with stack:
        # -- the cluster -------------------------------------------------------------------
        namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen="127.0.0.1:0"))
        await namesrv.start()
        stack.push_async_callback(namesrv.close)
        cluster = Cluster(tmp_path, namesrv)
        stack.push_async_callback(cluster.close)
        master = await cluster.start_broker(
            "a-master", broker_name="broker-a", broker_role="ASYNC_MASTER", **BROKER
        )
        slave = await cluster.start_broker(
            "a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **BROKER
        )
        admin = Admin(cluster.address)
        stack.push_async_callback(admin.close)
        await eventually(lambda: _masters(admin), 20, lambda: "no master registered")
        await admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        await admin.create_group(GROUP, retry_max_times=1)
        await admin.create_group(SIDECAR_GROUP, retry_max_times=1)
        await admin.create_group(POP_GROUP, retry_max_times=1)

        # -- two group members with metrics ports, one orderly ----------------------------
        traffic = Traffic()
        consumers: dict[str, PushConsumer] = {}
        consumer_targets: list[str] = []
        for name, orderly in (("billing-orderly", True), ("billing-concurrent", False)):
            metrics = ConsumerMetrics(GROUP, name)
            consumer = PushConsumer(
                GROUP,
                cluster.address,
                listener=traffic.orderly if orderly else traffic.concurrent,
                orderly=orderly,
                settings=dataclasses.replace(
                    FAST, max_reconsume_times=1, cached_messages_per_queue=4, pull_batch=16
                ),
                consume_from=ConsumeFromWhere.FIRST_OFFSET,
                instance_name=name,
                metrics=metrics,
            )
            consumer.subscribe(TOPIC)
            await consumer.start()
            stack.push_async_callback(consumer.close)
            consumers[name] = consumer
            consumer_targets.append(f"127.0.0.1:{start_metrics_server(0, metrics)}")

        # -- a sidecar and the application behind it ---------------------------------------
        sidecar = Sidecar(
            SidecarSettings(
                namesrv=cluster.address,
                group=SIDECAR_GROUP,
                subscriptions=[TOPIC],
                consume_from="first",
                listen="127.0.0.1:0",
                metrics_listen="127.0.0.1:0",
                instance_name="shipping-sidecar",
                rebalance_ms=1_000,
                heartbeat_ms=1_000,
                persist_ms=500,
                lock_renew_ms=1_000,
                route_refresh_ms=1_000,
                drain_timeout_ms=1_000,
            )
        )
        await sidecar.start()
        stack.push_async_callback(sidecar.drain)
        app_seen: list[int] = []
        app = asyncio.create_task(sidecar_app(sidecar.address, app_seen))
        stack.callback(app.cancel)

        # -- the RocketMQ 5 endpoint and a consumer of the official client behind it -------
        proxy = Proxy(
            ProxySettings(
                listen="127.0.0.1:0", metrics_listen="127.0.0.1:0", namesrv=cluster.address, grace_ms=200
            )
        )
        await proxy.start()
        stack.push_async_callback(proxy.close)
        pop = asyncio.create_task(asyncio.to_thread(_pop_consumer, proxy.address))

        # -- a second cluster, with auth on ------------------------------------------------
        secure_namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None, **AUTH))
        await secure_namesrv.start()
        secure = Cluster(tmp_path / "secure", secure_namesrv)
        stack.push_async_callback(secure.close)
        secured = await secure.start_broker("secure-a", **AUTH)

        targets = {
            "proxy": [host_port(proxy.grpc.metrics_url or "")],
            "namesrv": [host_port(namesrv.metrics_url or "")],
            "broker": [host_port(b.broker.grpc.metrics_url or "") for b in (master, slave, secured)],
            "consumer": consumer_targets,
            "sidecar": [host_port(sidecar.grpc.metrics_url or "")],
        }
        # Started (and stopped) in a thread: its start waits for every target, and the
        # cluster in this event loop must keep running meanwhile.
        running = run_prometheus(targets, tmp_path / "prometheus", scrape_interval=SCRAPE)
        prom = await asyncio.to_thread(running.__enter__)
        stack.push_async_callback(asyncio.to_thread, running.__exit__, None, None, None)
        # -- traffic -----------------------------------------------------------------------
        async with Producer("Checkout", cluster.address) as producer:
            for i in range(200):
                tags = "fail" if i % 50 == 7 else "ok"
                await producer.send(Message(TOPIC, f"order {i}".encode(), tags=tags, keys=[f"o{i}"]))
            for i in range(5):  # through the broker's timer
                await producer.send(Message(TOPIC, f"timed {i}".encode(), tags="ok", delay_ms=300 + 100 * i))
        with contextlib.suppress(RpcFailure, grpc.aio.AioRpcError):  # a lookup of a topic nobody created
            await admin.route("NoSuchTopic")
        await _audited_events(secure, secured)
        await _intrude_on_locks(master, consumers["billing-orderly"])
        await eventually(lambda: len(app_seen) >= 200, 30, lambda: f"sidecar app saw {len(app_seen)}")
        await eventually(
            lambda: _dead_letters(master),
            30,
            lambda: f"no dead letters yet ({traffic.failed} failed listener calls)",
        )
        await asyncio.wait_for(pop, 60)  # its dead letter, before the switchover below
        # Mastership to the slave and back: the brokers' role changes (promoted, demoted).
        group = BrokerGroupFailover(
            [GroupMember("a-master", master.broker.address), GroupMember("a-slave", slave.broker.address)],
            "ASYNC_MASTER",
            Policy(),
        )
        for current in (master, slave):
            await eventually(
                lambda current=current: current.broker.replicas.connected,
                20,
                lambda: "no slave replicates from the master yet",
            )
            decision = await group.switchover(int(time.time() * 1000))
            assert decision is not None and decision.promote, decision
        assert group.switchovers == 2
        # A few scrapes of everything the traffic moved, and then some more traffic so the
        # rates over the last $__rate_interval are not all from before it.
        await asyncio.to_thread(
            prom.wait_for, 'count_over_time(orbitmq_queue_max_offset{topic=~"%DLQ%.*"}[1m]) >= 3', 30
        )
        async with Producer("Checkout", cluster.address) as producer:
            for i in range(20):
                await producer.send(Message(TOPIC, f"more {i}".encode(), tags="ok"))
        await asyncio.to_thread(_pop_consumer, proxy.address, keep_one=True)
        await asyncio.sleep(3)

        # -- the checks --------------------------------------------------------------------
        range_ = f"{max(60, int(time.time() - started) + 1)}s"
        report = await asyncio.to_thread(_check_dashboards, prom, range_)
        metrics_problems = await asyncio.to_thread(_check_metrics, targets)
        rules = await asyncio.to_thread(promtool, "check", "rules", str(ALERT_RULES), check=False)

        print(report)
        assert not metrics_problems, "promtool check metrics:\n" + "\n".join(metrics_problems)
        assert rules.returncode == 0, f"promtool check rules:\n{rules.stdout}{rules.stderr}"
        print(f"promtool check rules: {rules.stdout.strip()}")
        print(f"runtime {time.time() - started:.1f} s")


# ------------------------------------------------------------------------------------ helpers


async def _masters(admin: Admin) -> bool:
    try:
        return bool(await admin.masters())
    except RpcFailure:
        return False


async def _dead_letters(running: Any) -> bool:
    """The master's /metrics shows a dead-letter queue."""
    text = await asyncio.to_thread(fetch, running.broker.grpc.metrics_url)
    return any(line.startswith("orbitmq_queue_max_offset{") and "%DLQ%" in line for line in text.splitlines())


async def _audited_events(secure: Cluster, running: Any) -> None:
    """On the cluster with auth on: the super user creates a user (an allowed admin change), who,
    granted nothing, asks the broker for a queue's max offset (denied) and then asks with a wrong
    secret (an authentication failure)."""
    super_user = Credentials(AUTH["auth_super_user"], AUTH["auth_super_secret"])
    async with Admin(secure.address, credentials=super_user) as admin:
        await eventually(lambda: _masters(admin), 20, lambda: "the secured broker is not registered")
        await admin.create_user(APP, APP_SECRET)
    method = "/orbitmq.v1.Broker/GetMaxOffset"
    request = broker_pb2.QueueRequest(topic=TOPIC, queue_id=0)
    for secret, code in (
        (APP_SECRET, grpc.StatusCode.PERMISSION_DENIED),
        (f"not-{APP_SECRET}", grpc.StatusCode.UNAUTHENTICATED),
    ):
        metadata = sign_v1(method, APP, secret, time.time_ns() // 1_000_000)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await running.stub.GetMaxOffset(request, metadata=metadata, timeout=5)
        assert refused.value.code() is code, refused.value


def _pop_consumer(endpoint: str, keep_one: bool = False, within_s: float = 45.0) -> None:
    """The official RocketMQ 5 SimpleConsumer through the proxy (in a thread: the client is
    synchronous): it acks every message but two. One it hides for 1 s again at each delivery
    (ChangeInvisibleDuration, as a push consumer's nack: the proxy's first and repeated changes),
    so the broker revives it once and then, past the group's one retry, moves it to the
    dead-letter topic; the other it gives up on (ForwardMessageToDeadLetterQueue, as a FIFO push
    consumer past its attempts). The receives that find nothing are long polls answered
    MESSAGE_NOT_FOUND. With ``keep_one``, it only receives one message and keeps it in flight for
    a minute."""
    config = v2kit.ClientConfiguration(endpoint, v2kit.Credentials())
    consumer = v2kit.SimpleConsumer(config, POP_GROUP, {TOPIC: v2kit.FilterExpression("*")}, await_duration=1)
    consumer.startup()
    try:
        if keep_one:
            _receive_one(consumer, within_s)
            return
        kept: str | None = None
        forwarded = False
        deliveries: list[float] = []
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            for received in consumer.receive(16, 1) or []:
                if kept in (None, received.message_id):
                    kept = received.message_id
                    deliveries.append(time.monotonic())
                    consumer.change_invisible_duration(received, 1)
                elif not forwarded:
                    _forward_to_dead_letters(endpoint, received)
                    forwarded = True
                else:
                    consumer.ack(received)
            if len(deliveries) >= 2 and time.monotonic() - deliveries[-1] > 3:
                break  # expired after its last attempt: a dead letter by now
        else:
            raise AssertionError(f"the kept message was delivered {len(deliveries)} times in {within_s:.0f}s")
    finally:
        consumer.shutdown()


def _forward_to_dead_letters(endpoint: str, received: Any) -> None:
    """What a push consumer does with a message past its attempts (the SimpleConsumer has no call
    for it): ForwardMessageToDeadLetterQueue, answered OK."""
    request = service_pb2.ForwardMessageToDeadLetterQueueRequest(
        group=definition_pb2.Resource(name=POP_GROUP),
        topic=definition_pb2.Resource(name=TOPIC),
        receipt_handle=received.receipt_handle,
        message_id=received.message_id,
        delivery_attempt=received.delivery_attempt,
        max_delivery_attempts=1,
    )
    with grpc.insecure_channel(endpoint) as channel:
        reply = service_pb2_grpc.MessagingServiceStub(channel).ForwardMessageToDeadLetterQueue(
            request, metadata=(("x-mq-client-id", "dashboards-live@1"),), timeout=5
        )
    assert reply.status.code == definition_pb2.OK, reply.status.message


def _receive_one(consumer: Any, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if consumer.receive(1, 60):
            return
    raise AssertionError(f"nothing received in {within_s:.0f}s")


async def _intrude_on_locks(running: Any, orderly: PushConsumer) -> None:
    """Another client asks for the queues the orderly member holds: the broker rejects it."""

    async def held() -> bool:
        reply = await running.stub.LockBatch(
            broker_pb2.LockBatchRequest(
                consumer_group=GROUP,
                client_id=orderly.client_id,
                queues=[
                    common_pb2.MessageQueue(topic=TOPIC, broker_name="broker-a", queue_id=q)
                    for q in range(QUEUES)
                ],
            )
        )
        return bool(reply.locked)

    await eventually(held, 20, lambda: "the orderly member holds no queue lock")
    reply = await running.stub.LockBatch(
        broker_pb2.LockBatchRequest(
            consumer_group=GROUP,
            client_id="intruder@127.0.0.1",
            queues=[
                common_pb2.MessageQueue(topic=TOPIC, broker_name="broker-a", queue_id=q)
                for q in range(QUEUES)
            ],
        )
    )
    await running.stub.UnlockBatch(
        broker_pb2.UnlockBatchRequest(
            consumer_group=GROUP, client_id="intruder@127.0.0.1", queues=list(reply.locked)
        )
    )


def _label_values(prom: Any, query: str, variables: dict[str, str]) -> list[str]:
    """Grafana's ``label_values(selector, label)``: the label's values among matching series."""
    selector, label = label_values_args(query)
    selector = substitute_grafana_variables(selector, variables, scrape_interval=SCRAPE)
    return sorted({s[label] for s in prom.series(selector) if label in s})


def _operator_series_names() -> set[str]:
    """The series names the operator's registry can expose (the excluded panels' queries must
    use these: an exclusion must not hide a misspelt metric)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "info": ("_info",)}
    return {
        family.name + suffix
        for family in operator_metrics.REGISTRY.collect()
        for suffix in suffixes.get(family.type, ("",))
    }


def _check_dashboards(prom: Any, range_: str) -> str:
    operator_series = _operator_series_names()
    lines: list[str] = []
    empty: list[str] = []
    checked = skipped = 0
    for path in sorted(DASHBOARDS.glob("*.json")):
        dashboard = json.loads(path.read_text())
        variables = all_variables(dashboard)
        for name, query in variable_queries(dashboard):
            values = _label_values(prom, query, variables)
            lines.append(f"  {path.name:24} ${name:8} {len(values)} value(s): {', '.join(values)}")
            if not values:
                empty.append(f"{path.name} variable ${name}: {query} has no values")
        for title, expr in panel_queries(dashboard):
            promql = substitute_grafana_variables(
                expr, variables, scrape_interval=SCRAPE, interval=SCRAPE, range_=range_
            )
            reason = excluded(path.name, title, expr)
            try:
                series = prom.query(promql)
                # What a time-series panel sends: the last RANGE_S seconds, a point per $__interval.
                ranged = prom.query_range(promql, start=time.time() - RANGE_S, step=parse_duration(SCRAPE))
            except PrometheusError as exc:
                empty.append(f"{path.name} {title!r}: {promql} fails: {exc}")
                continue
            if reason:
                unknown = set(re.findall(r"orbitmq_operator_\w+", expr)) - operator_series
                assert not unknown, f"{path.name} {title!r} names no operator metric: {sorted(unknown)}"
                skipped += 1
                lines.append(f"  {path.name:24} {title:36} skipped ({len(series)} series): {reason}")
                continue
            checked += 1
            points = sum(len(s["values"]) for s in ranged)
            lines.append(
                f"  {path.name:24} {title:36} {len(series)} series now, "
                f"{len(ranged)} over {RANGE_S} s ({points} points)"
            )
            if not series or not ranged:
                empty.append(f"{path.name} {title!r}: {promql} ({len(series)} now, {len(ranged)} ranged)")
    assert not empty, "no series (or an error) for:\n" + "\n".join(empty)
    return f"dashboard queries: {checked} checked, {skipped} skipped (range {range_})\n" + "\n".join(lines)


def _check_metrics(targets: dict[str, list[str]]) -> list[str]:
    problems = []
    for job, addresses in targets.items():
        for address in addresses:
            done = promtool("check", "metrics", input=fetch(f"http://{address}/metrics"), check=False)
            output = (done.stdout + done.stderr).strip()
            if done.returncode != 0 or output:
                problems.append(f"{job} {address}: {output}")
    return problems
