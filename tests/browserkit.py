"""Headless Chromium (Debian's package) driven through the DevTools protocol, for tests that need
more than ``chromium --dump-dom``: waiting for scripts to finish drawing, reading closed shadow
roots (Material for MkDocs draws Mermaid diagrams into one), typing into a page, screenshots,
and a record of every request the page made.

The protocol runs over ``--remote-debugging-pipe`` (JSON messages ended by a NUL byte on file
descriptors 3 and 4 of the browser): no port to find, no websocket library. ``requested_urls``
lists every request of the page, its dedicated workers' included (Chromium reports those on the
page: Material's search worker fetching its index shows there).

The browser sits behind ``AirGap``, a proxy on 127.0.0.1 that refuses every request: Chromium
bypasses a proxy for loopback addresses by itself, so pages served on 127.0.0.1 load and
anything from another host fails at once, as on an air-gapped network. Its ``hosts`` are only
for diagnosis: the browser's own services (updates, the search engine's icon) ask too, so a
test judges the page by ``requested_urls``, not by the proxy.
"""

from __future__ import annotations

import base64
import contextlib
import json
import queue
import shutil
import socketserver
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium")
QUIET_FLAGS = [
    # A fresh profile would otherwise reach for updates, field trials and safe-browsing lists
    # (refused by the AirGap, but noise in its log).
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-breakpad",
    "--metrics-recording-only",
]


class AirGap(socketserver.ThreadingTCPServer):
    """An HTTP proxy on 127.0.0.1 that refuses everything and records the host of each request
    (``CONNECT host:443`` for https, the absolute URL's host for http)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.hosts: list[str] = []
        super().__init__(("127.0.0.1", 0), _RefuseHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        host, port = self.server_address[:2]
        return f"{host}:{port}"


class _RefuseHandler(socketserver.StreamRequestHandler):
    server: AirGap

    def handle(self) -> None:
        line = self.rfile.readline(8192).decode("latin-1").split()
        if len(line) >= 2:
            target = line[1]
            host = target.split("://", 1)[-1].split("/", 1)[0] if "://" in target else target
            self.server.hosts.append(host)
        self.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


class Browser:
    """One headless Chromium and one page (tab) in it, driven by DevTools commands."""

    def __init__(self, profile: Path, proxy: AirGap, window: tuple[int, int] = (1280, 900)) -> None:
        assert CHROMIUM is not None, "Debian's chromium is not installed"
        self.events: list[dict[str, Any]] = []
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._next_id = 0
        self._session: str | None = None
        self._log = (profile.parent / f"{profile.name}-chromium.log").open("w")
        command = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={profile}",
            f"--window-size={window[0]},{window[1]}",
            f"--proxy-server=http://{proxy.address}",
            "--remote-debugging-pipe",
            *QUIET_FLAGS,
        ]
        # The protocol's pipe is the browser's fds 3 (commands in) and 4 (replies out): the shell
        # moves this process's stdin and stdout pipes there.
        self._process = subprocess.Popen(
            ["sh", "-c", 'exec "$@" 3<&0 4>&1 </dev/null >&2', "sh", *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        threading.Thread(target=self._read, daemon=True).start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)

    def _read(self) -> None:
        """Replies go to ``call`` through a queue; events (no id) are kept in ``events``."""
        assert self._process.stdout is not None
        buffer = b""
        while chunk := self._process.stdout.read1(1 << 16):
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                if "id" in message:
                    self._replies.put(message)
                else:
                    self.events.append(message)

    def call(self, method: str, session: bool = False, timeout: float = 30, **params: Any) -> dict[str, Any]:
        """Send one command (to the page's session when ``session``) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(message).encode() + b"\0")
        self._process.stdin.flush()
        deadline = time.monotonic() + timeout
        while (reply := self._replies.get(timeout=max(0.0, deadline - time.monotonic())))["id"] != message[
            "id"
        ]:
            pass  # the reply to an earlier command that timed out
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    def open(self, url: str, timeout: float = 30) -> None:
        """Navigate and wait for the load event."""
        start = len(self.events)
        self.call("Page.navigate", session=True, url=url)
        self.wait(lambda: any(e["method"] == "Page.loadEventFired" for e in self.events[start:]), timeout)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait(self, condition: Callable[[], Any], timeout: float = 30) -> Any:
        """Poll ``condition`` until it is truthy; its value, or AssertionError at the deadline."""
        deadline = time.monotonic() + timeout
        while not (value := condition()):
            if time.monotonic() > deadline:
                raise AssertionError(f"not true within {timeout} s: {condition}")
            time.sleep(0.1)
        return value

    def dom(self) -> dict[str, Any]:
        """The whole DOM, shadow roots included (closed ones too: DevTools sees through them)."""
        return self.call("DOM.getDocument", session=True, depth=-1, pierce=True)["root"]

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def requested_urls(self, since: int = 0) -> list[str]:
        """The requests of the page and its dedicated workers, from the ``since``-th event on (a
        ``len(browser.events)`` taken earlier)."""
        events = self.events[since:]
        return [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]

    def errors(self, since: int = 0) -> list[str]:
        """Uncaught exceptions and console errors of the page (a failed load is logged here too)."""
        found = []
        for event in self.events[since:]:
            if event["method"] == "Runtime.exceptionThrown":
                found.append(json.dumps(event["params"]["exceptionDetails"])[:500])
            elif event["method"] == "Log.entryAdded" and event["params"]["entry"]["level"] == "error":
                found.append(event["params"]["entry"]["text"])
            elif event["method"] == "Runtime.consoleAPICalled" and event["params"]["type"] == "error":
                found.append(json.dumps(event["params"]["args"])[:500])
        return found

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, queue.Empty, BrokenPipeError):
            self.call("Browser.close", timeout=10)
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


def walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of a ``Browser.dom()`` tree, shadow roots and frames' documents included."""
    yield node
    for key in ("children", "shadowRoots"):
        for child in node.get(key, []):
            yield from walk(child)
    if "contentDocument" in node:
        yield from walk(node["contentDocument"])


def attributes(node: dict[str, Any]) -> dict[str, str]:
    flat = node.get("attributes", [])
    return dict(zip(flat[::2], flat[1::2], strict=True))
