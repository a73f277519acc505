"""A bad ``auth_users_file`` stops a name server, sidecar or proxy at start with exit status 2,
naming the file, the field and the rule: it is a setting like any other, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SERVERS = {
    "namesrv": ["--listen", "127.0.0.1:0", "--metrics-listen", ""],
    "sidecar": ["--group", "g", "--subscribe", "t", "--listen", "127.0.0.1:0", "--metrics-listen", ""],
    "proxy": ["--listen", "127.0.0.1:0", "--metrics-listen", ""],
}


@pytest.mark.parametrize("server", sorted(SERVERS))
@pytest.mark.parametrize(
    ("content", "named"),
    [
        ("users: [{username: app}]\n", "users.0.password"),
        ("users: [app, [\n", "is not valid YAML/JSON"),
        ("- just a list\n", "must hold a mapping with 'users' and 'acls'"),
    ],
)
def test_a_bad_users_file_exits_2_naming_it(server: str, content: str, named: str, tmp_path: Path) -> None:
    users = tmp_path / "users.yaml"
    users.write_text(content)
    done = subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", server, *SERVERS[server], "--auth-users-file", str(users)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ORBITMQ_NAMESRV": "127.0.0.1:1"},
        stdin=subprocess.DEVNULL,
    )
    err = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr
    assert "auth_users_file" in err and str(users) in err and named in err, err
    assert "Traceback" not in err
