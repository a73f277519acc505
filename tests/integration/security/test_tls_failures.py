"""A TLS connection that cannot work fails at once (not at a deadline) naming its cause, and a
certificate whose key does not match is refused at start naming the setting."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from brokerkit import TEST_SETTINGS
from tlskit import Pki

from orbitmq.broker.server import Broker
from orbitmq.broker.settings import BrokerSettings
from orbitmq.client.channels import Channels
from orbitmq.common.server import StartupError
from orbitmq.common.tls import ClientTls, TlsError
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.v1 import nameserver_pb2

pytestmark = pytest.mark.timeout(120)

FAST_S = 2.0
"""The most a refused handshake may take to be reported (gRPC fails it in milliseconds; the
probe that names the cause adds one more handshake)."""


@asynccontextmanager
async def name_server(**tls: Any) -> AsyncIterator[NameServer]:
    server = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None, **tls))
    await server.start()
    try:
        yield server
    finally:
        await server.close()


async def refusal(address: str, tls: ClientTls) -> str:
    """The message of the TlsError a name-server call gets, checked to come within FAST_S."""
    channels = Channels(address, tls=tls)
    started = time.monotonic()
    try:
        with pytest.raises(TlsError) as raised:
            await channels.namesrv_call("GetClusterInfo", nameserver_pb2.GetClusterInfoRequest())
    finally:
        await channels.close()
    assert time.monotonic() - started < FAST_S
    assert address in str(raised.value)
    return str(raised.value)


async def test_plaintext_client_at_a_tls_port(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    server = pki.issue("server")
    async with name_server(tls_cert=server.cert, tls_key=server.key) as namesrv:
        assert "speaks TLS and this client plaintext" in await refusal(namesrv.address, ClientTls())


async def test_tls_client_at_a_plaintext_port(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    async with name_server() as namesrv:
        assert "speaks plaintext, not TLS" in await refusal(namesrv.address, ClientTls(tls_ca=pki.ca))


async def test_expired_server_certificate(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    server = pki.issue("server", expired=True)
    async with name_server(tls_cert=server.cert, tls_key=server.key) as namesrv:
        assert "has expired" in await refusal(namesrv.address, ClientTls(tls_ca=pki.ca))


async def test_wrong_ca(tmp_path: Path) -> None:
    pki, other = Pki(tmp_path, "right"), Pki(tmp_path, "other")
    server = pki.issue("server")
    async with name_server(tls_cert=server.cert, tls_key=server.key) as namesrv:
        message = await refusal(namesrv.address, ClientTls(tls_ca=other.ca))
    assert "not signed by a CA" in message and str(other.ca) in message


async def test_name_mismatch(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    server = pki.issue("server", ("broker.elsewhere.example",))
    async with name_server(tls_cert=server.cert, tls_key=server.key) as namesrv:
        message = await refusal(namesrv.address, ClientTls(tls_ca=pki.ca))
        assert "name mismatch" in message and "127.0.0.1" in message
        # asking for the name the certificate holds is the documented way round it
        channels = Channels(
            namesrv.address, tls=ClientTls(tls_ca=pki.ca, tls_server_name="broker.elsewhere.example")
        )
        try:
            await channels.namesrv_call("GetClusterInfo", nameserver_pb2.GetClusterInfoRequest())
        finally:
            await channels.close()


async def test_mutual_tls_refuses_a_certificate_of_another_ca(tmp_path: Path) -> None:
    pki, other = Pki(tmp_path, "right"), Pki(tmp_path, "other")
    server = pki.issue("server")
    stranger = other.issue("stranger", ("client",))
    tls = {"tls_cert": server.cert, "tls_key": server.key, "tls_ca": pki.ca, "tls_require_client_cert": True}
    async with name_server(**tls) as namesrv:
        client = ClientTls(tls_ca=pki.ca, tls_cert=stranger.cert, tls_key=stranger.key)
        assert "refused the client certificate" in await refusal(namesrv.address, client)


def _orbitmq(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORBITMQ_TLS_")}
    return subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", *args], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "command",
    [
        ["admin", "topic", "list"],
        ["produce", "--topic", "Orders", "--body", "x"],
        ["consume", "--topic", "Orders", "--group", "g", "--count", "1"],
    ],
    ids=["admin", "produce", "consume"],
)
async def test_cli_names_the_cause_in_one_line(tmp_path: Path, command: list[str]) -> None:
    pki, other = Pki(tmp_path, "right"), Pki(tmp_path, "other")
    server = pki.issue("server")
    async with name_server(tls_cert=server.cert, tls_key=server.key) as namesrv:
        started = time.monotonic()
        done = await asyncio.to_thread(
            _orbitmq, *command, "--namesrv", namesrv.address, "--tls-ca", str(other.ca)
        )
        took = time.monotonic() - started
    assert done.returncode == 1
    assert (
        f"TLS connection to {namesrv.address} failed" in done.stderr and "not signed by a CA" in done.stderr
    )
    assert "Traceback" not in done.stderr
    assert took < 10  # a whole interpreter start included; the call itself fails in milliseconds


async def test_a_key_that_does_not_match_its_certificate_is_refused_at_start(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    server, other = pki.issue("server"), pki.issue("other")
    done = await asyncio.to_thread(
        _orbitmq,
        "namesrv",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "",
        "--tls-cert",
        str(server.cert),
        "--tls-key",
        str(other.key),
    )
    assert done.returncode == 2
    assert "tls_key" in done.stderr and "does not match the certificate" in done.stderr
    assert "flag --tls-key" in done.stderr and "Traceback" not in done.stderr
    # the client side says the same of its flags
    done = await asyncio.to_thread(
        _orbitmq,
        "admin",
        "topic",
        "list",
        "--namesrv",
        "127.0.0.1:1",
        "--tls-ca",
        str(pki.ca),
        "--tls-cert",
        str(server.cert),
        "--tls-key",
        str(other.key),
    )
    assert done.returncode == 2 and "--tls-key" in done.stderr and "does not match" in done.stderr


async def test_not_pem_and_half_a_pair_are_refused_naming_the_field(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    server = pki.issue("server")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ValueError, match=r"tls_cert .* must be a PEM file holding a certificate"):
        NameServerSettings(tls_cert=garbage, tls_key=server.key)
    with pytest.raises(ValueError, match="tls_key must be given with tls_cert"):
        NameServerSettings(tls_cert=server.cert)
    with pytest.raises(ValueError, match="tls_require_client_cert needs tls_ca"):
        NameServerSettings(tls_cert=server.cert, tls_key=server.key, tls_require_client_cert=True)


async def test_broker_refuses_to_start_when_its_name_server_refuses_the_handshake(tmp_path: Path) -> None:
    pki, other = Pki(tmp_path, "right"), Pki(tmp_path, "other")
    server = pki.issue("server")
    async with name_server(tls_cert=server.cert, tls_key=server.key) as namesrv:
        settings = BrokerSettings(
            data_dir=tmp_path / "broker", namesrv=namesrv.address, tls_ca=other.ca, **TEST_SETTINGS
        )
        started = time.monotonic()
        with pytest.raises(StartupError, match="not signed by a CA"):
            await Broker(settings).start()
        assert time.monotonic() - started < 5


async def test_one_name_server_refusing_the_handshake_is_passed_over(tmp_path: Path) -> None:
    """A name server with a TLS mistake (here: plaintext) does not stop a call another one can
    answer; the cause is raised only when none answers."""
    pki = Pki(tmp_path)
    server = pki.issue("server")
    async with name_server() as plain, name_server(tls_cert=server.cert, tls_key=server.key) as secure:
        channels = Channels([plain.address, secure.address], tls=ClientTls(tls_ca=pki.ca))
        try:
            await channels.namesrv_call("GetClusterInfo", nameserver_pb2.GetClusterInfoRequest())
        finally:
            await channels.close()
        assert "speaks plaintext, not TLS" in await refusal(plain.address, ClientTls(tls_ca=pki.ca))


def test_settings_from_the_environment_and_a_file_name_their_source(tmp_path: Path) -> None:
    from orbitmq.common.settings import SettingsError, load_settings

    pki = Pki(tmp_path)
    server, other = pki.issue("server"), pki.issue("other")
    environ = {"ORBITMQ_BROKER_TLS_CERT": str(server.cert), "ORBITMQ_BROKER_TLS_KEY": str(other.key)}
    with pytest.raises(
        SettingsError, match=r"tls_key: .*does not match.*\[from environment ORBITMQ_BROKER_TLS_KEY\]"
    ):
        load_settings(BrokerSettings, env_prefix="ORBITMQ_BROKER_", environ=environ)
    config = tmp_path / "broker.yaml"
    config.write_text(
        f"tls_cert: {server.cert}\ntls_key: {server.key}\ntls_ca: {pki.ca}\ntls_require_client_cert: true\n"
    )
    settings = load_settings(BrokerSettings, file=config, env_prefix="ORBITMQ_BROKER_", environ={})
    assert settings.tls_require_client_cert and settings.tls_cert == server.cert
