"""The super user of a local cluster started with ``orbitmq local up --auth``.

Generated on the first such start and kept in the data directory (``auth.env``, readable by its
owner only), so a restarted cluster takes the same credentials and a shell that sourced the file
keeps working. The file is what a shell sources: ``source ~/.orbitmq/local/auth.env``.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from orbitmq.common.credentials import ACCESS_KEY_ENV, SECRET_KEY_ENV, Credentials

AUTH_FILE = "auth.env"
SUPER_USER = "local-admin"


def super_user(data_dir: Path) -> Credentials:
    """The cluster's super user, read from ``data_dir/auth.env`` or created there."""
    path = data_dir / AUTH_FILE
    if path.exists():
        values = dict(
            line.removeprefix("export ").split("=", 1)
            for line in path.read_text().splitlines()
            if "=" in line
        )
        if values.get(ACCESS_KEY_ENV) and values.get(SECRET_KEY_ENV):
            return Credentials(values[ACCESS_KEY_ENV], values[SECRET_KEY_ENV])
    credentials = Credentials(SUPER_USER, secrets.token_urlsafe(24))
    text = (
        f"export {ACCESS_KEY_ENV}={credentials.access_key}\n"
        f"export {SECRET_KEY_ENV}={credentials.secret_key}\n"
    )
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    return credentials


def server_env(credentials: Credentials) -> dict[str, str]:
    """What turns auth on in the name server and broker processes, over the environment (a
    secret in their arguments would show in the process list)."""
    env: dict[str, str] = {}
    for role in ("NAMESRV", "BROKER"):
        env[f"ORBITMQ_{role}_AUTH_ENABLED"] = "true"
        env[f"ORBITMQ_{role}_AUTH_SUPER_USER"] = credentials.access_key
        env[f"ORBITMQ_{role}_AUTH_SUPER_SECRET"] = credentials.secret_key
    return env
