"""``freeze_startup_heap``: start-up survivors leave the collector's view, start-up garbage does not
survive it, and what the process builds afterwards is still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from orbitmq.common.heap import freeze_startup_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    """A reference cycle nothing else holds (only the cyclic collector frees it)."""
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def thawed() -> Iterator[None]:
    """Give the test process its collector back: frozen test objects would never be freed."""
    yield
    gc.unfreeze()


def test_survivors_are_frozen_and_garbage_is_not(thawed: None) -> None:
    kept = _Node()
    dead = _cycle()
    tracked_before = len(gc.get_objects())

    frozen = freeze_startup_heap()

    assert dead() is None, "start-up garbage must be collected, not frozen for the process's life"
    # Frozen objects still die by reference counting (another thread's, this frame's
    # temporaries), so the permanent generation may already be a little smaller.
    assert 0 < gc.get_freeze_count() <= frozen
    assert not any(o is kept for o in gc.get_objects()), "a survivor must leave the collected generations"
    assert len(gc.get_objects()) < tracked_before // 10


def test_garbage_made_after_the_freeze_is_still_collected(thawed: None) -> None:
    freeze_startup_heap()
    later = _cycle()
    gc.collect()
    assert later() is None
