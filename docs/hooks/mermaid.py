"""MkDocs hook: ship Mermaid with the site instead of letting the theme load it from a CDN.

Material for MkDocs draws ```mermaid blocks with ``window.mermaid``; when that is undefined it
injects ``https://unpkg.com/mermaid@11/dist/mermaid.min.js``, which an air-gapped reader cannot
reach (and which would change under the site without notice). This hook puts Mermaid's own
``dist/mermaid.min.js`` at ``SITE_PATH`` in the built site; mkdocs.yml lists that path in
``extra_javascript``, a plain script at the end of the body that defines ``window.mermaid``
before Material looks for it (on DOMContentLoaded), so Material never reaches for unpkg.

The file comes from the npm package at a pinned version: the tarball is checked against the
registry's sha512 integrity value and the extracted script against its sha256, then kept in a
cache so later builds need no network (``$ORBITMQ_NPM_CACHE``, default
``$XDG_CACHE_HOME/orbitmq/npm``, shared with ``scripts/gen-protos``' npm download). For a
machine without the registry, copy ``mermaid-<VERSION>.tgz`` (or the extracted
``mermaid-<VERSION>.min.js``) into that directory: both are verified before use.

Version: the newest 11.x, the major Material 9.8 asks unpkg for (it calls
``mermaid.initialize`` and ``mermaid.render``, whose 11.x signatures it was written against).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

VERSION = "11.17.2"
TARBALL_URL = f"https://registry.npmjs.org/mermaid/-/mermaid-{VERSION}.tgz"
TARBALL_INTEGRITY = (
    "sha512-V6K3C8EBdEsPFZXSKMJe6ppQOENxuHARr9GvHX4hh47lAbhMRD9qf4oEK7LoaRQxULMa80/qt5gHO73aCleBBg=="
)
"""``npm view mermaid@11.17.2 dist.integrity``."""
SCRIPT_MEMBER = "package/dist/mermaid.min.js"
SCRIPT_SHA256 = "581ed7d74bd9048d0e3a91363927d72ef22942d7722546b27f7cc29e35390eb8"
"""sha256 of ``dist/mermaid.min.js`` as extracted from the verified tarball."""
SITE_PATH = "assets/javascripts/mermaid.min.js"
"""Where the script lands in the site; mkdocs.yml's ``extra_javascript`` names the same path."""


def cache_dir() -> Path:
    explicit = os.environ.get("ORBITMQ_NPM_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "orbitmq" / "npm"


def script() -> Path:
    """The verified ``mermaid.min.js`` in the cache, extracted (and downloaded) first if needed."""
    path = cache_dir() / f"mermaid-{VERSION}.min.js"
    if path.exists() and _sha256(path.read_bytes()) == SCRIPT_SHA256:
        return path
    with tarfile.open(fileobj=io.BytesIO(_tarball()), mode="r:gz") as archive:
        member = archive.extractfile(SCRIPT_MEMBER)
        if member is None:
            raise PluginError(f"mermaid@{VERSION} has no {SCRIPT_MEMBER}")
        data = member.read()
    if _sha256(data) != SCRIPT_SHA256:
        raise PluginError(
            f"{SCRIPT_MEMBER} of mermaid@{VERSION} has sha256 {_sha256(data)}, pinned {SCRIPT_SHA256}"
        )
    _write(path, data)
    return path


def _tarball() -> bytes:
    """The pinned tarball, from the cache or the registry; bytes whose hash differs are refused."""
    path = cache_dir() / f"mermaid-{VERSION}.tgz"
    if path.exists():
        data = path.read_bytes()
        if _intact(data):
            return data
    try:
        with urllib.request.urlopen(TARBALL_URL, timeout=120) as reply:
            data = reply.read()
    except OSError as error:
        raise PluginError(
            f"cannot download {TARBALL_URL} ({error}); put that file in {cache_dir()}"
            " (or point ORBITMQ_NPM_CACHE at a directory holding it)"
        ) from error
    if not _intact(data):
        raise PluginError(f"{TARBALL_URL} does not match the pinned {TARBALL_INTEGRITY}")
    _write(path, data)
    return data


def _intact(data: bytes) -> bool:
    algorithm, _, expected = TARBALL_INTEGRITY.partition("-")
    return base64.b64encode(hashlib.new(algorithm, data).digest()).decode() == expected


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write(path: Path, data: bytes) -> None:
    """Write through a temporary name: two builds at once never read a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_bytes(data)
    partial.replace(path)


def on_config(config: MkDocsConfig, **_: Any) -> MkDocsConfig:
    """Refuse a configuration that would leave Material to fetch Mermaid from unpkg."""
    if SITE_PATH not in [str(entry) for entry in config.extra_javascript]:
        raise PluginError(f"mkdocs.yml: extra_javascript must list {SITE_PATH} (the shipped Mermaid)")
    return config


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    files.append(File.generated(config, SITE_PATH, abs_src_path=str(script())))
    return files
