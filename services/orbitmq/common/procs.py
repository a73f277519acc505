"""Who holds a port or a file lock, read from Linux's /proc, so an error can name the process.

A start refused because a port or a data directory is taken is only useful if it says by
whom: a leftover from an earlier run is then one ``kill`` away. Elsewhere than Linux these
answer "unknown" (empty) and the errors simply name no PID.
"""

from __future__ import annotations

import os
from pathlib import Path

TCP_LISTEN = "0A"
"""The state column of /proc/net/tcp for a listening socket."""


def command_of(pid: int, limit: int = 240) -> str:
    """The command line of ``pid`` (for error messages), or "" when it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:limit]


def port_listeners(port: int) -> list[int]:
    """PIDs of the processes with a TCP socket listening on ``port`` (any local address)."""
    sockets: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                sockets.add(f"socket:[{fields[9]}]")
    return _pids_with_fd(sockets) if sockets and port else []


def flock_holders(path: Path) -> list[int]:
    """PIDs holding a lock on ``path``, from /proc/locks (matched by device and inode)."""
    try:
        stat = path.stat()
        rows = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    wanted = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    holders = []
    for row in rows:
        fields = row.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; blocked waiters have "->" in field 1
        if len(fields) >= 6 and fields[1] != "->" and fields[5] == wanted and fields[4].isdigit():
            holders.append(int(fields[4]))
    return holders


def _pids_with_fd(targets: set[str]) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in targets for fd in (proc / "fd").iterdir()):
                found.append(int(proc.name))
        except OSError:
            continue  # gone, or not ours to look into
    return found
