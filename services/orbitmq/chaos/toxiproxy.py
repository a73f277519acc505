"""toxiproxy-server as a child of a chaos run: TCP proxies in front of the brokers, and latency.

toxiproxy (github.com/Shopify/toxiproxy, built from its Go module by ``scripts/k8s-testbed
build`` into ``$ORBITMQ_K8S_CACHE/bin``) forwards each connection through a *proxy* and applies
*toxics* to the live links, existing connections included: here a ``latency`` toxic each way.
The server is driven over its HTTP API (stdlib ``urllib``: a handful of calls per fault).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

BINARY_ENV = "ORBITMQ_TOXIPROXY"
"""A toxiproxy-server binary to use instead of the test bed's build."""
READY_TIMEOUT_S = 10.0
API_TIMEOUT_S = 5.0


class ToxiproxyError(RuntimeError):
    """toxiproxy-server is missing, did not start, or refused a call (the message says which)."""


def binary() -> Path:
    """``$ORBITMQ_TOXIPROXY``, else the test bed's build, else ``toxiproxy-server`` on PATH."""
    override = os.environ.get(BINARY_ENV)
    if override:
        if not os.access(override, os.X_OK):
            raise ToxiproxyError(f"${BINARY_ENV} names {override}, which is not an executable file")
        return Path(override)
    cache = Path(os.environ.get("ORBITMQ_K8S_CACHE") or Path.home() / ".cache" / "orbitmq-k8s-testbed")
    built = cache.expanduser() / "bin" / "toxiproxy-server"
    if built.exists():
        return built
    found = shutil.which("toxiproxy-server")
    if found:
        return Path(found)
    raise ToxiproxyError(
        f"toxiproxy-server not found (looked at {built}, ${BINARY_ENV} and PATH); build it with "
        "`scripts/k8s-testbed build` (Go toolchain needed) or set "
        f"{BINARY_ENV}=/path/to/toxiproxy-server"
    )


@dataclass
class Toxiproxy:
    """One toxiproxy-server, its API on ``127.0.0.1:api_port``, logging to ``log_path``."""

    log_path: Path
    group: int
    """The group it runs as: the harness's packet filter rules leave that group's connections
    alone (they are toxiproxy's own, to the brokers)."""
    api_port: int = 0
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self, api_port: int) -> None:
        """Start it (on the calling thread: its parent-death signal follows the thread that
        forked it) and wait until its API answers."""
        self.api_port = api_port
        command = [str(binary()), "-host", "127.0.0.1", "-port", str(api_port)]
        setpriv = shutil.which("setpriv")
        if setpriv:  # killed with the harness, even by SIGKILL (util-linux's setpriv)
            command = [setpriv, "--pdeathsig", "KILL", "--", *command]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                group=self.group,
                extra_groups=[],
                env={**os.environ, "LOG_LEVEL": "info"},
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ToxiproxyError(
                    f"toxiproxy-server exited with code {self._process.returncode}; see {self.log_path}"
                )
            try:
                self._call("GET", "/version")
                return
            except ToxiproxyError:
                time.sleep(0.05)
        raise ToxiproxyError(
            f"toxiproxy-server did not answer within {READY_TIMEOUT_S:.0f} s; see {self.log_path}"
        )

    def close(self) -> None:
        """Idempotent; safe from atexit."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def create_proxy(self, name: str, upstream: str) -> int:
        """A proxy listening on a free port of 127.0.0.1, forwarding to ``upstream``; its port."""
        reply = self._call("POST", "/proxies", {"name": name, "listen": "127.0.0.1:0", "upstream": upstream})
        return int(str(reply["listen"]).rsplit(":", 1)[1])

    async def add_latency(self, proxy: str, latency_ms: int, jitter_ms: int) -> None:
        """Delay every chunk by ``latency_ms`` (± ``jitter_ms``) each way: the round trip grows
        by twice that."""
        for stream in ("upstream", "downstream"):
            toxic = {
                "name": f"latency-{stream}",
                "type": "latency",
                "stream": stream,
                "toxicity": 1.0,
                "attributes": {"latency": latency_ms, "jitter": jitter_ms},
            }
            await asyncio.to_thread(self._call, "POST", f"/proxies/{proxy}/toxics", toxic)

    async def remove_latency(self, proxy: str) -> None:
        for stream in ("upstream", "downstream"):
            await asyncio.to_thread(self._call, "DELETE", f"/proxies/{proxy}/toxics/latency-{stream}")

    def _call(self, method: str, path: str, payload: dict[str, object] | None = None) -> dict[str, object]:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.api_port}{path}", data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=API_TIMEOUT_S) as reply:
                body = reply.read()
        except urllib.error.HTTPError as error:
            raise ToxiproxyError(
                f"toxiproxy {method} {path}: {error.code} {error.read().decode()[:200]}"
            ) from None
        except OSError as error:
            raise ToxiproxyError(f"toxiproxy {method} {path}: {error}") from None
        try:
            parsed = json.loads(body) if body.strip() else {}
        except ValueError:  # GET /version answers plain text
            return {"text": body.decode(errors="replace")}
        return parsed if isinstance(parsed, dict) else {"value": parsed}
