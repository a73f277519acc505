"""``orbitmq proxy`` as a user runs it: a real process, its address read from its first line,
stopped by SIGTERM; bad settings end it with a usage error naming the value."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from v2kit import call, message, official_producer

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
from brokerkit import start_broker, stop_broker

from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings

pytestmark = pytest.mark.timeout(60)


async def _orbitmq(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "orbitmq.cli.main",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_proxy_process_serves_the_official_producer_and_stops_on_sigterm(tmp_path: Path) -> None:
    """The endpoint a RocketMQ 5 application is given is the proxy process's address: a send
    through it lands in orbitmq; SIGTERM stops the process cleanly (exit 0)."""
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await namesrv.start()
    broker = await start_broker(tmp_path / "broker-a", namesrv=namesrv.address, broker_name="broker-a")
    proxy = await _orbitmq(
        "proxy", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--namesrv", namesrv.address
    )
    try:
        assert proxy.stdout is not None
        line = (await asyncio.wait_for(proxy.stdout.readline(), 20)).decode()
        assert line.startswith("proxy listening on 127.0.0.1:"), line
        endpoint = line.split()[3]
        async with official_producer(endpoint, ["V2Process"]) as producer:
            receipt = await call(producer.send, message("V2Process", b"through a process"))
        async with PullConsumer("v2-check", namesrv.address) as consumer:
            queues = await consumer.queues("V2Process")
            found = [m for mq in queues for m in (await consumer.pull(mq, 0)).messages]
        assert [(m.body, m.properties["UNIQ_KEY"]) for m in found] == [
            (b"through a process", receipt.message_id)
        ]
        proxy.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proxy.communicate(), 20)
        assert proxy.returncode == 0 and b"proxy stopped" in stderr
    finally:
        if proxy.returncode is None:
            proxy.kill()
            await proxy.wait()
        await stop_broker(broker)
        await namesrv.close()


async def test_proxy_with_a_bad_listen_address_exits_with_a_usage_error() -> None:
    """A bad setting is a usage error (exit 2) naming the value, never a traceback."""
    proxy = await _orbitmq("proxy", "--listen", "no-port-here", "--metrics-listen", "")
    _, stderr = await asyncio.wait_for(proxy.communicate(), 30)
    assert proxy.returncode == 2
    assert b"no-port-here" in stderr and b"Traceback" not in stderr
