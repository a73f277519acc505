"""scripts/k8s-testbed build: one build per cache at a time, and progress only on a terminal.

The script is run as a real process against a throw-away cache (ORBITMQ_K8S_CACHE) that is
either complete (a build is a no-op) or held by the test as if another build were running;
GO points at a binary that fails, so a build that does not wait fails at once.
"""

from __future__ import annotations

import fcntl
import importlib.machinery
import importlib.util
import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
TESTBED = REPO_ROOT / "scripts" / "k8s-testbed"

pytestmark = pytest.mark.timeout(60)


def _load_testbed() -> ModuleType:
    """Import the script (it has no .py suffix) to compute the stamp a complete build writes."""
    loader = importlib.machinery.SourceFileLoader("k8s_testbed_script", str(TESTBED))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _complete_build(cache: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Fill `cache` with what a finished build leaves: executables, kwok stages, side modules'
    outputs, the stamp; returns the loaded script."""
    monkeypatch.setenv("ORBITMQ_K8S_CACHE", str(cache))
    testbed = _load_testbed()
    pins = testbed.read_versions()
    bin_dir = cache / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, _package in testbed.tools(pins):
        _executable(bin_dir / name)
    (cache / "share").mkdir(exist_ok=True)
    (cache / "share" / "kwok-stages.yaml").write_text("{}\n")
    stamp: dict[str, object] = {"stamp": testbed.build_stamp(pins)}
    # Each side module (coredns, prometheus, ...) has its own entry: its outputs and its stamp.
    for mod in testbed.SIDE_MODULES:
        binaries = [out.format(os="linux", arch="amd64") for out, _package in mod.binaries]
        files = [f"{out_dir}/{mod.name}.yaml" for _pattern, out_dir in mod.files]
        for rel in [*binaries, *files]:
            _executable(cache / rel)
        stamp[mod.name] = {
            "stamp": testbed.side_stamp(mod, pins),
            "binaries": binaries,
            "outputs": [*binaries, *files],
        }
    (bin_dir / "STAMP.json").write_text(json.dumps(stamp))
    assert testbed.is_built(pins)
    return testbed


def _executable(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)


def _testbed_env(cache: Path) -> dict[str, str]:
    env = dict(os.environ, ORBITMQ_K8S_CACHE=str(cache), GO="/bin/false")
    env.pop("ORBITMQ_K8S_ETCD", None)
    return env


def _wait_for_text(path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text(errors="replace") if path.exists() else ""
        if text in content:
            return content
        if proc.poll() is not None:
            pytest.fail(f"k8s-testbed build exited {proc.returncode} without waiting:\n{content}")
        time.sleep(0.05)
    pytest.fail(f"no {text!r} within {timeout}s: {path.read_text(errors='replace')}")


def test_second_build_waits_for_the_first_and_reuses_its_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    lock_path = cache / "build.lock"
    stderr_path = tmp_path / "stderr.txt"
    with lock_path.open("w") as lock:
        # The "first build": holds the lock and has not written its binaries yet.
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.write("424242\n")
        lock.flush()
        with stderr_path.open("wb") as stderr:
            second = subprocess.Popen(
                [sys.executable, str(TESTBED), "build"],
                env=_testbed_env(cache),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        try:
            said = _wait_for_text(stderr_path, "waiting", second, timeout=20)
            assert f"another build holds {lock_path} (PID 424242); waiting" in said
            time.sleep(0.5)
            assert second.poll() is None, "the second build went ahead while the lock was held"
            _complete_build(cache, monkeypatch)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
        try:
            assert second.wait(timeout=20) == 0, stderr_path.read_text()
        finally:
            if second.poll() is None:
                second.kill()
    said = stderr_path.read_text()
    assert "cached build is up to date" in said
    assert "go build" not in said


def test_build_on_a_complete_cache_takes_no_lock_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    _complete_build(cache, monkeypatch)
    with (cache / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a stamp that matches needs no lock at all
        done = subprocess.run(
            [sys.executable, str(TESTBED), "build"],
            env=_testbed_env(cache),
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert "nothing to do" in done.stderr
    assert "waiting" not in done.stderr


_RUN_STEP = """
import importlib.machinery, importlib.util, pathlib, sys
loader = importlib.machinery.SourceFileLoader("k8s_testbed_script", sys.argv[1])
spec = importlib.util.spec_from_loader(loader.name, loader)
module = importlib.util.module_from_spec(spec)
loader.exec_module(module)
log = pathlib.Path(sys.argv[2])
module.run_step("go build demo (1/1)", ["sleep", "2.3"], log, {"PATH": "/usr/bin:/bin"}, log.parent)
"""


def test_build_step_ticks_on_a_terminal(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUN_STEP, str(TESTBED), str(tmp_path / "step.log")],
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert proc.wait(timeout=10) == 0
    text = output.decode()
    assert "\r\x1b[K[k8s-testbed] go build demo (1/1) ... 1s" in text
    assert "go build demo (1/1) ... 2s" in text
    assert text.rstrip().endswith("[k8s-testbed] go build demo (1/1): done in 2s")


def test_build_step_prints_plain_lines_when_not_a_terminal(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _RUN_STEP, str(TESTBED), str(tmp_path / "step.log")],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "[k8s-testbed] go build demo (1/1) ...",
        "[k8s-testbed] go build demo (1/1): done in 2s",
    ]


# A go that only answers `go env GOVERSION`: a build that would compile anything fails at once,
# after saying what it was about to build.
_FAKE_GO = """#!/bin/sh
if [ "$1 $2" = "env GOVERSION" ]; then echo go1.26.8; exit 0; fi
echo "fake go: $*" >&2
exit 1
"""


def test_a_stale_side_module_rebuilds_only_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    testbed = _complete_build(cache, monkeypatch)
    stamp = json.loads((cache / "bin" / "STAMP.json").read_text())
    stamp["prometheus"]["stamp"] = "built-from-another-pin"
    (cache / "bin" / "STAMP.json").write_text(json.dumps(stamp))
    assert testbed.main_built(testbed.read_versions())
    fake_go = tmp_path / "go"
    fake_go.write_text(_FAKE_GO)
    fake_go.chmod(0o755)
    done = subprocess.run(
        [sys.executable, str(TESTBED), "build"],
        env={**_testbed_env(cache), "GO": str(fake_go)},
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 1
    assert "the Kubernetes tools are up to date; building only prometheus with go1.26.8" in done.stderr
    assert "go mod download (prometheus)" in done.stderr
    # The failed side build left the other entries (and the Kubernetes tools' stamp) alone.
    after = json.loads((cache / "bin" / "STAMP.json").read_text())
    assert {k: v for k, v in after.items() if k != "prometheus"} == {
        k: v for k, v in stamp.items() if k != "prometheus"
    }


def test_each_versions_section_feeds_only_its_own_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    testbed = _load_testbed()
    pins = testbed.read_versions()
    before = {mod.name: testbed.side_stamp(mod, pins) for mod in testbed.SIDE_MODULES}
    main_before = testbed.build_stamp(pins)
    moved = tmp_path / "versions.env"
    text = testbed.VERSIONS_FILE.read_text()
    assert f"PROMETHEUS_VERSION={pins['PROMETHEUS_VERSION']}" in text
    moved.write_text(
        text.replace(f"PROMETHEUS_VERSION={pins['PROMETHEUS_VERSION']}", "PROMETHEUS_VERSION=v0.317.0")
    )
    monkeypatch.setattr(testbed, "VERSIONS_FILE", moved)
    testbed.read_versions.cache_clear()
    pins = testbed.read_versions()
    after = {mod.name: testbed.side_stamp(mod, pins) for mod in testbed.SIDE_MODULES}
    assert testbed.build_stamp(pins) == main_before
    assert {name for name in before if before[name] != after[name]} == {"prometheus"}
    assert testbed.prometheus_release(pins["PROMETHEUS_VERSION"]) == "3.17.0"
