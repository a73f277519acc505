"""How often a local cluster restarts a component that died before giving up.

A broker killed by the OOM killer or by hand comes back (on the same address and data, so
clients and the banner stay right), but one that dies again and again (a broken store, a
port someone else took) must not be restarted forever: like an Erlang supervisor's restart
intensity, at most ``max_restarts`` within ``window_s``; beyond that the cluster stops with the
component's own error. Pure, with an injectable clock.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_RESTARTS = 3
RESTART_WINDOW_S = 60.0
"""Three restarts a minute: enough for a kill or two by hand, few enough that a component that
cannot start stops the cluster within seconds instead of flapping."""


@dataclass
class RestartBudget:
    max_restarts: int = MAX_RESTARTS
    window_s: float = RESTART_WINDOW_S
    clock: Callable[[], float] = time.monotonic
    _restarts: deque[float] = field(default_factory=deque, init=False, repr=False)

    def take(self) -> bool:
        """Whether one more restart is allowed now; an allowed one is counted."""
        now = self.clock()
        while self._restarts and now - self._restarts[0] >= self.window_s:
            self._restarts.popleft()
        if len(self._restarts) >= self.max_restarts:
            return False
        self._restarts.append(now)
        return True

    @property
    def used(self) -> int:
        """Restarts counted in the current window (after the last :meth:`take`)."""
        return len(self._restarts)
