"""``orbitmq broker --broker-id-from-hostname``, which the broker pods' command uses: a
StatefulSet pod's ordinal is its broker id, and every pod but ordinal 0 starts as a slave."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

import orbitmq.broker.server
import orbitmq.cli.broker
from orbitmq.broker.settings import BrokerSettings
from orbitmq.cli.broker import broker_command, ordinal_settings
from orbitmq_operator.builders import Cluster, desired_objects
from orbitmq_operator.spec import ClusterSpec


@pytest.mark.parametrize(
    ("hostname", "expected"),
    [
        ("orbit-broker-0-0", {"broker_id": 0}),
        ("orbit-broker-0-2", {"broker_id": 2, "broker_role": "SLAVE"}),
        ("orbit-broker-12-10.orbit-broker-12.mq.svc", {"broker_id": 10, "broker_role": "SLAVE"}),
    ],
)
def test_the_ordinal_is_the_id_and_slaves_are_the_others(hostname: str, expected: dict[str, Any]) -> None:
    assert ordinal_settings(hostname, {}) == expected


@pytest.mark.parametrize("hostname", ["laptop", "orbit-broker-0-", "orbit-broker-0-01"])
def test_a_host_name_without_an_ordinal_is_refused(hostname: str) -> None:
    with pytest.raises(click.UsageError, match="does not end in '-<ordinal>'"):
        ordinal_settings(hostname, {})


def test_an_explicit_id_or_role_conflicts() -> None:
    with pytest.raises(click.UsageError, match="--broker-id"):
        ordinal_settings("b-1", {"broker_id": 3})


def run_pod(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, hostname: str) -> BrokerSettings:
    """The broker pods' own command line and ConfigMap, on a host named like a pod; returns the
    settings the broker would have started with."""
    cluster = Cluster("orbit", "mq", "uid", ClusterSpec(image="orbitmq:1.0"))
    objects = {(o["kind"], o["metadata"]["name"]): o for o in desired_objects(cluster)}
    config = tmp_path / "broker.yaml"
    config.write_text(objects["ConfigMap", "orbit-broker-config"]["data"]["broker.yaml"])
    command = objects["StatefulSet", "orbit-broker-0"]["spec"]["template"]["spec"]["containers"][0]["command"]
    args = command[command.index("broker") + 1 :]
    args[args.index("--config") + 1] = str(config)
    args[args.index("--advertise-addr") + 1] = "10.1.2.3:10911"  # what the kubelet expands
    started: list[BrokerSettings] = []

    async def run(settings: BrokerSettings) -> None:
        started.append(settings)

    monkeypatch.setattr(orbitmq.cli.broker.socket, "gethostname", lambda: hostname)
    monkeypatch.setattr(orbitmq.broker.server, "run", run)
    monkeypatch.setattr(orbitmq.cli.broker, "serve", lambda what, main, *_loop: asyncio.run(main))
    result = CliRunner().invoke(broker_command, args)
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(config.read_text())["broker_role"] == "SYNC_MASTER"
    return started[0]


def test_pod_zero_starts_as_the_master_and_the_others_as_slaves(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    master = run_pod(monkeypatch, tmp_path, "orbit-broker-0-0")
    assert (master.broker_id, master.broker_role.value) == (0, "SYNC_MASTER")
    assert (master.broker_name, master.advertise_addr) == ("orbit-broker-0", "10.1.2.3:10911")
    slave = run_pod(monkeypatch, tmp_path, "orbit-broker-0-2")
    assert (slave.broker_id, slave.broker_role.value) == (2, "SLAVE")
