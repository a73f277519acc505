"""The Apache RocketMQ 5 protocol (``apache.rocketmq.v2``): fetch its published ``.proto`` files
and generate orbitmq's Python modules from them (called by ``scripts/gen-protos``).

The definitions are never retyped: they come from the npm package ``rocketmq-client-nodejs`` at a
pinned version, whose tarball is checked against the registry's sha512 integrity value and cached.
The three files are copied verbatim under ``protos/apache/rocketmq/v2/``, and their sha256 values
are pinned here too, so ``--check`` proves them unchanged without the network.

Generated code is rewritten in two ways, and only these two:

* imports: protoc writes ``from apache.rocketmq.v2 import ...`` (the proto path); orbitmq's
  modules live in ``orbitmq.rocketmq_v2`` (no top-level ``apache`` package of ours);
* the descriptor pool: the official Python client (``rocketmq-python-client``) registers the same
  full names (``apache.rocketmq.v2.Message`` ...) in protobuf's default pool under other file
  names, so both in one process would clash ("duplicate symbol"). Ours go into a private pool
  (``orbitmq.rocketmq_v2._pool``); the wire format and the gRPC method paths do not change.

Usage: ``rocketmq_v2_protos.py fetch`` · ``generate OUT_ROOT`` · ``check OUT_ROOT`` (OUT_ROOT is
``services`` or a temporary directory holding a fresh generation to compare).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

PACKAGE = "rocketmq-client-nodejs"
VERSION = "1.0.8"
TARBALL_URL = f"https://registry.npmjs.org/{PACKAGE}/-/{PACKAGE}-{VERSION}.tgz"
TARBALL_INTEGRITY = (
    "sha512-qSzgN9/oFy+iqGIbXoAdY4L/hcAGDq1PqOk4/zXs3Jz6bxsGRL3GA5QSOFS1nVUtFzGTiPyHEz4f/ITloCWEJg=="
)
"""``npm view rocketmq-client-nodejs@1.0.8 dist.integrity``."""

PROTO_DIR = "apache/rocketmq/v2"
PROTO_SHA256 = {
    "admin.proto": "90eebffaa6be4050b6677257f68ddba962592fc0245ee4ecb3b098a44e82e7d8",
    "definition.proto": "3c95946d758cb0b321d5810a60de43224e6709529af329de1d46be6c76690bf9",
    "service.proto": "414f26ecb211ee2e817ed4dda39dd7aadc100789b93cb89b58ed6c45dc5f74ec",
}
"""sha256 of each file as extracted from the verified tarball (``fetch --pin`` prints them)."""

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
OUT_PACKAGE = "orbitmq/rocketmq_v2"
MODULE = OUT_PACKAGE.replace("/", ".")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "orbitmq" / "npm"


def tarball() -> bytes:
    """The pinned tarball, from the cache or the registry; refuses bytes whose hash differs."""
    path = cache_dir() / f"{PACKAGE}-{VERSION}.tgz"
    data = path.read_bytes() if path.exists() else None
    if data is None or not _intact(data):
        with urllib.request.urlopen(TARBALL_URL, timeout=60) as reply:
            data = reply.read()
        if not _intact(data):
            raise SystemExit(f"gen-protos: {TARBALL_URL} does not match the pinned {TARBALL_INTEGRITY}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return data


def _intact(data: bytes) -> bool:
    algorithm, _, expected = TARBALL_INTEGRITY.partition("-")
    return base64.b64encode(hashlib.new(algorithm, data).digest()).decode() == expected


def fetch(pin: bool) -> None:
    """Copy the three ``.proto`` files out of the tarball into ``protos/apache/rocketmq/v2``."""
    target = PROTOS / PROTO_DIR
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(tarball()), mode="r:gz") as archive:
        for name in PROTO_SHA256:
            member = archive.extractfile(f"package/proto/{PROTO_DIR}/{name}")
            if member is None:
                raise SystemExit(f"gen-protos: {PACKAGE}@{VERSION} has no proto/{PROTO_DIR}/{name}")
            data = member.read()
            digest = hashlib.sha256(data).hexdigest()
            if pin:
                print(f'    "{name}": "{digest}",')
            elif digest != PROTO_SHA256[name]:
                raise SystemExit(f"gen-protos: {name} has sha256 {digest}, pinned {PROTO_SHA256[name]}")
            (target / name).write_bytes(data)


def verify_protos() -> list[str]:
    """Problems with the committed ``.proto`` files (empty when they are the published ones)."""
    problems = []
    for name, pinned in PROTO_SHA256.items():
        path = PROTOS / PROTO_DIR / name
        if not path.exists():
            problems.append(f"{path.relative_to(ROOT)} is missing; run scripts/gen-protos")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != pinned:
            problems.append(f"{path.relative_to(ROOT)} differs from {PACKAGE}@{VERSION}; do not edit it")
    return problems


def generate(out_root: Path) -> None:
    """Run protoc on the committed files, then rewrite imports and the pool into ``out_root``."""
    with tempfile.TemporaryDirectory() as raw:
        protos = [f"{PROTO_DIR}/{name}" for name in sorted(PROTO_SHA256)]
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{PROTOS}",
                f"--python_out={raw}",
                f"--pyi_out={raw}",
                f"--grpc_python_out={raw}",
                *protos,
            ],
            check=True,
        )
        out = out_root / OUT_PACKAGE
        out.mkdir(parents=True, exist_ok=True)
        for path in sorted((Path(raw) / PROTO_DIR).iterdir()):
            (out / path.name).write_text(rewrite(path.read_text()))


_IMPORT = re.compile(r"^from apache\.rocketmq\.v2 import ", re.MULTILINE)
_DEFAULT_POOL = "_descriptor_pool.Default().AddSerializedFile("
_MODULE_NAME = re.compile(r"'apache\.rocketmq\.v2\.(\w+_pb2)'")
_HEADER = "# ruff: noqa\n# Generated by scripts/gen-protos from protos/apache/rocketmq/v2; do not edit.\n"


def rewrite(source: str) -> str:
    source = _IMPORT.sub(f"from {MODULE} import ", source)
    source = _MODULE_NAME.sub(rf"'{MODULE}.\1'", source)
    if _DEFAULT_POOL in source:
        source = source.replace(_DEFAULT_POOL, "_pool.POOL.AddSerializedFile(")
        marker = "# @@protoc_insertion_point(imports)"
        source = source.replace(marker, f"from {MODULE} import _pool\n{marker}", 1)
    return _HEADER + source


def check(fresh_root: Path) -> int:
    """Compare a fresh generation with the committed modules; print each difference."""
    problems = verify_protos()
    fresh = fresh_root / OUT_PACKAGE
    committed = ROOT / "services" / OUT_PACKAGE
    for path in sorted(fresh.iterdir()):
        ours = committed / path.name
        if not ours.exists() or ours.read_bytes() != path.read_bytes():
            problems.append(f"services/{OUT_PACKAGE}/{path.name} is stale or missing; run scripts/gen-protos")
    for path in sorted(committed.glob("*_pb2*.py*")):
        if not (fresh / path.name).exists():
            problems.append(f"services/{OUT_PACKAGE}/{path.name} has no .proto")
    for problem in problems:
        print(f"gen-protos: {problem}", file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "fetch":
        fetch(pin="--pin" in argv)
        return 0
    if command == "generate" and len(argv) == 2:
        problems = verify_protos()
        if problems:
            print("\n".join(f"gen-protos: {p}" for p in problems), file=sys.stderr)
            return 1
        generate(Path(argv[1]))
        return 0
    if command == "check" and len(argv) == 2:
        generate(Path(argv[1]))
        return check(Path(argv[1]))
    usage = "fetch [--pin] | generate OUT_ROOT | check OUT_ROOT"
    print(f"usage: {sys.argv[0]} {usage} (got {argv})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
