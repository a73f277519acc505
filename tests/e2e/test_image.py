"""The repository's Dockerfile, built by scripts/build-image (buildah), and the image it makes.

Runs by default as root on Linux (as in CI), is skipped with the reason otherwise, and
``ORBITMQ_E2E_IMAGE=0`` turns it off.  If buildah or debootstrap cannot be installed, or the
build fails, the test *fails* with the script's output: it never skips for that.

Cost: the first run on a machine apt-installs buildah and debootstrap and builds the stand-in
base (``debootstrap`` of bookworm, ~2 min) when Docker Hub is unreachable; both are cached
under ~/.cache/orbitmq-image (the base as an OCI archive, the build's layers in buildah's
storage).  A warm run takes ~25 s when the sources are unchanged and ~75 s when they changed
(the Dockerfile's ``pip wheel`` downloads the dependencies again), so the test is not opt-in.

The checks run in a container made from the docker-archive tar itself (not from the storage
the build left), as uid 10001: ``orbitmq --help``, ``orbitmq-operator --help`` and
``import orbitmq._native`` (the C extension compiled in the build stage).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(120, func_only=True),
    pytest.mark.skipif(sys.platform != "linux", reason="buildah builds Linux images on Linux only"),
    pytest.mark.skipif(
        sys.platform == "linux" and os.geteuid() != 0,
        reason="scripts/build-image needs root (rootful buildah storage, apt-get, debootstrap)",
    ),
    pytest.mark.skipif(
        os.environ.get("ORBITMQ_E2E_IMAGE") == "0", reason="ORBITMQ_E2E_IMAGE=0 turns the image test off"
    ),
]

RUN_TIMEOUT_S = 120
UID = "10001"


def _describe(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit code {result.returncode}\n--- stderr ---\n{result.stderr}\n--- stdout ---\n{result.stdout}"


@pytest.fixture(scope="module")
def built(orbitmq_image: dict[str, Any]) -> dict[str, Any]:
    """scripts/build-image's JSON summary (the session's build, see conftest.py)."""
    return orbitmq_image


def _buildah(summary: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    """buildah on the script's storage (so the archive's layers are already there)."""
    argv = [
        "buildah",
        "--root",
        summary["storage_root"],
        "--runroot",
        summary["runroot"],
        "--storage-driver",
        summary["storage_driver"],
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)


@pytest.fixture(scope="module")
def container(built: dict[str, Any]) -> Iterator[str]:
    """A working container of the docker-archive tar (what `ctr images import` would load)."""
    made = _buildah(built, "from", "--pull=always", f"docker-archive:{built['output']}")
    if made.returncode != 0:
        pytest.fail(f"buildah from docker-archive:{built['output']} failed: {_describe(made)}", pytrace=False)
    name = made.stdout.strip().splitlines()[-1]
    yield name
    _buildah(built, "rm", name)


def _run(built: dict[str, Any], container: str, *argv: str, user: str | None = UID) -> str:
    user_args = ["--user", user] if user else []
    result = _buildah(built, "run", "--isolation", built["isolation"], *user_args, container, "--", *argv)
    assert result.returncode == 0, f"{argv} as {user or 'the image user'}: {_describe(result)}"
    return result.stdout


def test_archive_is_a_loadable_docker_archive(built: dict[str, Any]) -> None:
    with tarfile.open(built["output"]) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        config = json.load(tar.extractfile(manifest[0]["Config"]))
    assert manifest[0]["RepoTags"] == [built["reference"]]  # ctr imports it under this name
    assert config["config"]["User"] == UID
    assert config["config"]["Entrypoint"] == ["orbitmq"]
    assert "/var/lib/orbitmq" in config["config"]["Volumes"]


def test_image_runs_as_uid_10001(built: dict[str, Any], container: str) -> None:
    assert _run(built, container, "id", "-u", user=None).strip() == UID


def test_orbitmq_help(built: dict[str, Any], container: str) -> None:
    out = _run(built, container, "orbitmq", "--help")
    assert "namesrv" in out and "broker" in out


def test_orbitmq_operator_help(built: dict[str, Any], container: str) -> None:
    assert "Usage: orbitmq-operator" in _run(built, container, "orbitmq-operator", "--help")


def test_native_extension_imports(built: dict[str, Any], container: str) -> None:
    out = _run(built, container, "python", "-c", "import orbitmq._native as n; print(n.__file__)")
    assert out.strip().endswith(".so"), out
