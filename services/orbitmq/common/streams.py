"""Request generators for gRPC streams that end with their stream.

A stream-stream call made with an async generator has gRPC read the generator in a task of its
own, and ``call.cancel()`` stops that task only while the call is live: once the call failed (its
peer gone, as a killed broker or sidecar leaves it), ``cancel`` does nothing, and a generator
waiting on a queue keeps its task waiting for good. That task then took the next item put on
the queue, lost it writing to the dead call, and (its call freed) was destroyed pending:
"Task was destroyed but it is pending!" in a broker's or client's log after a peer's restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")


async def queued_until(queue: asyncio.Queue[T], ended: asyncio.Event) -> AsyncIterator[T]:
    """``queue``'s items as they come, until ``ended`` is set (by whoever saw the call end); an
    item taken as it ended goes back to the queue, for a next stream to send."""
    while not ended.is_set():
        getter = asyncio.ensure_future(queue.get())
        stopper = asyncio.ensure_future(ended.wait())
        try:
            await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not getter.done():
                getter.cancel()
        if getter.done() and not getter.cancelled():
            if ended.is_set():
                queue.put_nowait(getter.result())
                return
            yield getter.result()
