"""Guarded background tasks.

Every background loop of a component is started through :class:`TaskSet`: it keeps a reference
(so the loop cannot be garbage-collected mid-flight), logs a crash or an unexpected return with
the task's name, and cancels and awaits everything on close. No fire-and-forget tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class TaskSet:
    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        if self._closing:
            coro.close()
            raise RuntimeError(f"{self._owner}: cannot start task {name!r} while closing")
        task = asyncio.get_running_loop().create_task(coro, name=f"{self._owner}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._on_done)
        return task

    def _on_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled() or self._closing:
            return
        error = task.exception()
        if error is not None:
            log.error("task %s crashed", task.get_name(), exc_info=error)
        else:
            log.debug("task %s finished", task.get_name())

    async def close(self, timeout_s: float = 10.0) -> None:
        """Cancel every task and wait for them (bounded); idempotent."""
        self._closing = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait(tasks, timeout=timeout_s)
        self._tasks.clear()

    def __len__(self) -> int:
        return len(self._tasks)
