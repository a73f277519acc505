"""The repository's small Maven projects (the RocketMQ peer of ``orbitmq bench peer``, the official
Java client's interop program), built once and cached by content.

A project is a ``pom.xml`` and a ``src/`` tree whose ``mvn package`` leaves ``target/<jar>`` and
its runtime dependencies as plain jars in ``target/lib`` (maven-dependency-plugin's
copy-dependencies). :func:`build` keys the result by a sha256 of the pom and every file under
``src/`` (paths and contents), so a changed project rebuilds and an unchanged one costs a hash;
a lock file makes concurrent processes (pytest-xdist workers) wait for one build instead of
running Maven side by side; Maven runs in a scratch copy, so the checkout stays clean and a
half-finished build is never mistaken for a finished one (the cached directory appears by one
atomic rename).
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

MAVEN_PACKAGE = ("mvn", "-q", "-B", "package")
INSTALL_HINT = {"mvn": "maven", "java": "openjdk-17-jdk-headless"}
"""The Debian package that brings each tool (scripts/test installs them)."""
LOG_TAIL_CHARS = 3000
"""How much of Maven's output a failed build quotes."""
DEPENDENCY_DIR = "lib"


def require_tools(*tools: str, what: str, error_cls: type[Exception]) -> None:
    """Raise ``error_cls`` naming the tools missing from PATH and the packages that bring them;
    ``what`` is who needs them ("the RocketMQ peer")."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        packages = " ".join(INSTALL_HINT[tool] for tool in missing)
        raise error_cls(
            f"{what} needs {' and '.join(missing)} on PATH: install them "
            f"(Debian: apt-get install -y {packages}; scripts/test does it as root)"
        )


def _source_files(project_dir: Path, error_cls: type[Exception]) -> list[Path]:
    pom = project_dir / "pom.xml"
    if not pom.is_file():
        raise error_cls(
            f"{pom} not found: this Maven project builds from a checkout of the orbitmq repository"
        )
    return [pom, *sorted(path for path in (project_dir / "src").rglob("*") if path.is_file())]


def sources_digest(project_dir: Path, error_cls: type[Exception] = RuntimeError) -> str:
    """sha256 of the pom and every file under ``src/`` (paths and contents): the cache key."""
    digest = hashlib.sha256()
    for path in _source_files(project_dir, error_cls):
        digest.update(str(path.relative_to(project_dir)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def build(
    project_dir: Path, jar_name: str, cache_root: Path, error_cls: type[Exception], what: str = ""
) -> Path:
    """The built project's directory (``jar_name`` and ``lib/*.jar``), building it first unless
    ``cache_root/<sha256>/`` holds this pom's and these sources' build.

    ``error_cls`` is raised (with Maven's output tail) when the tools are missing or the build
    fails; ``what`` names the project in those messages (default: its directory).
    """
    what = what or str(project_dir)
    built = cache_root / sources_digest(project_dir, error_cls)
    if (built / jar_name).is_file():
        return built
    require_tools("mvn", "java", what=what, error_cls=error_cls)
    cache_root.mkdir(parents=True, exist_ok=True)
    with (cache_root / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (built / jar_name).is_file():  # built by the process we waited for
            return built
        with tempfile.TemporaryDirectory(dir=cache_root, prefix=f"{built.name[:12]}.building-") as scratch:
            project = Path(scratch) / "project"
            project.mkdir()
            shutil.copy2(project_dir / "pom.xml", project / "pom.xml")
            shutil.copytree(project_dir / "src", project / "src")
            done = subprocess.run(
                MAVEN_PACKAGE,
                cwd=project,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                output = (done.stdout + done.stderr)[-LOG_TAIL_CHARS:]
                raise error_cls(
                    f"building {what} failed ({' '.join(MAVEN_PACKAGE)} in a copy of {project_dir}, "
                    f"exit {done.returncode}):\n{output}"
                )
            staged = Path(scratch) / "built"
            staged.mkdir()
            shutil.move(project / "target" / jar_name, staged / jar_name)
            shutil.move(project / "target" / DEPENDENCY_DIR, staged / DEPENDENCY_DIR)
            shutil.rmtree(built, ignore_errors=True)  # a directory left without its jar
            staged.rename(built)  # atomic: the jar is there only when the whole build is
    return built


def classpath(built: Path, jar_name: str) -> str:
    """``java -cp`` for a build: its jar, then every dependency jar."""
    return f"{built / jar_name}:{built / DEPENDENCY_DIR}/*"
