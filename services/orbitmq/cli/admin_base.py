"""What every ``orbitmq admin …`` command shares: one admin call run to its end with failures as
one-line errors, and the ``--namesrv``/``--json`` options."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import click
import grpc

from orbitmq.cli.common import json_option, namesrv_option
from orbitmq.client.admin import Admin
from orbitmq.common.errors import OrbitError
from orbitmq.common.rpc import failure_of


def run_admin(work: Callable[[Admin], Awaitable[Any]], namesrv: str) -> Any:
    """Run one admin coroutine; every expected failure becomes a one-line error, not a traceback."""

    async def go() -> Any:
        async with Admin(namesrv) as admin:
            return await work(admin)

    try:
        return asyncio.run(go())
    except grpc.aio.AioRpcError as error:
        failure = failure_of(error)
        reason = f" [{failure.reason_name}]" if failure else ""
        raise click.ClickException(f"{error.details()}{reason}") from None
    except (OrbitError, ValueError) as error:
        raise click.ClickException(str(error)) from None


def common(function: Callable[..., Any]) -> Callable[..., Any]:
    return namesrv_option(json_option(function))
