"""Helpers shared by CLI commands: settings loading with clean errors, output for people and scripts."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table
from rich.text import Text

from orbitmq.client.channels import DEFAULT_NAMESRV
from orbitmq.common.credentials import ACCESS_KEY_ENV, SECRET_KEY_ENV, CredentialsError, credentials_of
from orbitmq.common.namesrv_list import NAMESRV_ENV, NamesrvListError, parse_namesrv_list
from orbitmq.common.settings import SettingsError, load_settings
from orbitmq.common.tls import CLIENT_ENV, TlsConfigError, client_tls
from orbitmq.store.config_store import Permission

T = TypeVar("T", bound=BaseModel)

SETTINGS_EXIT_CODE = 2
"""Exit status of a command refused for a bad setting (file, environment or flag)."""


def settings_or_exit(model: type[T], file: Path | None, env_prefix: str, flags: Mapping[str, Any]) -> T:
    """Load settings; an invalid one ends the command with its message and exit status 2 (a
    usage error, as click's own for a bad flag), never a traceback."""
    try:
        return load_settings(model, file=file, env_prefix=env_prefix, flags=flags)
    except SettingsError as error:
        refused = click.ClickException(str(error))
        refused.exit_code = SETTINGS_EXIT_CODE
        raise refused from None


def check_namesrv(_context: click.Context, _parameter: click.Parameter, value: str | None) -> str | None:
    """Click callback: a malformed name-server list is a usage error naming the value and the
    rule, before anything tries to connect to it."""
    if value is None:
        return None
    try:
        return ";".join(parse_namesrv_list(value))
    except NamesrvListError as error:
        raise click.BadParameter(str(error)) from None


def namesrv_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--namesrv``, the client's TLS options and its credentials: every command that talks
    to a cluster has them all, as it reaches the name servers (and the brokers) through them."""
    return click.option(
        "--namesrv",
        envvar=NAMESRV_ENV,
        default=DEFAULT_NAMESRV,
        show_default=True,
        callback=check_namesrv,
        help=f"Name servers 'host:port;host:port' (',' works too; or {NAMESRV_ENV}).",
    )(client_tls_options(client_credentials_options(function)))


_CLIENT_TLS_FLAGS = {
    "tls_ca": ("--tls-ca", "CA certificates (PEM) that sign the servers' certificates; turns TLS on"),
    "tls_cert": ("--tls-cert", "This client's certificate (PEM), for servers that require one (mutual TLS)"),
    "tls_key": ("--tls-key", "The private key (PEM) of --tls-cert"),
    "tls_server_name": (
        "--tls-server-name",
        "Check the servers' certificates for this name instead of the host",
    ),
}


def client_tls_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--tls-server-name`` (or ``ORBITMQ_TLS_*``).

    The values are checked together (files readable PEM, key matching certificate) before the
    command runs, then set as the ``ORBITMQ_TLS_*`` environment of the command, which the client
    library reads; the environment is restored afterwards (commands run in-process in tests).
    """

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        values = {field: kwargs.pop(field) for field in _CLIENT_TLS_FLAGS}
        given = {field: value for field, value in values.items() if value}
        names = {field: f"{flag} ({CLIENT_ENV[field]})" for field, (flag, _) in _CLIENT_TLS_FLAGS.items()}
        try:
            client_tls(given, names)
        except TlsConfigError as error:
            raise click.UsageError(str(error)) from None
        saved = {name: os.environ.get(name) for name in CLIENT_ENV.values()}
        for field, name in CLIENT_ENV.items():
            if field in given:
                os.environ[name] = str(given[field])
            else:
                os.environ.pop(name, None)
        try:
            return function(*args, **kwargs)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    for field, (flag, text) in reversed(_CLIENT_TLS_FLAGS.items()):
        run = click.option(flag, field, envvar=CLIENT_ENV[field], help=f"{text} (or {CLIENT_ENV[field]}).")(
            run
        )
    return run


def client_credentials_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--access-key`` / ``--secret-key`` (or ``ORBITMQ_ACCESS_KEY`` / ``ORBITMQ_SECRET_KEY``):
    every call is signed with them. Checked as a pair before the command runs, then set as the
    command's environment (read by the client library) and restored afterwards, as the TLS
    options are. The variables keep the secret out of the process list; the flag is for tries."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        access_key, secret_key = kwargs.pop("access_key"), kwargs.pop("secret_key")
        try:
            credentials_of(
                access_key, secret_key, f"--access-key ({ACCESS_KEY_ENV})", f"--secret-key ({SECRET_KEY_ENV})"
            )
        except CredentialsError as error:
            raise click.UsageError(str(error)) from None
        saved = {name: os.environ.get(name) for name in (ACCESS_KEY_ENV, SECRET_KEY_ENV)}
        for name, value in ((ACCESS_KEY_ENV, access_key), (SECRET_KEY_ENV, secret_key)):
            if value:
                os.environ[name] = value
            else:
                os.environ.pop(name, None)
        try:
            return function(*args, **kwargs)
        finally:
            for name, saved_value in saved.items():
                if saved_value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = saved_value

    run = click.option(
        "--secret-key",
        envvar=SECRET_KEY_ENV,
        help=f"The secret of --access-key; it signs calls and is never sent (or {SECRET_KEY_ENV}).",
    )(run)
    return click.option(
        "--access-key",
        envvar=ACCESS_KEY_ENV,
        help=f"Sign every call as this user, for clusters with auth on (or {ACCESS_KEY_ENV}).",
    )(run)


def server_auth_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """A server's auth flags; they become the ``auth_*`` settings (config file keys and
    ``ORBITMQ_<ROLE>_AUTH_*`` work too). Off unless --auth-enabled is given."""
    options = [
        click.option(
            "--auth-enabled",
            is_flag=True,
            default=None,
            help="Authenticate every call's signature and authorize it against users and ACLs.",
        ),
        click.option("--auth-super-user", help="The bootstrap super user (needed with --auth-enabled)."),
        click.option(
            "--auth-super-secret",
            help="Its secret (better: the ORBITMQ_<ROLE>_AUTH_SUPER_SECRET variable or a config file).",
        ),
        click.option(
            "--auth-window-ms",
            type=int,
            help="How far a signed date may be from this server's clock, default 300000.",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def users_file_options(whose: str, synced: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--auth-users-file`` of a server that keeps no users itself, and with ``synced`` the
    interval it fetches the brokers' users from the name servers at (sidecar, proxy)."""
    options = [
        click.option(
            "--auth-users-file",
            type=click.Path(dir_okay=False, exists=True, path_type=Path),
            help=f"With --auth-enabled: {whose} users and ACLs (YAML/JSON, ACL 2.0) besides the brokers'.",
        )
    ]
    if synced:
        options.append(
            click.option(
                "--auth-sync-interval-ms",
                type=int,
                help="With --auth-enabled: how often the brokers' users are fetched, default 1000.",
            )
        )

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            function = option(function)
        return function

    return decorate


def server_tls_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """A server's TLS flags; they become the ``tls_*`` settings (config file keys and
    ``ORBITMQ_<ROLE>_TLS_*`` work too). Off unless --tls-cert is given."""
    options = [
        click.option(
            "--tls-cert",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Certificate chain (PEM): serve TLS only (no plaintext port beside it).",
        ),
        click.option(
            "--tls-key",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Private key (PEM) of --tls-cert.",
        ),
        click.option(
            "--tls-ca",
            type=click.Path(dir_okay=False, path_type=Path),
            help="CA certificates (PEM) trusted for client certificates and the servers this process calls.",
        ),
        click.option(
            "--tls-require-client-cert",
            is_flag=True,
            default=None,
            help="Mutual TLS: refuse clients without a certificate signed by --tls-ca.",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def json_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")(function)


_PIPE_WIDTH = 100_000


def emit_rows(
    rows: Sequence[Mapping[str, Any]], columns: Iterable[str], as_json: bool, title: str = ""
) -> None:
    """A table for people, or one JSON document (a list of objects) for scripts."""
    columns = list(columns)
    if as_json:
        click.echo(json.dumps([{c: row.get(c) for c in columns} for row in rows]))
        return
    table = Table(title=title or None, show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold")  # ids are copied by people: fold, never "…"
    for row in rows:
        table.add_row(*(Text(human(row.get(c))) for c in columns))  # Text: "[x]" is not markup
    # a terminal's width is kept; a pipe or file gets whole lines, however long
    width = max(100, os.get_terminal_size().columns) if os.isatty(1) else _PIPE_WIDTH
    Console(width=width).print(table)


def emit_object(data: Mapping[str, Any], as_json: bool) -> None:
    """``name  value`` lines for people, or one JSON object for scripts."""
    if as_json:
        click.echo(json.dumps(data))
        return
    width = max((len(k) for k in data), default=0)
    for key, value in data.items():
        click.echo(f"{key:<{width}}  {human(value)}")


def human(value: Any) -> str:
    """A value as a person reads it: no Python reprs (``None``, ``['a']``, ``True``) in output.

    Lists are joined with commas, mappings become ``name=value`` pairs, a missing value is
    ``-``, booleans are ``yes``/``no``; JSON output keeps the typed values instead.
    """
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={human(v)}" for k, v in value.items()) or "-"
    if isinstance(value, set | frozenset):
        value = sorted(value, key=str)
    if isinstance(value, list | tuple):
        return ", ".join(human(v) for v in value) or "-"
    return str(value)


def parse_time(value: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 time (``2026-11-21T10:00:00+00:00``)."""
    rule = "must be milliseconds since the epoch (0 or more) or an ISO-8601 time such as 2026-11-21T10:00:00"
    if value.lstrip("+-").isdigit():
        if int(value) < 0:
            raise click.BadParameter(f"{value!r} {rule}")
        return int(value)
    try:
        return int(datetime.fromisoformat(value).timestamp() * 1000)
    except ValueError:
        raise click.BadParameter(f"{value!r} {rule}") from None


def iso_time(ms: int) -> str | None:
    """Milliseconds since the epoch as ISO-8601 in UTC (``2026-11-26T06:47:27.123+00:00``);
    0 (never) is None, shown as ``-``."""
    if ms <= 0:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


_PERM_LETTERS = {"r": Permission.READ, "w": Permission.WRITE}


class Perm(click.ParamType):
    """``--perm``: ``r``, ``w``, ``rw`` (read and write), or RocketMQ's number 0-7 (READ=4
    WRITE=2 INHERIT=1), as the number the broker stores."""

    name = "perm"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            text = str(value)
        else:
            text = str(value).strip().lower()
        if text.isdigit() and 0 <= int(text) <= 7:
            return int(text)
        if text and all(letter in _PERM_LETTERS for letter in text):
            return int(sum({_PERM_LETTERS[letter] for letter in text}))
        self.fail(
            f"{value!r} is not a permission: give r, w or rw, or a number 0-7 (READ=4 WRITE=2 INHERIT=1)",
            param,
            ctx,
        )
