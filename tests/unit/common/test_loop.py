"""Which event loop ``run_on_fast_loop`` picks."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from orbitmq.common.loop import LOOP_ENV, run_on_fast_loop


async def _loop_type() -> type:
    return type(asyncio.get_running_loop())


def test_uvloop_by_default_and_asyncio_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LOOP_ENV, raising=False)
    assert run_on_fast_loop(_loop_type()) is uvloop.Loop
    monkeypatch.setenv(LOOP_ENV, "asyncio")
    assert not issubclass(run_on_fast_loop(_loop_type()), uvloop.Loop)
