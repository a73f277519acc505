"""Helpers shared by the e2e conftest and tests: the cluster handle and command errors.

Kept out of conftest.py so test modules can import them (``from k8s_testbed_support import
...``), the same way the unit tests import their ``storekit`` helpers.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTBED = REPO_ROOT / "scripts" / "k8s-testbed"

# Apply to every e2e test: the per-test budget covers only the test body, not the cluster
# start-up in the session fixture (which bounds its own subprocesses; see conftest.py).
E2E_TIMEOUT = pytest.mark.timeout(300, func_only=True)


class CommandError(AssertionError):
    """A kubectl/helm command failed; carries the full result so tests can assert on stderr."""

    def __init__(self, result: subprocess.CompletedProcess[str]) -> None:
        self.result = result
        self.stderr = result.stderr
        self.stdout = result.stdout
        super().__init__(
            f"command failed with exit code {result.returncode}: {' '.join(map(str, result.args))}\n"
            f"--- stderr ---\n{result.stderr}\n--- stdout ---\n{result.stdout}"
        )


@dataclass
class K8sCluster:
    """Handle to the running test bed, handed to tests by the ``k8s_cluster`` fixture."""

    kubeconfig: Path
    state_dir: Path
    bin_dir: Path
    home: Path
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_state(cls, state: Path, home: Path) -> K8sCluster:
        """The test bed `scripts/k8s-testbed up` started in ``state`` (its cluster.json)."""
        info = json.loads((state / "cluster.json").read_text())
        return cls(
            kubeconfig=Path(info["kubeconfig"]),
            state_dir=state,
            bin_dir=Path(info["bin"]),
            home=home,
            info=info,
        )

    @property
    def env(self) -> dict[str, str]:
        """Environment for tools talking to the cluster.

        HOME and the XDG/helm dirs point into a private temp dir so that neither kubectl's
        discovery cache nor helm's repository config leak in from (or out to) the user's home.
        """
        env = dict(os.environ)
        env.update(
            KUBECONFIG=str(self.kubeconfig),
            PATH=f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}",
            HOME=str(self.home),
            XDG_CACHE_HOME=str(self.home / ".cache"),
            XDG_CONFIG_HOME=str(self.home / ".config"),
            XDG_DATA_HOME=str(self.home / ".local" / "share"),
            HELM_CACHE_HOME=str(self.home / ".cache" / "helm"),
            HELM_CONFIG_HOME=str(self.home / ".config" / "helm"),
            HELM_DATA_HOME=str(self.home / ".local" / "share" / "helm"),
        )
        return env

    def run(
        self,
        tool: str,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run a test-bed binary (never whatever kubectl/helm happens to be on PATH)."""
        result = subprocess.run(
            [str(self.bin_dir / tool), *args],
            input=input,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise CommandError(result)
        return result

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """kubectl against the test bed; raises CommandError (with stderr) on failure."""
        return self.run("kubectl", *args, input=input, check=check, timeout=timeout)

    def helm(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """helm against the test bed; raises CommandError (with stderr) on failure."""
        return self.run("helm", *args, input=input, check=check, timeout=timeout)

    def apply(self, *manifests: dict[str, Any], namespace: str | None = None) -> None:
        """kubectl apply of Python dicts (JSON is valid YAML, so no YAML library is needed)."""
        doc = {"apiVersion": "v1", "kind": "List", "items": list(manifests)}
        ns = ["--namespace", namespace] if namespace else []
        self.kubectl("apply", *ns, "-f", "-", input=json.dumps(doc))

    def get_json(self, *args: str) -> Any:
        """kubectl get ... -o json, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float = 60) -> None:
        """Poll until predicate() is true; fail with `what` (and no hanging) otherwise."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.5)
