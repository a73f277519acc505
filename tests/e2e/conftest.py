"""Fixtures for end-to-end tests against a real (but local, container-free) Kubernetes control plane.

The ``k8s_cluster`` fixture drives ``scripts/k8s-testbed``: it builds the pinned binaries (a
no-op when the cache is warm; CI runs ``scripts/k8s-testbed build`` ahead of pytest), starts
etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok once per session in
a private state directory, and always tears them down again.

If the tools cannot be built or the cluster does not come up, the fixture *fails* with the
script's output.  It never skips: a silently skipped e2e suite would look green in CI while
testing nothing.

Timeouts: building and starting the cluster happens in a session fixture and may take much
longer than a test (a cold build is ~10-15 minutes on 2 cores), so e2e tests carry
``pytest.mark.timeout(N, func_only=True)`` (``k8s_testbed_support.E2E_TIMEOUT``) and the
fixture bounds each of its own subprocesses instead.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_testbed_support import TESTBED, K8sCluster

# Bounds for the fixture's own subprocesses (pytest-timeout does not cover them, see above).
BUILD_TIMEOUT_S = 60 * 60
# A cold image build: apt-get install, debootstrap, the Dockerfile's stages (~5 min on 2 cores;
# the spark target adds its JDK and PySpark layers, ~2.5 min).
IMAGE_BUILD_TIMEOUT_S = 30 * 60
BUILD_IMAGE = Path(__file__).resolve().parents[2] / "scripts" / "build-image"
UP_TIMEOUT_S = 300
DOWN_TIMEOUT_S = 120


def _run_testbed(command: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a k8s-testbed subcommand, turning a hang into a failed result instead of an exception."""
    try:
        return subprocess.run(
            [str(TESTBED), command],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return subprocess.CompletedProcess(exc.cmd, -1, out, err + f"\n(timed out after {timeout:.0f}s)")


def _describe(result: subprocess.CompletedProcess[str]) -> str:
    """Everything the script said, for a failure message that explains itself."""
    return f"exit code {result.returncode}\n--- stderr ---\n{result.stderr}\n--- stdout ---\n{result.stdout}"


@pytest.fixture(scope="session")
def k8s_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[K8sCluster]:
    """A running test bed for the whole session; always torn down, never skipped."""
    state = tmp_path_factory.mktemp("k8s-testbed-state")
    home = tmp_path_factory.mktemp("k8s-testbed-home")
    env = dict(os.environ, ORBITMQ_K8S_STATE=str(state))

    started = time.monotonic()
    build = _run_testbed("build", env, BUILD_TIMEOUT_S)
    if build.returncode != 0:
        pytest.fail(f"scripts/k8s-testbed build failed: {_describe(build)}", pytrace=False)
    build_s = time.monotonic() - started

    up = _run_testbed("up", env, UP_TIMEOUT_S)
    try:
        if up.returncode != 0:
            pytest.fail(f"scripts/k8s-testbed up failed: {_describe(up)}", pytrace=False)
        cluster = K8sCluster.from_state(state, home)
        up_s = time.monotonic() - started - build_s
        print(f"\nk8s test bed: build {build_s:.1f}s, up {up_s:.1f}s, {cluster.info['server']}")
        yield cluster
    finally:
        down = _run_testbed("down", env, DOWN_TIMEOUT_S)
        if down.returncode != 0:
            pytest.fail(f"scripts/k8s-testbed down failed (processes may be left): {_describe(down)}")


# The real node (containerd + kubelet + kube-proxy + CoreDNS beside kwok) needs root on Linux,
# apt-installs Debian's containerd/runc/CNI plugins when missing and changes host networking
# until `down`.  Its tests run by default wherever they can (CI runs as root on a fresh Debian
# machine); ORBITMQ_E2E_REAL_NODE=0 turns them off, and without root they are skipped.
REAL_NODE_ENV = "ORBITMQ_E2E_REAL_NODE"


def _real_node_skip_reason() -> str | None:
    """Why the real-node tests cannot or should not run here, or None when they run."""
    if os.environ.get(REAL_NODE_ENV) == "0":
        return f"real-node e2e tests turned off ({REAL_NODE_ENV}=0)"
    if not sys.platform.startswith("linux"):
        return f"the real node needs Linux (containers, bridge, iptables), not {sys.platform}"
    if os.geteuid() != 0:
        return "the real node needs root (containerd, mounts, bridge, iptables): run pytest as root"
    return None


@pytest.fixture(scope="session")
def k8s_real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[K8sCluster]:
    """A second test bed, started with `up --real-node`: pods on `real-node-0` run as real containers.

    Runs by default as root on Linux; skipped (with the reason) when not root or when
    ORBITMQ_E2E_REAL_NODE=0.  Once it runs, a failing build or `up` fails the tests rather than
    skipping them.  It is its own cluster, so the tests of ``k8s_cluster`` never see the real
    node; `down` always runs at the end of the session, even after a failed `up`.
    ``info["real_node"]`` describes the node (pod range, the orbitmq image, the host paths its
    pods mount, the ctr command line, ``dns``: the CoreDNS address pods use as nameserver).
    """
    reason = _real_node_skip_reason()
    if reason:
        pytest.skip(reason)
    # Short: the containerd socket lives under it and a unix socket path has 107 bytes.
    state = Path(tempfile.mkdtemp(prefix="omq-rn-"))
    home = tmp_path_factory.mktemp("k8s-real-node-home")
    env = dict(os.environ, ORBITMQ_K8S_STATE=str(state))
    try:
        build = _run_testbed("build", env, BUILD_TIMEOUT_S)
        if build.returncode != 0:
            pytest.fail(f"scripts/k8s-testbed build failed: {_describe(build)}", pytrace=False)
        # apt-get may install containerd & co. first on a fresh machine: more than UP_TIMEOUT_S.
        up = _run_testbed("up", {**env, "ORBITMQ_K8S_REAL_NODE": "1"}, UP_TIMEOUT_S + 300)
        if up.returncode != 0:
            pytest.fail(f"scripts/k8s-testbed up --real-node failed: {_describe(up)}", pytrace=False)
        cluster = K8sCluster.from_state(state, home)
        node = cluster.info["real_node"]
        print(f"\nk8s test bed with a real node: Ready in {node['ready_seconds']}s, DNS {node['dns']}")
        yield cluster
    finally:
        # Always, even after a failed or interrupted `up`: it may have set up half a node.
        down = _run_testbed("down", env, DOWN_TIMEOUT_S)
        if down.returncode != 0:
            pytest.fail(f"scripts/k8s-testbed down failed (the real node may be left): {_describe(down)}")
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def namespace(k8s_cluster: K8sCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, so tests cannot see each other's objects."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.removeprefix("test_").lower()).strip("-")
    name = f"e2e-{slug[:40].rstrip('-')}-{os.urandom(2).hex()}"
    k8s_cluster.kubectl("create", "namespace", name)
    # Pods are refused until the controller manager has created the namespace's default SA.
    k8s_cluster.wait_for(
        f"ServiceAccount {name}/default",
        lambda: (
            k8s_cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0
        ),
    )
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _build_image(tmp_path_factory: pytest.TempPathFactory, target: str) -> dict[str, Any]:
    """scripts/build-image ``--target target`` into a session temporary directory: its JSON
    summary, or the test fails with the script's output."""
    output = tmp_path_factory.mktemp("image") / f"{target}-image.tar"
    try:
        result = subprocess.run(
            [str(BUILD_IMAGE), "--json", "--target", target, "--output", str(output)],
            capture_output=True,
            text=True,
            timeout=IMAGE_BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"scripts/build-image --target {target} timed out after {IMAGE_BUILD_TIMEOUT_S}s: {exc.stderr!r}",
            pytrace=False,
        )
    if result.returncode != 0:
        pytest.fail(f"scripts/build-image --target {target} failed: {_describe(result)}", pytrace=False)
    summary: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    print(f"\nbuild-image {target}: {summary['seconds']} base {summary['base']}, {summary['image_size']}")
    return summary


@pytest.fixture(scope="session")
def orbitmq_image(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The repository's Dockerfile built once per session by scripts/build-image: its JSON
    summary (``output``: the docker-archive tar, ``reference``: the name ``ctr images import``
    gives it). The tests using it check root and Linux themselves (test_image.py's marks, the
    real node's); a failed build fails them, with the script's output."""
    return _build_image(tmp_path_factory, "orbitmq")


@pytest.fixture(scope="session")
def spark_image(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The Dockerfile's ``spark`` stage (the Spark jobs' image, orbitmq-spark:dev) built once per
    session, as ``orbitmq_image``: scripts/build-image's JSON summary."""
    return _build_image(tmp_path_factory, "spark")


def import_image(k8s: K8sCluster, summary: dict[str, Any]) -> str:
    """``ctr images import`` of a build's docker-archive (``summary``: scripts/build-image's)
    into the real node's containerd, where pods name it with ``imagePullPolicy: Never`` (there
    is no registry); returns its reference."""
    ctr = shlex.split(k8s.info["real_node"]["ctr"])
    started = time.monotonic()
    try:
        subprocess.run(
            [*ctr, "images", "import", summary["output"]],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"ctr images import {summary['output']} failed: {exc.stderr}", pytrace=False)
    print(f"\n{summary['reference']} imported into the real node in {time.monotonic() - started:.1f}s")
    return str(summary["reference"])


@pytest.fixture(scope="session")
def orbitmq_image_on_node(k8s_real_node: K8sCluster, orbitmq_image: dict[str, Any]) -> str:
    """``orbitmq_image`` imported into the real node's containerd once per session: its
    reference (docker.io/library/orbitmq:dev)."""
    return import_image(k8s_real_node, orbitmq_image)


@pytest.fixture(scope="session")
def spark_image_on_node(k8s_real_node: K8sCluster, spark_image: dict[str, Any]) -> str:
    """``spark_image`` imported into the real node's containerd once per session: its reference
    (docker.io/library/orbitmq-spark:dev)."""
    return import_image(k8s_real_node, spark_image)
