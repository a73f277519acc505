"""What ``--secure`` benchmarks share: a CA and certificates made for the run, servers started
with TLS and auth on, a normal user granted exactly what the workload needs, and the costs of
the checks themselves.

The secure side is TLS + authentication + authorization, everything issue 26 turns on: servers
serve TLS with a certificate of the run's own CA, require signed calls (a bootstrap super user
creates the topics), and the workload runs as a normal user whose ACL grants ``Pub``/``Sub`` on
the bench's topics and ``Sub`` on its groups, nothing else (so every call is decided, none is a
super user's shortcut). The plain side is the same servers without any of it, measured in the
same run, rounds alternating.

The certificates come from the operator's CA code (:mod:`orbitmq_operator.builders.certificates`,
``cryptography``), which a development install has; without it ``--secure`` says what to install.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orbitmq.bench.figures import Figure
from orbitmq.common.credentials import Credentials, signed
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.common.tls import ClientTls, open_channel
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2

SUPER_USER = "bench-root"
APP_USER = "bench-app"
SERVER_NAMES = ("localhost", "127.0.0.1")


class SecureSetupError(RuntimeError):
    """``--secure`` cannot run here; the message says what is missing."""


@dataclass(frozen=True)
class SecureSetup:
    """The run's certificate files and users (secrets random per run, never printed)."""

    root: Path
    ca: Path
    cert: Path
    key: Path
    super_secret: str = field(repr=False)
    app_secret: str = field(repr=False)
    topics: tuple[str, ...]
    groups: str
    """The ACL's group resource (``Group:bench-*``): the workload's consumer groups."""

    @property
    def tls(self) -> ClientTls:
        return ClientTls(tls_ca=self.ca)

    @property
    def super_credentials(self) -> Credentials:
        return Credentials(SUPER_USER, self.super_secret)

    @property
    def app_credentials(self) -> Credentials:
        return Credentials(APP_USER, self.app_secret)

    def server_flags(self, role: str) -> list[str]:
        """TLS and auth flags of ``orbitmq namesrv`` / ``broker`` (``role``); the super user's
        secret goes by :meth:`server_env`, not on the command line."""
        flags = ["--tls-cert", str(self.cert), "--tls-key", str(self.key), "--tls-ca", str(self.ca)]
        flags += ["--auth-enabled", "--auth-super-user", SUPER_USER]
        if role == "namesrv":
            flags += ["--auth-users-file", str(self.users_file)]
        return flags

    def server_env(self) -> dict[str, str]:
        secret = self.super_secret
        return {
            **os.environ,
            "ORBITMQ_NAMESRV_AUTH_SUPER_SECRET": secret,
            "ORBITMQ_BROKER_AUTH_SUPER_SECRET": secret,
        }

    def client_env(self) -> dict[str, str]:
        """The environment of a client child process (``orbitmq produce``) acting as the user."""
        return {
            **os.environ,
            "ORBITMQ_TLS_CA": str(self.ca),
            "ORBITMQ_ACCESS_KEY": APP_USER,
            "ORBITMQ_SECRET_KEY": self.app_secret,
        }

    @property
    def users_file(self) -> Path:
        return self.root / "users.json"

    def user_document(self) -> dict[str, str]:
        return {"username": APP_USER, "password": self.app_secret, "userType": "Normal"}

    def acl_document(self) -> dict[str, Any]:
        """``Pub``/``Sub`` on each topic and ``Sub`` on the groups: exactly what sending and
        consuming need (:mod:`orbitmq.auth.rpcs`); route queries are allowed by either."""
        entries: list[dict[str, Any]] = [
            {"resource": f"Topic:{topic}", "actions": ["Pub", "Sub"], "decision": "Allow"}
            for topic in self.topics
        ]
        entries.append({"resource": self.groups, "actions": ["Sub"], "decision": "Allow"})
        return {"subject": f"User:{APP_USER}", "policies": [{"policyType": "Custom", "entries": entries}]}


def make_setup(root: Path, topics: tuple[str, ...], groups: str = "Group:bench-*") -> SecureSetup:
    """A CA and a server certificate for 127.0.0.1/localhost under ``root`` (0600 keys), the
    run's secrets, and the name server's users file holding the normal user and its ACL."""
    try:
        from orbitmq_operator.builders.certificates import issue_server, new_ca
    except ImportError as error:
        raise SecureSetupError(
            f"--secure makes its certificates with the operator's CA code and cryptography ({error}); "
            "install them: pip install -e operator (or pip install cryptography and the operator package)"
        ) from None
    root.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca = new_ca("orbitmq bench CA", now)
    server = issue_server(ca, SERVER_NAMES, now)
    setup = SecureSetup(
        root=root,
        ca=root / "ca.crt",
        cert=root / "tls.crt",
        key=root / "tls.key",
        super_secret=secrets.token_urlsafe(24),
        app_secret=secrets.token_urlsafe(24),
        topics=topics,
        groups=groups,
    )
    setup.ca.write_text(ca.cert)
    setup.cert.write_text(server.cert)
    setup.key.touch(mode=0o600)
    setup.key.write_text(server.key)
    setup.users_file.touch(mode=0o600)
    setup.users_file.write_text(
        json.dumps({"users": [setup.user_document()], "acls": [setup.acl_document()]})
    )
    return setup


async def grant(setup: SecureSetup, broker_address: str, queues: int) -> None:
    """As the super user, on the broker at ``broker_address``: create the topics, the normal
    user and its ACL (straight to the broker: the send bench's broker has no name server)."""
    async with super_channel(setup, broker_address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        for topic in setup.topics:
            config = common_pb2.TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues)
            await stub.CreateTopic(broker_pb2.CreateTopicRequest(topic=config), timeout=10)
        await stub.CreateUser(
            broker_pb2.CreateUserRequest(user=json.dumps(setup.user_document())), timeout=10
        )
        await stub.CreateAcl(broker_pb2.CreateAclRequest(acl=json.dumps(setup.acl_document())), timeout=10)


def super_channel(setup: SecureSetup, address: str) -> Any:
    return signed(open_channel(address, setup.tls, GRPC_OPTIONS), setup.super_credentials)


def app_channel(setup: SecureSetup, address: str) -> Any:
    """A TLS channel whose calls are signed as the normal user."""
    return signed(open_channel(address, setup.tls, GRPC_OPTIONS), setup.app_credentials)


# -- the costs of the pieces --------------------------------------------------------------------


async def handshake_figure(plain: str, secure: str, setup: SecureSetup, connections: int = 60) -> Figure:
    """Milliseconds from a new channel to its first answer (a health check: no auth rule, one
    round trip), TLS against plaintext, connections alternating; each channel has its own
    connection (a local subchannel pool), so each pays a TCP connect and, on TLS, a full
    handshake (ECDSA P-256, TLS 1.3)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from orbitmq.client.channels import FRESH_CHANNEL_OPTIONS

    async def first_answer(address: str, tls: ClientTls | None) -> float:
        started = time.perf_counter()
        async with open_channel(address, tls, FRESH_CHANNEL_OPTIONS) as channel:
            await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
            return (time.perf_counter() - started) * 1000

    secure_ms, plain_ms = [], []
    for _ in range(connections):
        secure_ms.append(await first_answer(secure, setup.tls))
        plain_ms.append(await first_answer(plain, None))
    return Figure(
        "tls_connect_ms",
        statistics.median(secure_ms),
        "ms",
        statistics.median(plain_ms),
        f"plaintext connect + first call (median of {connections}); the difference is the handshake",
    )


def check_figures(rounds: int = 5, calls: int = 20_000) -> list[Figure]:
    """Per-call CPU of the auth pieces, in this process, medians of ``rounds``:

    * ``auth_sign_us``: a client signing a call (HMAC-SHA256 and three metadata pairs);
    * ``auth_check_send_us``: a broker's guard on a send: the signature verified against the
      user's secret, then the decision for ``Pub`` on the topic from the connection's cache, as
      :meth:`Guard.authenticate` and :meth:`Guard.authorize` run it on every call;
    * ``auth_check_pull_us``: the same for a pull, whose needs (``Sub`` on the topic and on the
      group) the guard reads from each request with the RPC's rule, as it does for every call
      but a send's (decided on the topic the broker's C path scanned);
    * ``auth_decide_uncached_us``: the send's decision on a connection's first call (the
      user's ACL walked), what a cache miss costs once per connection, topic and tables version.

    The guard is the real one over real tables; the call context is a stand-in holding what a
    ``grpc.aio`` context would answer (metadata and peer), so the figures hold the checks alone.
    """
    from orbitmq.auth.model import Acl, Action, User
    from orbitmq.auth.rpcs import RULES, RpcContext, topic_need
    from orbitmq.auth.tables import AuthTables
    from orbitmq.common.guard import Guard, fixed

    topic = "BenchTopic"
    secret = secrets.token_urlsafe(24)
    acl = Acl.model_validate(
        {
            "subject": f"User:{APP_USER}",
            "policies": [
                {
                    "policyType": "Custom",
                    "entries": [
                        {"resource": f"Topic:{topic}", "actions": ["Pub", "Sub"], "decision": "Allow"},
                        {"resource": "Group:bench-*", "actions": ["Sub"], "decision": "Allow"},
                    ],
                }
            ],
        }
    )
    tables = AuthTables(version=1, users=(User(username=APP_USER, password=secret),), acls=(acl,))
    guard = Guard(fixed(tables), RpcContext("DefaultCluster"))
    credentials = Credentials(APP_USER, secret)
    method = "/orbitmq.v1.Broker/SendMessage"
    needs = (topic_need((Action.PUB,), topic),)
    metadata = tuple(credentials.sign(method))
    pull_method = "/orbitmq.v1.Broker/PullMessage"
    pull_rule = RULES[pull_method]
    pull_request = broker_pb2.PullMessageRequest(
        consumer_group="bench-pull", topic=topic, queue_id=0, queue_offset=0, max_msg_nums=32
    )
    rpc_context = RpcContext("DefaultCluster")
    pull_metadata = tuple(credentials.sign(pull_method))

    class Context:
        """What the guard reads of a call: its metadata and its peer."""

        def __init__(self, peer: str, signed_metadata: tuple[tuple[str, str], ...] = metadata) -> None:
            self._peer = peer
            self._metadata = signed_metadata

        def peer(self) -> str:
            return self._peer

        def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
            return self._metadata

    steady = Context("ipv4:127.0.0.1:40000")
    pulling = Context("ipv4:127.0.0.1:40001", pull_metadata)

    def sign() -> None:
        credentials.sign(method)

    def check() -> None:
        guard.authorize(guard.authenticate(steady, method), needs)  # type: ignore[arg-type]

    def check_pull() -> None:
        caller = guard.authenticate(pulling, pull_method)  # type: ignore[arg-type]
        guard.authorize(caller, pull_rule.needs(pull_request, rpc_context))

    fresh = [Context(f"ipv4:127.0.0.1:{port}") for port in range(1, calls + 1)]
    position = 0

    def check_first() -> None:
        nonlocal position
        context, position = fresh[position % len(fresh)], position + 1
        guard.authorize(guard.authenticate(context, method), needs)  # type: ignore[arg-type]

    def first_us() -> float:
        guard._connections.clear()  # every call below is its connection's first
        return _per_call_us(check_first, calls)

    return [
        Figure("auth_sign_us", _median_us(sign, rounds, calls), "us/call", None, "client: HMAC + metadata"),
        Figure(
            "auth_check_send_us",
            _median_us(check, rounds, calls),
            "us/call",
            None,
            "server: signature verified + cached Pub decision",
        ),
        Figure(
            "auth_check_pull_us",
            _median_us(check_pull, rounds, calls),
            "us/call",
            None,
            "server: signature verified + the request's two needs built and decided (cached)",
        ),
        Figure(
            "auth_decide_uncached_us",
            statistics.median(first_us() for _ in range(rounds)),
            "us/call",
            None,
            "server: the same on a connection's first call (ACL walked)",
        ),
    ]


def _per_call_us(call: Callable[[], None], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - started) / calls * 1e6


def _median_us(call: Callable[[], None], rounds: int, calls: int) -> float:
    return statistics.median(_per_call_us(call, calls) for _ in range(rounds))


async def alternate(
    secure_round: Callable[[], Awaitable[float]],
    plain_round: Callable[[], Awaitable[float]],
    rounds: int,
) -> tuple[list[float], list[float]]:
    """Rounds of both sides (each returns a rate or a latency), which goes first swapping every
    round (a side that always ran first, or second, would meet the machine in another state:
    a drain right after another one's, say); both lists."""
    secure_values, plain_values = [], []
    for index in range(rounds):
        if index % 2 == 0:
            secure_values.append(await secure_round())
            plain_values.append(await plain_round())
        else:
            plain_values.append(await plain_round())
            secure_values.append(await secure_round())
    return secure_values, plain_values


def spread(values: list[float]) -> str:
    """``min-max`` of a side's rounds, for a figure's baseline name."""
    return f"{min(values):,.0f}-{max(values):,.0f}"
