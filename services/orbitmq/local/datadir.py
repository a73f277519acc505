"""The local cluster's data directory: which broker directory continues as master, and who
else is using it.

Layout of ``<data-dir>``::

    broker-a/        the master of broker group broker-a, with or without slaves
    broker-a-s1/ …   its slaves (``--slaves N`` uses s1..sN)
    local-up.json    PIDs of the running supervisor and its children (leftover detection)

The master always lives in ``broker-a``, the directory a single-broker run uses, so switching
between ``local up`` and ``local up --slaves N`` continues on the master's data. A failover
moves mastership to a slave's directory (its ``ha-role.json`` records the promotion, and a
recorded role overrides the configured one); before the next start, while no broker runs and
every lock is free, the newest master's directory is swapped into ``broker-a``. Choosing that
directory is pure (:func:`choose_master`); the renames are the only I/O.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from orbitmq.broker.ha import ROLE_FILE, RoleRecord, RoleState
from orbitmq.common.procs import command_of
from orbitmq.common.server import StartupError
from orbitmq.store.config import BrokerRole
from orbitmq.store.config_store import ConfigFileError, JsonConfigStore
from orbitmq.store.mapped_file import parse_offset_file_name
from orbitmq.store.message_store import lock_holder

MASTER_DIR = "broker-a"
SLAVE_DIR = re.compile(r"^broker-a-s(?P<n>[1-9][0-9]*)$")
LEGACY_DIR = re.compile(r"^broker-a-(?P<n>[0-9]+)$")
"""Older releases numbered every member of a group (``broker-a-0`` master, ``broker-a-1`` …)."""
RUN_FILE = "local-up.json"


def slave_dir(number: int) -> str:
    return f"broker-a-s{number}"


@dataclass(frozen=True)
class MemberState:
    """What a broker directory says about itself: its recorded role (None: never changed, so
    the configured one: master for ``broker-a``, slave otherwise) and epoch."""

    name: str
    role: BrokerRole | None
    epoch: int

    @property
    def is_master(self) -> bool:
        return self.role is not BrokerRole.SLAVE if self.role is not None else self.name == MASTER_DIR


def choose_master(members: list[MemberState]) -> MemberState | None:
    """The directory that continues as master: the master of the newest epoch (a promoted
    slave has the newest data; an old master that died before being demoted still says
    master at an older epoch). ``broker-a`` wins a tie; None when no directory is a master."""
    masters = [m for m in members if m.is_master]
    return max(masters, key=lambda m: (m.epoch, m.name == MASTER_DIR), default=None)


def read_member(directory: Path) -> MemberState:
    store: JsonConfigStore[RoleRecord | None] = JsonConfigStore(
        directory / ROLE_FILE,
        RoleRecord | None,  # type: ignore[arg-type]
        lambda: None,
    )
    try:
        record = store.load()
    except ConfigFileError as error:
        raise StartupError(f"{error}; move {directory} away to start that broker afresh") from None
    if record is None:
        return MemberState(directory.name, None, 0)
    return MemberState(directory.name, record.role, record.epoch)


def member_dirs(data_dir: Path) -> list[Path]:
    """Existing broker directories of the group, ``broker-a`` first, then slaves by number."""
    slaves = sorted((int(m["n"]), p) for p in data_dir.glob("broker-a-s*") if (m := SLAVE_DIR.match(p.name)))
    master = [data_dir / MASTER_DIR] if (data_dir / MASTER_DIR).is_dir() else []
    return master + [p for _, p in slaves]


def migrate_legacy(data_dir: Path) -> list[str]:
    """Rename ``broker-a-0``/``broker-a-N`` (older layout) to ``broker-a``/``broker-a-sN``.

    Refused when both layouts hold data: which one the user wants is not ours to guess.
    Returns notes for the user.
    """
    legacy = sorted((int(m["n"]), p) for p in data_dir.glob("broker-a-*") if (m := LEGACY_DIR.match(p.name)))
    if not legacy:
        return []
    targets = [data_dir / (MASTER_DIR if n == 0 else slave_dir(n)) for n, _ in legacy]
    clash = [t for t in targets if t.exists()]
    if clash:
        raise StartupError(
            f"{data_dir} holds both {', '.join(p.name for _, p in legacy)} (an older local up layout) "
            f"and {', '.join(t.name for t in clash)}; keep one set: move the other out of {data_dir}"
        )
    for (_, old), new in zip(legacy, targets, strict=True):
        old.rename(new)
    return [
        f"renamed {old.name} to {new.name} (the master lives in {MASTER_DIR})"
        for (_, old), new in zip(legacy, targets, strict=True)
    ]


def put_master_in_place(data_dir: Path) -> list[str]:
    """Swap the newest master's directory into ``broker-a``; returns notes for the user."""
    members = [read_member(d) for d in member_dirs(data_dir)]
    if not members:
        return []
    master = choose_master(members)
    if master is None:
        raise StartupError(
            f"no broker directory in {data_dir} is recorded as master ({ROLE_FILE} of "
            f"{', '.join(m.name for m in members)} says SLAVE); move {data_dir} away to start afresh"
        )
    if master.name == MASTER_DIR:
        return []
    promoted = data_dir / master.name
    current = data_dir / MASTER_DIR
    parked = data_dir / f".{master.name}.swap"  # a crash mid-swap leaves it visible, not lost
    if current.exists():
        current.rename(parked)
    promoted.rename(current)
    if parked.exists():
        parked.rename(promoted)
    return [
        f"{master.name} became master (epoch {master.epoch}) in an earlier run; its data is now {current}"
    ]


def set_role(directory: Path, role: BrokerRole, broker_id: int, epoch: int, master_addr: str = "") -> None:
    """Record the role a broker must start in (a recorded role overrides the configured one)."""
    directory.mkdir(parents=True, exist_ok=True)
    RoleState(directory, role, broker_id).change(role, broker_id, epoch, master_addr)


def check_segment_bytes(directory: Path, wanted: int) -> int:
    """The segment size ``directory``'s commit log was created with, or ``wanted`` if none:
    an existing store cannot change its segment size (the files are named by offset)."""
    files = sorted(p for p in (directory / "commitlog").glob("*") if parse_offset_file_name(p) is not None)
    return files[0].stat().st_size if files else wanted


def _is_orbitmq(pid: int) -> bool:
    return "orbitmq" in command_of(pid)


def leftovers(data_dir: Path) -> list[tuple[str, int]]:
    """Processes using ``data_dir``: the (name, PID) of an earlier run's supervisor and
    children that are alive, and of any process holding a broker directory's lock. (Processes
    on the ports this run wants are named by :func:`orbitmq.local.ports.taken_ports`: one may
    belong to another cluster with its own data directory.)"""
    found: dict[int, str] = {}
    try:
        run = json.loads((data_dir / RUN_FILE).read_text())
    except (OSError, ValueError):
        run = {}
    for name, pid in {"local up": run.get("pid"), **run.get("components", {})}.items():
        if isinstance(pid, int) and pid != os.getpid() and _is_orbitmq(pid):
            found[pid] = name
    for directory in member_dirs(data_dir):
        holder = lock_holder(directory)
        if holder is not None and holder > 0:
            found.setdefault(holder, f"broker in {directory.name}")
    return [(name, pid) for pid, name in found.items()]


def write_run_file(data_dir: Path, components: dict[str, int]) -> None:
    path = data_dir / RUN_FILE
    path.write_text(json.dumps({"pid": os.getpid(), "components": components}))


def remove_run_file(data_dir: Path) -> None:
    (data_dir / RUN_FILE).unlink(missing_ok=True)
