"""Fixtures for the storage engine: real stores on real files with tiny segments."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from storekit import tiny_config

from orbitmq.common.clock import ManualClock
from orbitmq.store.message_store import MessageStore


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def open_store(tmp_path: Path, clock: ManualClock) -> Iterator[Callable[..., MessageStore]]:
    """Open stores under tmp_path (tiny geometry); all are closed at the end."""
    opened: list[MessageStore] = []

    def make(directory: Path | None = None, **overrides: Any) -> MessageStore:
        store = MessageStore(tiny_config(directory or tmp_path / "store", **overrides), clock=clock)
        store.open()
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()
