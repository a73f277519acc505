"""A local cluster's children die with their supervisor.

``orbitmq local up`` starts the name server and brokers in their own sessions (so Ctrl-C
reaches only the supervisor, which stops them in order). Without more, a supervisor killed by
SIGKILL, or by SIGHUP when its terminal closes before it could react, would leave them running
and holding ports and data locks. So each child asks Linux for a parent-death signal: SIGTERM,
the signal they already stop gracefully on (the store lock is an flock, freed in any case).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Mapping

SUPERVISOR_PID_ENV = "ORBITMQ_LOCAL_SUPERVISOR_PID"
"""Set by the supervisor in its children's environment: the PID they must not outlive."""
PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal this process gets when its parent thread exits."""


def die_with_supervisor(environ: Mapping[str, str] = os.environ) -> None:
    """When started by a supervisor, get SIGTERM as soon as it dies (Linux; elsewhere a no-op).

    The supervisor may already have died between starting us and this call; then the parent
    is someone else and we exit at once instead of waiting for a signal that will not come.
    """
    supervisor = environ.get(SUPERVISOR_PID_ENV, "")
    if not supervisor.isdigit() or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != int(supervisor):
        raise SystemExit(f"supervisor PID {supervisor} is gone; not starting without it")
