"""The Java program's build (:mod:`orbitmq.common.maven`, shared with the RocketMQ peer): cached by
the hash of its pom and sources, so a cached build needs no Maven; a failed build quotes the
compiler and caches nothing; missing tools are named with the package that brings them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orbitmq.common import maven
from orbitmq.interop import java_client

pytestmark = pytest.mark.timeout(120)


def test_a_cached_build_needs_no_maven(monkeypatch: pytest.MonkeyPatch, java_client_built: Path) -> None:
    monkeypatch.setenv("PATH", "")
    assert java_client.build() == java_client_built
    assert java_client_built.name == maven.sources_digest(java_client.PROJECT)


def test_missing_tools_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(java_client.CACHE_ENV, str(tmp_path / "cache"))  # nothing built there
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(
        java_client.JavaClientError, match=r"needs mvn and java on PATH.*apt-get install -y maven"
    ):
        java_client.build()


def test_a_failed_build_quotes_the_compiler_and_caches_nothing(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(java_client.PROJECT, project)
    broken = project / "src" / "main" / "java" / "io" / "orbitmq" / "interop" / "Options.java"
    broken.write_text(broken.read_text().replace("final class Options {", "final class Options { oops"))
    cache = tmp_path / "cache"
    with pytest.raises(
        java_client.JavaClientError, match=r"(?s)building the broken copy failed.*Options\.java"
    ):
        maven.build(project, java_client.JAR, cache, java_client.JavaClientError, what="the broken copy")
    assert not (cache / maven.sources_digest(project)).exists()
    assert [path.name for path in cache.iterdir()] == ["build.lock"]  # no scratch copy left
