"""``orbitmq produce`` to a topic that does not exist: it says when its first send created the
topic (standard error in text mode, ``topic_created`` in the ``--json`` summary), and with the
brokers' ``auto_create_topic`` off it fails naming the topic, creating nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clusterkit import run_cli, start_cluster

from orbitmq.client.admin import Admin

pytestmark = pytest.mark.timeout(120)


async def test_produce_says_when_its_first_send_created_the_topic(tmp_path: Path) -> None:
    cluster = await start_cluster(tmp_path)
    try:
        code, out, err = await run_cli(cluster, "produce", "--topic", "Fresh", "--count", "3")
        assert code == 0, err
        assert "topic 'Fresh' did not exist" in err and "created it" in err, err

        code, out, err = await run_cli(cluster, "produce", "--topic", "Fresh", "--count", "1")
        assert code == 0, err
        assert "did not exist" not in err, err

        code, out, err = await run_cli(cluster, "produce", "--topic", "FreshJson", "--json")
        assert code == 0, err
        summary = json.loads(out.splitlines()[-1])["summary"]
        assert summary["topic_created"] is True and summary["sent"] == 1
        code, out, err = await run_cli(cluster, "produce", "--topic", "FreshJson", "--json")
        assert json.loads(out.splitlines()[-1])["summary"]["topic_created"] is False
    finally:
        await cluster.close()


async def test_with_auto_creation_off_produce_names_the_missing_topic(tmp_path: Path) -> None:
    cluster = await start_cluster(tmp_path, auto_create_topic=False)
    try:
        code, out, err = await run_cli(
            cluster, "produce", "--topic", "Ordres", "--json", "--send-timeout-ms", "3000"
        )
        assert code == 1
        summary = json.loads(out.splitlines()[-1])["summary"]
        assert summary["sent"] == 0 and summary["topic_created"] is False
        assert "topic 'Ordres' does not exist" in err and "auto_create_topic is off" in err, err
        async with Admin(cluster.address) as admin:
            assert "Ordres" not in await admin.topic_list()
    finally:
        await cluster.close()
