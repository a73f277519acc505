"""Runs a server command (name server, broker, sidecar) and turns a failed start into one line.

A server that cannot start as configured — a busy or foreign port, a data directory that is
locked or cannot be created, a ``--namesrv`` that is not a name server — is a user's mistake,
not a bug: the command prints the error's own message (value, rule, what to do) and exits 1.
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import click

from orbitmq.common.server import StartupError
from orbitmq.local.lifeline import die_with_supervisor
from orbitmq.store.message_store import StoreError


def serve(
    what: str,
    main: Coroutine[Any, Any, None],
    runner: Callable[[Coroutine[Any, Any, None]], None] = asyncio.run,
) -> None:
    """Run ``main`` (a server's ``run``) with ``runner`` until it returns; ``what`` names the
    server in errors."""
    try:
        die_with_supervisor()
        runner(main)
    except StartupError as error:
        raise click.ClickException(str(error)) from None
    except StoreError as error:
        raise click.ClickException(f"{what} could not start: {error}") from None
    finally:
        main.close()  # never started when an earlier step failed: no "never awaited" warning
