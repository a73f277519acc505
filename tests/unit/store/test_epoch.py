"""The epoch file (real files under tmp_path) and the common point of two epoch histories."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from orbitmq.store import config_store
from orbitmq.store.config_store import ConfigFileError, ConfigPersistError
from orbitmq.store.epoch import EPOCH_FILE, EpochEntry, EpochFile, common_point

E = EpochEntry


@pytest.fixture
def epoch_path(tmp_path: Path) -> Path:
    return tmp_path / EPOCH_FILE


def _loaded(path: Path) -> EpochFile:
    file = EpochFile(path)
    file.load()
    return file


# ---------------------------------------------------------------------------------- round trip


def test_a_missing_file_is_an_empty_history(epoch_path: Path) -> None:
    file = EpochFile(epoch_path)
    assert file.load() == []
    assert file.entries == []
    assert file.current is None
    assert not epoch_path.exists()  # loading writes nothing


def test_begin_persists_and_a_reopened_file_reads_it_back(epoch_path: Path) -> None:
    file = _loaded(epoch_path)
    file.begin(0, 0)
    file.begin(3, 4096)
    file.begin(4, 4096)  # nothing written under epoch 3: both start at the same offset
    assert file.current == E(4, 4096)

    reopened = EpochFile(epoch_path)
    assert reopened.load() == [E(0, 0), E(3, 4096), E(4, 4096)]
    assert reopened.entries == file.entries
    assert json.loads(epoch_path.read_text()) == {
        "epochEntries": [
            {"epoch": 0, "startOffset": 0},
            {"epoch": 3, "startOffset": 4096},
            {"epoch": 4, "startOffset": 4096},
        ]
    }


def test_entries_is_a_copy(epoch_path: Path) -> None:
    file = _loaded(epoch_path)
    file.begin(1, 0)
    file.entries.append(E(9, 9))
    assert file.entries == [E(1, 0)]


def test_truncate_after_drops_epochs_starting_beyond_the_offset(epoch_path: Path) -> None:
    file = _loaded(epoch_path)
    for epoch, start in [(1, 0), (2, 100), (3, 200), (4, 300)]:
        file.begin(epoch, start)
    file.truncate_after(200)  # epoch 3 starts exactly there: it stays
    assert file.entries == [E(1, 0), E(2, 100), E(3, 200)]
    assert _loaded(epoch_path).entries == [E(1, 0), E(2, 100), E(3, 200)]

    file.truncate_after(150)
    assert _loaded(epoch_path).entries == [E(1, 0), E(2, 100)]
    file.begin(5, 150)  # the rejoined broker then records the new master's epoch
    assert _loaded(epoch_path).entries == [E(1, 0), E(2, 100), E(5, 150)]


def test_truncate_after_writes_nothing_when_nothing_is_dropped(epoch_path: Path) -> None:
    file = _loaded(epoch_path)
    file.begin(1, 0)
    file.begin(2, 100)
    before = epoch_path.stat().st_ino, epoch_path.read_bytes(), file.store.bak_path.read_bytes()
    file.truncate_after(500)
    file.truncate_after(100)
    assert (epoch_path.stat().st_ino, epoch_path.read_bytes(), file.store.bak_path.read_bytes()) == before


# ----------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("epoch", "start", "problem"),
    [
        (3, 500, "epoch 3 is not newer than the last recorded epoch 3: epochs only grow"),
        (2, 500, "epoch 2 is not newer than the last recorded epoch 3: epochs only grow"),
        (4, 99, "epoch 4 cannot start at offset 99, before epoch 3's start 100: an epoch starts where"),
        (-1, 0, "epoch must be an int >= 0, got -1"),
        (5, -1, "start_offset must be an int >= 0, got -1"),
    ],
)
def test_begin_refuses_an_epoch_that_is_not_newer_or_starts_earlier(
    epoch_path: Path, epoch: int, start: int, problem: str
) -> None:
    file = _loaded(epoch_path)
    file.begin(3, 100)
    with pytest.raises(ValueError) as info:
        file.begin(epoch, start)
    assert problem in str(info.value)
    assert file.entries == [E(3, 100)]
    assert _loaded(epoch_path).entries == [E(3, 100)]


def test_truncate_after_refuses_a_negative_offset(epoch_path: Path) -> None:
    with pytest.raises(ValueError, match="offset must be an int >= 0, got -1"):
        _loaded(epoch_path).truncate_after(-1)


def test_the_history_must_be_loaded_before_use(epoch_path: Path) -> None:
    _loaded(epoch_path).begin(7, 0)
    file = EpochFile(epoch_path)
    for use in (lambda: file.entries, lambda: file.current, lambda: file.begin(8, 10)):
        with pytest.raises(RuntimeError, match="call load"):
            use()
    assert _loaded(epoch_path).entries == [E(7, 0)]  # not overwritten unread


def test_a_failed_write_keeps_the_file_and_the_history(
    epoch_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = _loaded(epoch_path)
    file.begin(1, 0)
    real_replace = os.replace

    def disk_full(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(config_store.os, "replace", disk_full)
    with pytest.raises(ConfigPersistError) as info:
        file.begin(2, 100)
    assert info.value.retriable
    assert file.entries == [E(1, 0)]
    monkeypatch.setattr(config_store.os, "replace", real_replace)
    assert _loaded(epoch_path).entries == [E(1, 0)]
    file.begin(2, 100)
    assert _loaded(epoch_path).entries == [E(1, 0), E(2, 100)]


# ----------------------------------------------------------------------------- bak, corruption


def test_each_write_keeps_the_previous_version_as_bak(epoch_path: Path) -> None:
    file = _loaded(epoch_path)
    file.begin(1, 0)
    first = epoch_path.read_bytes()
    file.begin(2, 100)
    assert file.store.bak_path == epoch_path.with_name("epoch.json.bak")
    assert file.store.bak_path.read_bytes() == first
    assert sorted(p.name for p in epoch_path.parent.iterdir()) == ["epoch.json", "epoch.json.bak"]


def test_a_missing_main_file_with_a_bak_loads_the_bak_and_writes_it_back_on_the_next_change(
    epoch_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    file = _loaded(epoch_path)
    file.begin(1, 0)
    file.begin(2, 100)
    epoch_path.unlink()

    with caplog.at_level(logging.WARNING, logger="orbitmq.store.config_store"):
        reopened = _loaded(epoch_path)
    assert reopened.entries == [E(1, 0)]
    assert any("epoch.json.bak" in r.getMessage() for r in caplog.records)
    reopened.begin(3, 200)
    assert json.loads(epoch_path.read_text())["epochEntries"][-1] == {"epoch": 3, "startOffset": 200}


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"epochEntries": [{"epoch": 1, "startOff', "line 1 column 32: Unterminated string"),
        (b"", "Expecting value"),
        (b'{"epochEntries": [{"epoch": -1, "startOffset": 0}]}', "epochEntries.0.epoch"),
        (b'{"epochEntries": [{"epoch": "1", "startOffset": 0}]}', "epochEntries.0.epoch"),
        (b'{"epochEntries": [{"epoch": 1}]}', "epochEntries.0.startOffset"),
        (b'{"epochEntries": [], "extra": 1}', "extra"),
        (
            b'{"epochEntries": [{"epoch": 2, "startOffset": 0}, {"epoch": 2, "startOffset": 9}]}',
            "epochEntries: epoch 2 follows epoch 2: epochs must strictly grow",
        ),
        (
            b'{"epochEntries": [{"epoch": 1, "startOffset": 50}, {"epoch": 2, "startOffset": 9}]}',
            "start offsets must not decrease",
        ),
    ],
)
def test_a_corrupt_file_raises_naming_the_file_and_the_problem(
    epoch_path: Path, content: bytes, problem: str
) -> None:
    epoch_path.write_bytes(content)
    with pytest.raises(ConfigFileError) as info:
        EpochFile(epoch_path).load()
    assert str(info.value).startswith(f"{epoch_path}: ")
    assert problem in str(info.value)
    assert info.value.backup is None
    assert epoch_path.read_bytes() == content  # never reset


def test_a_corrupt_file_with_a_bak_names_the_bak_and_does_not_load_it(epoch_path: Path) -> None:
    file = _loaded(epoch_path)
    file.begin(1, 0)
    file.begin(2, 100)
    epoch_path.write_bytes(epoch_path.read_bytes()[:20])
    with pytest.raises(ConfigFileError) as info:
        EpochFile(epoch_path).load()
    assert info.value.backup == epoch_path.with_name("epoch.json.bak")
    assert "restore" in str(info.value)


# ------------------------------------------------------------------------------- common point


@pytest.mark.parametrize(
    ("local", "local_max", "remote", "remote_max", "expected"),
    [
        pytest.param([E(0, 0), E(1, 100)], 300, [E(0, 0), E(1, 100)], 300, 300, id="same-history-same-end"),
        pytest.param([E(0, 0), E(1, 100)], 150, [E(0, 0), E(1, 100)], 300, 150, id="local-behind-same-epoch"),
        pytest.param([E(0, 0), E(1, 100)], 300, [E(0, 0), E(1, 100)], 200, 200, id="local-ahead-same-epoch"),
        pytest.param([E(0, 0)], 300, [E(0, 0), E(1, 250)], 400, 250, id="remote-moved-on-new-epoch"),
        pytest.param([E(0, 0)], 200, [E(0, 0), E(1, 250)], 400, 200, id="remote-moved-on-local-short"),
        pytest.param(
            [E(0, 0), E(1, 100)], 180, [E(0, 0), E(2, 100)], 300, 100, id="local-extra-unreplicated-epoch"
        ),
        pytest.param(
            [E(0, 0), E(1, 100), E(3, 100)],
            150,
            [E(0, 0), E(1, 100), E(4, 120)],
            200,
            100,
            id="local-empty-epoch-then-divergent-tail",
        ),
        pytest.param(
            [E(1, 0), E(2, 100)], 180, [E(1, 0), E(2, 100), E(3, 150)], 400, 150, id="old-master-rejoins"
        ),
        pytest.param([E(1, 0)], 300, [E(2, 0)], 300, 0, id="disjoint"),
        pytest.param([], 300, [E(1, 200)], 400, 0, id="one-side-empty"),
        pytest.param([E(1, 200)], 400, [], 300, 0, id="other-side-empty"),
        pytest.param([], 300, [], 250, 250, id="both-empty-original-lineage"),
        pytest.param([E(0, 0), E(1, 500)], 300, [E(0, 0)], 400, 300, id="next-start-beyond-max-clamped"),
    ],
)
def test_common_point(
    local: list[EpochEntry], local_max: int, remote: list[EpochEntry], remote_max: int, expected: int
) -> None:
    assert common_point(local, local_max, remote, remote_max) == expected
    assert common_point(remote, remote_max, local, local_max) == expected  # symmetric


@pytest.mark.parametrize(
    ("local", "local_max", "remote", "remote_max", "problem"),
    [
        ([E(2, 0), E(1, 10)], 10, [], 0, "the local history: epoch 1 follows epoch 2"),
        (
            [],
            0,
            [E(1, 10), E(2, 5)],
            10,
            "the remote history: epoch 2 starts at 5, before epoch 1's start 10",
        ),
        ([], -1, [], 0, "local_max_offset must be an int >= 0, got -1"),
        ([], 0, [], -3, "remote_max_offset must be an int >= 0, got -3"),
    ],
)
def test_common_point_refuses_bad_input(
    local: list[EpochEntry], local_max: int, remote: list[EpochEntry], remote_max: int, problem: str
) -> None:
    with pytest.raises(ValueError) as info:
        common_point(local, local_max, remote, remote_max)
    assert problem in str(info.value)
