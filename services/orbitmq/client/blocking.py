"""A thin synchronous facade for scripts: the asyncio clients driven from plain code.

Each facade owns one event loop on a daemon thread; the wrapped client is created and used only
on that loop (gRPC aio objects belong to the loop that made them), and every coroutine method
becomes a blocking call. Listeners of a push consumer keep running on its thread pool as usual.

    with BlockingProducer("group", namesrv="127.0.0.1:9876") as producer:
        producer.send(Message("Topic", b"hello"))

Each takes the client's ``tls=`` and ``credentials=`` (the producers and the push consumer among
their other keywords).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from orbitmq.client.admin import Admin
from orbitmq.client.consumer import PushConsumer
from orbitmq.client.producer import Producer, TransactionProducer
from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.common.credentials import Credentials
from orbitmq.common.tls import ClientTls

C = TypeVar("C")
R = TypeVar("R")


class Blocking(Generic[C]):
    """Wraps an asyncio client built by ``factory`` (on the facade's own loop); attribute access
    passes through, and coroutine methods block until done."""

    def __init__(self, factory: Callable[[], C], *, start: bool = True) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="orbitmq-blocking", daemon=True)
        self._thread.start()

        async def build() -> C:
            return factory()

        self.client: C = self.run(build())
        if start and hasattr(self.client, "start"):
            self.run(self.client.start())  # type: ignore[attr-defined]

    def run(self, coroutine: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        """Run ``coroutine`` on the facade's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.client, name)
        if inspect.iscoroutinefunction(attribute):
            return lambda *args, **kwargs: self.run(attribute(*args, **kwargs))
        return attribute

    def close(self) -> None:
        """Close the client, then stop the loop (idempotent)."""
        if self._loop.is_closed():
            return
        try:
            self.run(self.client.close())  # type: ignore[attr-defined]
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> Blocking[C]:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def BlockingProducer(group: str, namesrv: str | None = None, **options: Any) -> Blocking[Producer]:
    return Blocking(lambda: Producer(group, namesrv, **options))


def BlockingTransactionProducer(
    group: str, namesrv: str | None = None, **options: Any
) -> Blocking[TransactionProducer]:
    return Blocking(lambda: TransactionProducer(group, namesrv, **options))


def BlockingPullConsumer(
    group: str,
    namesrv: str | None = None,
    *,
    tls: ClientTls | None = None,
    credentials: Credentials | None = None,
) -> Blocking[PullConsumer]:
    return Blocking(lambda: PullConsumer(group, namesrv, tls=tls, credentials=credentials))


def BlockingAdmin(
    namesrv: str, *, tls: ClientTls | None = None, credentials: Credentials | None = None
) -> Blocking[Admin]:
    return Blocking(lambda: Admin(namesrv, tls=tls, credentials=credentials), start=False)


def BlockingPushConsumer(group: str, namesrv: str | None = None, **options: Any) -> Blocking[PushConsumer]:
    """Subscribe through ``.client.subscribe(...)`` before ``.start()``; not started here."""
    return Blocking(lambda: PushConsumer(group, namesrv, **options), start=False)
