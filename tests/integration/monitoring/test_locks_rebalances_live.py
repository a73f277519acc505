"""The locks-and-rebalances dashboard shows consumers that export no metrics.

``orbitmq consume`` and most applications expose no ``/metrics`` of their
own: what a dashboard shows of them must come from the brokers, which see every heartbeat, every
member that leaves and every queue lock. Here a real broker is the only target of a real
Prometheus, and two consumer groups run without any consumer metrics: an orderly one (a second
member joins: its queue locks move) and a concurrent one (a member leaves). Then every query of
every panel of ``locks-and-rebalances.json`` runs as Grafana sends it (variables at "All"), as an
instant query and as a time-series panel's range query:

- every panel outside the consumers' own row returns a series, and its first query (the broker's
  view) does;
- the panels of the consumers' own row read client-side families only (they are the detail a
  consumer with a metrics port adds), and return nothing here.

The report printed counts the panels and queries that return data.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from dashkit import DASHBOARDS, all_variables, panel_rows
from promkit import REPO_ROOT, PrometheusError, run_prometheus

sys.path.insert(0, str(REPO_ROOT / "tests" / "integration" / "client"))
from clusterkit import FAST, Cluster, eventually

from orbitmq.client import Admin, Message, Producer
from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_types import ConsumeFromWhere, ConsumeStatus, OrderlyStatus
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq_operator.monitoring import inventory
from orbitmq_operator.monitoring.dashboards import CLIENT_DETAIL
from orbitmq_operator.monitoring.queries import check_promql, parse_duration, substitute_grafana_variables

# The first use may build the monitoring tools (minutes, cold); the test itself takes ~10 s.
pytestmark = pytest.mark.timeout(60 * 60)

BOARD = DASHBOARDS / "locks-and-rebalances.json"
SCRAPE = "1s"
RANGE_S = 20
TOPIC = "Orders"
ORDERLY, CONCURRENT = "Ledger", "Billing"
QUEUES = 4
CLIENT_FAMILIES = frozenset(
    series
    for family in inventory.metric_families().values()
    if family.module == "orbitmq.client.consumer_metrics"
    for series in family.series()
)


async def test_broker_side_panels_show_consumers_without_metrics(tmp_path: Path) -> None:
    started = time.time()
    async with contextlib.AsyncExitStack() as stack:
        namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
        await namesrv.start()
        stack.push_async_callback(namesrv.close)
        cluster = Cluster(tmp_path, namesrv)
        stack.push_async_callback(cluster.close)
        broker = await cluster.start_broker("broker-a")
        admin = Admin(cluster.address)
        stack.push_async_callback(admin.close)
        await admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        # Prometheus scrapes the broker alone: no consumer exposes anything.
        running = run_prometheus(
            {"broker": [_host_port(broker.broker.grpc.metrics_url or "")]},
            tmp_path / "prometheus",
            scrape_interval=SCRAPE,
        )
        prom = await asyncio.to_thread(running.__enter__)
        stack.push_async_callback(asyncio.to_thread, running.__exit__, None, None, None)

        async def member(group: str, name: str, orderly: bool) -> PushConsumer:
            consumer = PushConsumer(
                group,
                cluster.address,
                listener=(lambda _: OrderlyStatus.SUCCESS)
                if orderly
                else (lambda _: ConsumeStatus.CONSUME_SUCCESS),
                orderly=orderly,
                settings=FAST,
                consume_from=ConsumeFromWhere.FIRST_OFFSET,
                instance_name=name,
            )
            consumer.subscribe(TOPIC)
            await consumer.start()
            stack.push_async_callback(consumer.close)
            return consumer

        first = await member(ORDERLY, "ledger-1", orderly=True)
        await member(CONCURRENT, "billing-1", orderly=False)
        leaving = await member(CONCURRENT, "billing-2", orderly=False)
        locks = broker.broker.locks
        await eventually(lambda: _owners(locks) == {first.client_id}, 20, lambda: f"owners {_owners(locks)}")
        await member(ORDERLY, "ledger-2", orderly=True)  # joins: half of the locks move to it
        await eventually(lambda: len(_owners(locks)) == 2, 20, lambda: f"owners {_owners(locks)}")
        await leaving.close()  # leaves: the concurrent group's other member takes its queues
        async with Producer("Checkout", cluster.address) as producer:
            for i in range(40):
                await producer.send(Message(TOPIC, f"order {i}".encode()))
        await asyncio.to_thread(
            prom.wait_for,
            f'count(count by (client) (orbitmq_queue_lock_owner{{group="{ORDERLY}"}})) >= 2'
            f' and on() orbitmq_consumer_connections{{group="{CONCURRENT}"}} == 1',
            30,
        )
        await asyncio.sleep(2)  # a few more scrapes after the last change

        range_ = f"{max(60, int(time.time() - started) + 1)}s"
        report = await asyncio.to_thread(_run_panels, prom, range_)
    print(report.text)
    assert not report.empty, "no series for:\n" + "\n".join(report.empty)
    assert report.detail, f"no panel in the row {CLIENT_DETAIL!r}"


class Report:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.empty: list[str] = []
        """Broker-view panels (or their first query) without a series: the failures."""
        self.detail: list[str] = []
        """Panels of the consumers' own row."""
        self.queries = self.queries_with_data = self.panels_with_data = 0
        self.panels: set[str] = set()

    @property
    def text(self) -> str:
        return (
            f"locks-and-rebalances, consumers without metrics: {self.panels_with_data} of "
            f"{len(self.panels)} panels and {self.queries_with_data} of {self.queries} queries "
            f"return data ({len(self.detail)} panels need consumer metrics)\n" + "\n".join(self.lines)
        )


def _run_panels(prom: Any, range_: str) -> Report:
    dashboard = json.loads(BOARD.read_text())
    variables = all_variables(dashboard)
    report = Report()
    answered: dict[str, list[bool]] = {}
    for row, title, expr in panel_rows(dashboard):
        promql = substitute_grafana_variables(
            expr, variables, scrape_interval=SCRAPE, interval=SCRAPE, range_=range_
        )
        try:
            now = prom.query(promql)
            ranged = prom.query_range(promql, start=time.time() - RANGE_S, step=parse_duration(SCRAPE))
        except PrometheusError as exc:
            report.empty.append(f"{title!r}: {promql} fails: {exc}")
            continue
        has_data = bool(now) and bool(ranged)
        report.queries += 1
        report.queries_with_data += has_data
        report.panels.add(title)
        first = title not in answered
        answered.setdefault(title, []).append(has_data)
        report.lines.append(f"  [{row}] {title:32} {len(now)} series now, {len(ranged)} ranged: {expr}")
        if row == CLIENT_DETAIL:
            families = check_promql(promql).metrics
            assert families <= CLIENT_FAMILIES, f"{title!r} in {row!r} reads {families - CLIENT_FAMILIES}"
            if first:
                report.detail.append(title)
        elif first and not has_data:
            report.empty.append(f"{title!r} (its first query, the broker view): {promql}")
    report.panels_with_data = sum(any(results) for results in answered.values())
    for title, results in answered.items():
        if title not in report.detail and not any(results):
            report.empty.append(f"panel {title!r}")
    return report


def _owners(locks: Any) -> set[str]:
    return {client for group, _, client in locks.snapshot() if group == ORDERLY}


def _host_port(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]
