"""The broker's store-disk gauges: the size of the file system holding a directory and the space
an unprivileged process can still write on it, as ``statvfs`` and ``df`` report them; a file
system that cannot be read leaves the gauges out of the scrape (with a warning naming the path)
instead of failing the whole ``/metrics`` page."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from orbitmq.broker.metrics import _disk_gauges


def _values(directory: Path) -> dict[str, tuple[dict[str, str], float]]:
    return {
        family.name: (family.samples[0].labels, family.samples[0].value)
        for family in _disk_gauges(directory, "b")
    }


def test_the_gauges_are_statvfs_of_the_directory(tmp_path: Path) -> None:
    values = _values(tmp_path)
    stats = os.statvfs(tmp_path)
    assert values["orbitmq_store_disk_total_bytes"] == ({"broker": "b"}, stats.f_blocks * stats.f_frsize)
    labels, available = values["orbitmq_store_disk_available_bytes"]
    assert labels == {"broker": "b"}
    assert abs(available - stats.f_bavail * stats.f_frsize) < 256 * 1024 * 1024  # others write meanwhile
    assert values["orbitmq_store_disk_total_bytes"][1] >= available > 0


def test_an_unreadable_file_system_leaves_the_gauges_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "gone"
    with caplog.at_level(logging.WARNING, logger="orbitmq.broker.metrics"):
        assert _values(missing) == {}
    assert str(missing) in caplog.text and "statvfs" in caplog.text
