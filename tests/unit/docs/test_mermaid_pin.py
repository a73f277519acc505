"""docs/hooks/mermaid.py's download and cache: the script the site ships is the pinned one or the
build stops. A small tarball made here stands in for the npm package (the hook's pins are pointed
at it) and is served by a local HTTP server, so no test reaches the registry."""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import importlib.util
import io
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = b"globalThis.mermaid = {initialize() {}, render() {}};\n"


def _tarball(script: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        member = tarfile.TarInfo("package/dist/mermaid.min.js")
        member.size = len(script)
        archive.addfile(member, io.BytesIO(script))
    return out.getvalue()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Path]:
    """A directory served over HTTP on 127.0.0.1 (the stand-in registry); yields it."""
    served = tmp_path / "registry"
    served.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(served))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (served / "port").write_text(str(server.server_address[1]))
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def hook(registry: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The hook module, pinned to a tarball holding ``SCRIPT``, with an empty cache."""
    spec = importlib.util.spec_from_file_location("mermaid_hook", ROOT / "docs" / "hooks" / "mermaid.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tarball = _tarball(SCRIPT)
    (registry / "mermaid.tgz").write_bytes(tarball)
    port = (registry / "port").read_text()
    monkeypatch.setattr(module, "TARBALL_URL", f"http://127.0.0.1:{port}/mermaid.tgz")
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    monkeypatch.setattr(module, "TARBALL_INTEGRITY", integrity)
    monkeypatch.setattr(module, "SCRIPT_SHA256", hashlib.sha256(SCRIPT).hexdigest())
    monkeypatch.setenv("ORBITMQ_NPM_CACHE", str(tmp_path / "cache"))
    return module


def test_the_first_build_downloads_and_later_ones_use_the_cache(hook: ModuleType, registry: Path) -> None:
    assert hook.script().read_bytes() == SCRIPT
    (registry / "mermaid.tgz").unlink()  # the registry is gone: the cache answers
    assert hook.script().read_bytes() == SCRIPT


def test_a_changed_cached_script_is_extracted_again(hook: ModuleType, registry: Path) -> None:
    cached = hook.script()
    cached.write_bytes(b"globalThis.mermaid = 'not the pinned one';\n")
    (registry / "mermaid.tgz").unlink()
    assert hook.script().read_bytes() == SCRIPT  # from the cached, verified tarball


def test_a_tarball_that_differs_from_the_pin_is_refused(hook: ModuleType, registry: Path) -> None:
    (registry / "mermaid.tgz").write_bytes(_tarball(b"globalThis.mermaid = 'tampered';\n"))
    with pytest.raises(PluginError, match="does not match the pinned"):
        hook.script()
    assert not list(hook.cache_dir().glob("*"))  # nothing unverified is kept


def test_without_the_registry_or_a_cache_the_error_says_where_to_put_the_file(
    hook: ModuleType, registry: Path
) -> None:
    (registry / "mermaid.tgz").unlink()
    with pytest.raises(PluginError, match=f"put that file in {hook.cache_dir()}"):
        hook.script()
