"""A real Prometheus for tests: the monitoring tools `scripts/k8s-testbed build` caches, a
Prometheus started on a free port scraping given targets every second, and its HTTP API.

Import it from any test directory the way the other kits are imported::

    sys.path.insert(0, str(REPO_ROOT / "tests" / "integration" / "monitoring"))
    from promkit import promtool, run_prometheus

The binaries are Prometheus 3.x, promtool, kubeconform and the helm-unittest plugin built from
the pins in scripts/k8s-testbed.d/versions.env, plus the prometheus-operator CRDs copied from
their module (``bin/`` and ``share/`` of the test-bed cache).  The first use runs
``scripts/k8s-testbed build`` (a no-op when the cache is up to date; CI runs it before pytest).
``ORBITMQ_PROMETHEUS`` and ``ORBITMQ_PROMTOOL`` point at other binaries instead, e.g. Debian's
``prometheus`` package (2.42: /usr/bin/prometheus, /usr/bin/promtool).

Only the standard library: HTTP through urllib, the configuration written as JSON (which is YAML).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
TESTBED = REPO_ROOT / "scripts" / "k8s-testbed"
BUILD_TIMEOUT_S = 60 * 60  # a cold build of everything the test bed caches (~15 min on 2 cores)
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


class PrometheusError(AssertionError):
    """Prometheus did not start, a target never came up, or the API answered with an error."""


# --------------------------------------------------------------------------- the cached tools


def cache_dir() -> Path:
    """The test-bed cache (as scripts/k8s-testbed computes it)."""
    default = Path.home() / ".cache" / "orbitmq-k8s-testbed"
    return Path(os.environ.get("ORBITMQ_K8S_CACHE") or default).expanduser().absolute()


@functools.cache
def ensure_built() -> Path:
    """Run `scripts/k8s-testbed build` once per process (a no-op when cached); the cache dir."""
    try:
        done = subprocess.run(
            [str(TESTBED), "build"], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise PrometheusError(f"scripts/k8s-testbed build timed out after {BUILD_TIMEOUT_S}s") from exc
    if done.returncode != 0:
        raise PrometheusError(
            f"scripts/k8s-testbed build failed (exit {done.returncode}):\n{done.stderr}{done.stdout}"
        )
    return cache_dir()


def _tool(env_name: str, cached: str) -> Path:
    override = os.environ.get(env_name)
    return Path(override) if override else ensure_built() / cached


def prometheus_binary() -> Path:
    return _tool("ORBITMQ_PROMETHEUS", "bin/prometheus")


def promtool_binary() -> Path:
    return _tool("ORBITMQ_PROMTOOL", "bin/promtool")


def kubeconform_binary() -> Path:
    return ensure_built() / "bin" / "kubeconform"


def helm_plugins_dir() -> Path:
    """A HELM_PLUGINS directory holding the helm-unittest plugin (`helm unittest`)."""
    return ensure_built() / "share" / "helm-plugins"


def prometheus_operator_crds() -> list[Path]:
    """The prometheus-operator CRD files (ServiceMonitor, PodMonitor, PrometheusRule, ...)."""
    return sorted((ensure_built() / "share" / "prometheus-operator-crds").glob("*.yaml"))


def promtool(
    *args: str, input: str | None = None, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run promtool (e.g. ``promtool("check", "metrics", input=text)``); raises on failure if check."""
    done = subprocess.run(
        [str(promtool_binary()), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and done.returncode != 0:
        raise PrometheusError(
            f"promtool {' '.join(args)} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return done


def fetch(url: str, timeout: float = 10) -> str:
    """GET a URL as text (e.g. a process's /metrics)."""
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return reply.read().decode()


# --------------------------------------------------------------------------- a running Prometheus


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape_config(
    targets: Mapping[str, Iterable[str]],
    *,
    scrape_interval: str = "1s",
    rule_files: Iterable[Path] = (),
    labels: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """The prometheus.yml for ``{job: [host:port, ...]}`` (optional extra target labels per job)."""
    return {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "evaluation_interval": scrape_interval,
        },
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {
                "job_name": job,
                "static_configs": [
                    {
                        "targets": list(addresses),
                        **({"labels": dict(labels[job])} if labels and job in labels else {}),
                    }
                ],
            }
            for job, addresses in targets.items()
        ],
    }


@dataclass
class Prometheus:
    """A Prometheus server started by run_prometheus(); its HTTP API as methods."""

    url: str
    process: subprocess.Popen[bytes]
    workdir: Path
    config: Path
    log: Path

    def api(self, path: str, params: Mapping[str, Any] | None = None, timeout: float = 30) -> Any:
        """GET /api/v1/<path>; the ``data`` of a success, PrometheusError with the error otherwise."""
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=timeout) as reply:
                body = json.loads(reply.read())
        except urllib.error.HTTPError as exc:  # 400/422/503 carry a JSON error body
            try:
                body = json.loads(exc.read())
            except ValueError:
                raise PrometheusError(f"GET {url}: HTTP {exc.code}") from exc
        if body.get("status") != "success":
            raise PrometheusError(f"GET {url}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, time: float | str | None = None) -> list[dict[str, Any]]:
        """Instant query: the result vector (or matrix) as Prometheus returns it; a scalar as
        one series without labels."""
        data = self.api("query", {"query": expr, "time": time})
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def query_range(
        self, expr: str, start: float, end: float | None = None, step: float | str = 1
    ) -> list[dict[str, Any]]:
        """Range query from start to end (default now), one point per step: a list of series."""
        end = time.time() if end is None else end
        return self.api("query_range", {"query": expr, "start": start, "end": end, "step": step})["result"]

    def value(self, expr: str) -> float | None:
        """The single value of an instant query with one series, None with none."""
        result = self.query(expr)
        if not result:
            return None
        if len(result) > 1:
            raise PrometheusError(f"{expr} returned {len(result)} series, not one: {result}")
        return float(result[0]["value"][1])

    def series(self, match: str) -> list[dict[str, str]]:
        """The label sets of the series a selector matches (``/api/v1/series``)."""
        return self.api("series", {"match[]": match})

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets with their health, last error and labels."""
        return self.api("targets", {"state": "active"})["activeTargets"]

    def rules(self) -> list[dict[str, Any]]:
        """The loaded rule groups (alerting and recording) and their state."""
        return self.api("rules")["groups"]

    def wait_for(self, expr: str, timeout: float = 30) -> list[dict[str, Any]]:
        """Poll an instant query until it returns at least one series; that result."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() > deadline:
                raise PrometheusError(f"no series for {expr} within {timeout:.0f}s")
            time.sleep(0.5)

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _wait(prom: Prometheus, what: str, ready: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    problem = ""
    while True:
        if prom.process.poll() is not None:
            raise PrometheusError(f"prometheus exited ({prom.process.returncode}):\n{prom.log_tail()}")
        try:
            problem = ready()
        except (OSError, ValueError, PrometheusError) as exc:
            problem = str(exc)
        if not problem:
            return
        if time.monotonic() > deadline:
            raise PrometheusError(f"{what} not within {timeout:.0f}s: {problem}\n{prom.log_tail()}")
        time.sleep(0.2)


def _targets_down(prom: Prometheus, expected: int) -> str:
    """'' when all `expected` targets are up, else what is not (with each one's last error)."""
    targets = prom.targets()
    down = [
        f"{t['scrapeUrl']}: {t['health']} {t.get('lastError', '')}".strip()
        for t in targets
        if t["health"] != "up"
    ]
    if len(targets) != expected:
        down.append(f"{len(targets)} active targets, {expected} configured")
    return "; ".join(down)


def _ready(url: str) -> str:
    with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as reply:
        return "" if reply.status == 200 else f"/-/ready: HTTP {reply.status}"


@contextlib.contextmanager
def run_prometheus(
    targets: Mapping[str, Iterable[str]],
    workdir: Path,
    *,
    scrape_interval: str = "1s",
    rule_files: Iterable[Path] = (),
    labels: Mapping[str, Mapping[str, str]] | None = None,
    extra_args: Iterable[str] = (),
    timeout: float = START_TIMEOUT_S,
) -> Iterator[Prometheus]:
    """A real Prometheus on a free localhost port scraping ``{job: [host:port, ...]}``.

    Yields once it is ready and every target has been scraped successfully (``up`` is 1);
    stopped (SIGTERM, then SIGKILL) on exit.  Its config, TSDB and log live in workdir.
    """
    targets = {job: list(addresses) for job, addresses in targets.items()}
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(
        json.dumps(
            scrape_config(targets, scrape_interval=scrape_interval, rule_files=rule_files, labels=labels),
            indent=2,
        )
    )
    promtool("check", "config", str(config))
    log = workdir / "prometheus.log"
    port = free_port()
    cmd = [
        str(prometheus_binary()),
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        *extra_args,
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    prom = Prometheus(f"http://127.0.0.1:{port}", process, workdir, config, log)
    try:
        _wait(prom, "prometheus ready", lambda: _ready(prom.url), timeout)
        expected = sum(len(addresses) for addresses in targets.values())
        _wait(prom, "every target up", lambda: _targets_down(prom, expected), timeout)
        yield prom
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
