"""iptables chains of one chaos run: routing through toxiproxy, and dropped packets.

Everything goes into two chains named ``ORBITMQ-CHAOS-<pid>-<n>`` (one in the ``nat`` table,
one in ``filter``), each jumped to from ``OUTPUT`` (loopback traffic passes ``OUTPUT`` once per
packet, both ways). Rules only ever name the run's own ports. :meth:`Chains.close` removes
both chains; it runs from the run's ``finally`` and from ``atexit``, and a run killed outright
leaves chains whose PID is gone, which the next run removes (:func:`remove_stale`). By hand:
``iptables -S; iptables -t nat -S`` lists them, ``-D OUTPUT -j NAME; -F NAME; -X NAME`` removes one.

iptables 1.8 (nf_tables backend) with the ``owner``, ``statistic`` and ``REDIRECT`` matches;
root is needed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

PREFIX = "ORBITMQ-CHAOS-"
TABLES = ("nat", "filter")
_numbers = itertools.count(1)


class NetfilterError(RuntimeError):
    """An iptables command failed (its stderr is in the message)."""


def iptables(*args: str) -> str:
    """Run ``iptables -w ARGS`` (waiting for the lock other runs may hold); its stdout."""
    command = shutil.which("iptables")
    if command is None:
        raise NetfilterError("iptables not found (Debian: apt-get install iptables)")
    done = subprocess.run([command, "-w", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetfilterError(f"iptables {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def remove_stale() -> list[str]:
    """Remove the chains of runs whose process is gone; their names."""
    removed = []
    for table in TABLES:
        for name in re.findall(rf"^-N ({PREFIX}(\d+)-\d+)$", iptables("-t", table, "-S"), re.MULTILINE):
            chain, pid = name
            if not _alive(int(pid)):
                _remove(table, chain)
                removed.append(f"{table} {chain}")
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(table: str, chain: str) -> None:
    with contextlib.suppress(NetfilterError):
        while True:  # every jump to it (one, unless added twice by hand)
            iptables("-t", table, "-D", "OUTPUT", "-j", chain)
    with contextlib.suppress(NetfilterError):
        iptables("-t", table, "-F", chain)
    with contextlib.suppress(NetfilterError):
        iptables("-t", table, "-X", chain)


@dataclass
class Chains:
    """This run's chains; ``name`` is the same in both tables."""

    name: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}-{next(_numbers)}")
    _created: list[str] = field(default_factory=list, repr=False)

    def create(self) -> None:
        for table in TABLES:
            iptables("-t", table, "-N", self.name)
            self._created.append(table)
            iptables("-t", table, "-I", "OUTPUT", "-j", self.name)

    def close(self) -> None:
        """Idempotent; safe from atexit."""
        while self._created:
            _remove(self._created.pop(), self.name)

    def bypass(self, group: int) -> None:
        """Connections of ``group`` (toxiproxy's own, to the brokers) are never redirected."""
        owner = ["-m", "owner", "--gid-owner", str(group)]
        iptables("-t", "nat", "-A", self.name, "-p", "tcp", *owner, "-j", "RETURN")

    def redirect(self, port: int, to_port: int, group: int | None = None) -> None:
        """New connections to 127.0.0.1:``port`` (of ``group`` only, when given) go to ``to_port``."""
        rule = ["-p", "tcp", "-d", "127.0.0.1", "--dport", str(port)]
        if group is not None:
            rule += ["-m", "owner", "--gid-owner", str(group)]
        iptables("-t", "nat", "-A", self.name, *rule, "-j", "REDIRECT", "--to-ports", str(to_port))

    def drop(self, port: int, probability: float = 1.0) -> None:
        """Drop packets to and from local ``port`` (each with ``probability``; 1: all)."""
        chance = ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.4f}"]
        if probability >= 1.0:
            chance = []
        for direction in ("--dport", "--sport"):
            iptables("-A", self.name, "-p", "tcp", direction, str(port), *chance, "-j", "DROP")

    def clear_drops(self) -> int:
        """Remove every drop rule; how many packets they dropped."""
        listing = iptables("-L", self.name, "-n", "-v", "-x")
        dropped = sum(int(line.split()[0]) for line in listing.splitlines() if " DROP " in f" {line} ")
        iptables("-F", self.name)
        return dropped
