"""Container images for the test bed's real node, made locally without a registry or Docker.

An image is a docker-archive tar (the `docker save` layout: manifest.json, one config JSON,
one uncompressed layer tar) written with the standard library and imported with
`ctr -n k8s.io images import`.  Tars are deterministic (sorted entries, mtime 0), and a
tag carries the content hash, so importing the same image again changes nothing.

Two images:
  * pause   the sandbox image: only the static `pause` binary built with the other tools.
  * python  an almost empty rootfs (merged-/usr symlinks, /etc/passwd, the host's
            ld.so.cache) whose Python comes from the host: the pod mounts the host's /usr,
            the interpreter's prefix and the repository (with .venv) read-only by hostPath.
            A build takes milliseconds and needs no registry, and pods run exactly the code
            in the work tree; the price is that such a pod only runs on this host and sees
            host paths, which is fine for a test bed and wrong for anything else (the
            project's Dockerfile is the real image).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

PAUSE_REPO = "orbitmq.local/pause"
PYTHON_REPO = "orbitmq.local/orbitmq-host-python"

# Debian (bookworm and later) merges / into /usr: these make the host's /usr complete.
MERGED_USR_LINKS = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"


@dataclass(frozen=True)
class PythonRuntime:
    """What a pod needs from the host to run the project's virtualenv.

    Attributes:
        venv: the virtualenv (its bin/python is the pod's interpreter).
        host_mounts: host directories a pod mounts read-only at the same path.
    """

    venv: Path
    host_mounts: tuple[str, ...]

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")


def python_runtime(repo_root: Path, venv: Path) -> PythonRuntime:
    """Host paths of the venv: /usr, the base interpreter's prefix (pyvenv.cfg `home`), the repo."""
    cfg = venv / "pyvenv.cfg"
    home = None
    if cfg.is_file():
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home":
                home = Path(value.strip())
    mounts = ["/usr"]
    if home is not None and not str(home).startswith("/usr/"):
        mounts.append(str(home.parent))  # e.g. /root/.pyenv/versions/3.11.7
    mounts.append(str(repo_root))  # the venv (inside it) and the editable install's sources
    if not venv.resolve().is_relative_to(repo_root):
        mounts.append(str(venv))
    return PythonRuntime(venv=venv, host_mounts=tuple(mounts))


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, 0
    tar.addfile(info)


def _add_symlink(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, target, 0o777, 0
    tar.addfile(info)


def _layer(entries: list[tuple[str, str, object]]) -> bytes:
    """An uncompressed layer tar from (kind, path, payload) entries, in the given order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind, path, payload in entries:
            if kind == "dir":
                _add_dir(tar, path, int(payload) if payload else 0o755)  # type: ignore[call-overload]
            elif kind == "link":
                _add_symlink(tar, path, str(payload))
            else:
                data, mode = payload  # type: ignore[misc]
                _add_file(tar, path, data, mode)
    return buf.getvalue()


def _write_archive(target: Path, repo: str, layer: bytes, config: dict[str, object]) -> str:
    """Write a docker-archive with one layer; returns the image reference (tag = content hash)."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "scripts/k8s-testbed"}],
    }
    config_bytes = json.dumps(image_config, sort_keys=True).encode()
    config_digest = hashlib.sha256(config_bytes).hexdigest()
    ref = f"{repo}:{config_digest[:16]}"
    manifest = [
        {"Config": f"{config_digest}.json", "RepoTags": [ref], "Layers": [f"{diff_id[7:]}/layer.tar"]}
    ]
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add_file(tar, f"{config_digest}.json", config_bytes)
        _add_dir(tar, diff_id[7:])
        _add_file(tar, f"{diff_id[7:]}/layer.tar", layer)
        _add_file(tar, "manifest.json", json.dumps(manifest).encode())
    return ref


def build_pause_image(pause_binary: Path, target: Path) -> str:
    """The sandbox image: /pause and nothing else."""
    layer = _layer([("file", "pause", (pause_binary.read_bytes(), 0o755))])
    return _write_archive(target, PAUSE_REPO, layer, {"Entrypoint": ["/pause"]})


def build_python_image(runtime: PythonRuntime, target: Path) -> str:
    """The orbitmq image: a skeleton rootfs that runs the host's venv through hostPath mounts."""
    entries: list[tuple[str, str, object]] = [("link", name, to) for name, to in MERGED_USR_LINKS.items()]
    entries += [("dir", d, None) for d in ("usr", "etc", "root", "var", "var/lib", "var/lib/orbitmq")]
    entries += [("dir", "tmp", 0o1777)]
    entries += [
        ("file", "etc/passwd", (PASSWD.encode(), 0o644)),
        ("file", "etc/group", (GROUP.encode(), 0o644)),
    ]
    ld_cache = Path("/etc/ld.so.cache")
    if ld_cache.is_file():  # lets the loader find /usr/lib/<triplet> libraries as on the host
        entries.append(("file", "etc/ld.so.cache", (ld_cache.read_bytes(), 0o644)))
    env = [f"PATH={runtime.venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin", "PYTHONUNBUFFERED=1"]
    config = {"Env": env, "WorkingDir": "/", "Entrypoint": [runtime.python]}
    return _write_archive(target, PYTHON_REPO, _layer(entries), config)
