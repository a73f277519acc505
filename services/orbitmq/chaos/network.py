"""Network faults: partition, delay and packet loss between client and master, master and slave.

**Tools, and why.** Delay comes from toxiproxy (built from its Go module, see
:mod:`.toxiproxy`): a ``latency`` toxic on the live connections. Partition and loss come from
iptables (nf_tables) ``DROP`` rules, with ``-m statistic --mode random`` for loss: real
packets vanish in the kernel and TCP retransmits, which toxiproxy (a stream proxy, with no
packet-level loss) cannot show. ``tc netem`` in network namespaces (iproute2) would do all
three, but this machine's kernel has no qdisc modules ("Specified qdisc kind is unknown"), and
namespaces would need local up to start and restart its brokers inside them.

**Routing.** Every process is on 127.0.0.1, so links are told apart by who opens the
connection: local up and everything it starts run under their own group
(:data:`CLUSTER_GROUP`), toxiproxy-server under another (:data:`PROXY_GROUP`), the harness's
producers and consumers under the harness's. Before local up starts, ``nat OUTPUT`` rules
redirect new connections to each broker's port: from the cluster's group to that broker's
*cluster* proxy, from anyone else but toxiproxy to its *client* proxy. A fault then acts on
one proxy's listener port: the current master's *client* proxy (client → master) or *cluster*
proxy (slave → master). Known limit: local up's failover loop runs in the cluster's group
too, so a master-slave fault reaches its view of the master as well, as when the slave and
the failover controller sit on the far side of one link; a partition longer than the failover
window then fails the group over while clients still reach the old master, which the epochs
must fence once the link heals.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import random
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from orbitmq.chaos.history import FaultRecord
from orbitmq.chaos.netfilter import Chains, remove_stale
from orbitmq.chaos.toxiproxy import Toxiproxy, ToxiproxyError, binary

if TYPE_CHECKING:
    from orbitmq.chaos.cluster import LocalUpCluster

CLUSTER_GROUP = 27_270
"""Group ID local up and its children run as (no name needed: only the packet filter reads it)."""
PROXY_GROUP = 27_271
"""Group ID toxiproxy-server runs as."""
LATENCY_MS = (50, 250)
"""One-way delay range: at 250 ms each way local up's 1 s health calls still answer in time,
so a delay slows the group down without failing it over."""
LOSS = (0.05, 0.3)
"""Packet-loss probability range, each direction."""


class NetworkUnavailable(RuntimeError):
    """The network faults cannot run here (not root, no iptables, no toxiproxy-server)."""


@dataclass(frozen=True)
class Route:
    broker_port: int
    client_port: int
    """toxiproxy's listener for everyone else's connections to the broker (the clients')."""
    cluster_port: int
    """toxiproxy's listener for the cluster's own connections to it (its slave's, local up's)."""


@dataclass
class Network:
    """The toxiproxy and iptables plumbing of one cluster; :meth:`start` before local up."""

    data_dir: Path
    chains: Chains = field(default_factory=Chains)
    routes: dict[int, Route] = field(default_factory=dict)
    toxiproxy: Toxiproxy | None = None

    def start(self, broker_ports: list[int]) -> None:
        """Proxies for each broker port and the redirecting rules (synchronous: toxiproxy is
        started on the caller's thread, see :meth:`.Toxiproxy.start`)."""
        if os.geteuid() != 0:
            raise NetworkUnavailable(
                "network faults need root (iptables rules, processes run under their own group)"
            )
        remove_stale()
        atexit.register(self.close)
        try:
            self.toxiproxy = Toxiproxy(self.data_dir / "toxiproxy.log", PROXY_GROUP)
            self.toxiproxy.start(free_port())
            self.chains.create()
            self.chains.bypass(PROXY_GROUP)
            for port in broker_ports:
                upstream = f"127.0.0.1:{port}"
                route = Route(
                    port,
                    self.toxiproxy.create_proxy(f"client-{port}", upstream),
                    self.toxiproxy.create_proxy(f"cluster-{port}", upstream),
                )
                self.chains.redirect(port, route.cluster_port, CLUSTER_GROUP)
                self.chains.redirect(port, route.client_port)
                self.routes[port] = route
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Rules first (nothing is redirected to a dead proxy), then toxiproxy. Idempotent."""
        self.chains.close()
        if self.toxiproxy is not None:
            self.toxiproxy.close()
        atexit.unregister(self.close)

    def route(self, broker_address: str) -> Route:
        return self.routes[int(broker_address.rsplit(":", 1)[1])]


def free_port(step: int = 0) -> int:
    """A free port of 127.0.0.1 (and ``port + step`` free too, when ``step``)."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
            if not step:
                return port
            with socket.socket() as other:
                try:
                    other.bind(("127.0.0.1", port + step))
                except OSError:
                    continue
                return port


class Link(Enum):
    CLIENT_MASTER = "client-master"
    MASTER_SLAVE = "master-slave"


class Kind(Enum):
    PARTITION = "partition"
    DELAY = "delay"
    LOSS = "loss"


@dataclass(frozen=True)
class NetworkFault:
    kind: Kind
    link: Link

    @property
    def name(self) -> str:
        return f"{self.kind.value}-{self.link.value}"

    async def inject(
        self,
        cluster: LocalUpCluster,
        round_no: int,
        pair: tuple[str, str],
        rng: random.Random,
        clock: Callable[[], float],
    ) -> FaultRecord:
        """Break the link to ``pair``'s master for a seeded time between half and one and a half
        failover windows, then heal it; the record's ``injected_at`` is when the fault was in
        effect (rules or toxics installed), its note what was applied."""
        master = pair[0]
        pid = cluster.pids().get(master, 0)
        network = cluster.network
        if network is None:
            record = FaultRecord(round_no, self.name, master, pid, clock())
            record.note = "the cluster was started without network routing"
            return record
        route = network.route(cluster.brokers[master])
        port = route.client_port if self.link is Link.CLIENT_MASTER else route.cluster_port
        proxy = f"{'client' if self.link is Link.CLIENT_MASTER else 'cluster'}-{route.broker_port}"
        duration_s = rng.uniform(0.5, 1.5) * cluster.failover_after_ms / 1000
        where = f"toxiproxy {proxy} (127.0.0.1:{port} -> {route.broker_port})"
        if self.kind is Kind.DELAY:
            assert network.toxiproxy is not None
            latency_ms = rng.randint(*LATENCY_MS)
            await network.toxiproxy.add_latency(proxy, latency_ms, latency_ms // 10)
            record = FaultRecord(round_no, self.name, master, pid, clock())
            try:
                await asyncio.sleep(duration_s)
            finally:
                await network.toxiproxy.remove_latency(proxy)
            record.note = f"{latency_ms} ms (±10 %) each way for {duration_s:.2f} s at {where}"
        else:
            probability = 1.0 if self.kind is Kind.PARTITION else round(rng.uniform(*LOSS), 3)
            await asyncio.to_thread(network.chains.drop, port, probability)
            record = FaultRecord(round_no, self.name, master, pid, clock())
            try:
                await asyncio.sleep(duration_s)
            finally:
                dropped = await asyncio.to_thread(network.chains.clear_drops)
            what = "all packets" if self.kind is Kind.PARTITION else f"{probability:.0%} of packets"
            record.note = f"dropped {what} both ways for {duration_s:.2f} s at {where}: {dropped} packets"
        record.healed_at = clock()
        return record


NETWORK_FAULTS = [NetworkFault(kind, link) for link in Link for kind in Kind]


def uses_network(fault_names: list[str]) -> bool:
    """Whether a run choosing among ``fault_names`` needs the network plumbing."""
    return bool({f.name for f in NETWORK_FAULTS} & set(fault_names))


def unavailable() -> str | None:
    """Why the network faults cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "they need root (iptables rules, processes under their own group)"
    if shutil.which("iptables") is None:
        return "iptables is not installed (Debian: apt-get install iptables)"
    try:
        binary()
    except ToxiproxyError as error:
        return str(error)
    return None
