"""Which directory a local broker group's master continues on, on real directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from orbitmq.common.server import StartupError
from orbitmq.local.datadir import (
    MemberState,
    choose_master,
    member_dirs,
    migrate_legacy,
    put_master_in_place,
    read_member,
    set_role,
)
from orbitmq.store.config import BrokerRole

MASTER, SLAVE = BrokerRole.SYNC_MASTER, BrokerRole.SLAVE


def test_a_fresh_group_keeps_broker_a_as_master() -> None:
    members = [MemberState("broker-a", None, 0), MemberState("broker-a-s1", None, 0)]
    assert choose_master(members) == members[0]


def test_the_newest_epoch_master_wins_over_an_old_master_that_never_heard() -> None:
    old = MemberState("broker-a", None, 0)  # died as master, never demoted
    promoted = MemberState("broker-a-s1", MASTER, 1)
    assert choose_master([old, promoted]) == promoted


def test_no_master_recorded_is_none() -> None:
    assert choose_master([MemberState("broker-a", SLAVE, 2), MemberState("broker-a-s1", SLAVE, 2)]) is None


def _marked(directory: Path, mark: str) -> None:
    directory.mkdir(parents=True)
    (directory / "mark").write_text(mark)


def test_the_promoted_slave_is_swapped_into_broker_a(tmp_path: Path) -> None:
    _marked(tmp_path / "broker-a", "old master")
    _marked(tmp_path / "broker-a-s1", "promoted")
    set_role(tmp_path / "broker-a", SLAVE, 1, 1)
    set_role(tmp_path / "broker-a-s1", MASTER, 0, 1)
    notes = put_master_in_place(tmp_path)
    assert (tmp_path / "broker-a" / "mark").read_text() == "promoted"
    assert (tmp_path / "broker-a-s1" / "mark").read_text() == "old master"
    assert read_member(tmp_path / "broker-a") == MemberState("broker-a", MASTER, 1)
    assert notes and "broker-a-s1 became master (epoch 1)" in notes[0]
    assert put_master_in_place(tmp_path) == []  # settled


def test_a_group_whose_members_all_say_slave_is_refused_naming_the_directory(tmp_path: Path) -> None:
    set_role(tmp_path / "broker-a", SLAVE, 1, 3)
    with pytest.raises(StartupError, match=str(tmp_path)):
        put_master_in_place(tmp_path)


def test_the_older_numbered_layout_is_renamed(tmp_path: Path) -> None:
    _marked(tmp_path / "broker-a-0", "master")
    _marked(tmp_path / "broker-a-1", "slave")
    assert len(migrate_legacy(tmp_path)) == 2
    assert [p.name for p in member_dirs(tmp_path)] == ["broker-a", "broker-a-s1"]
    assert (tmp_path / "broker-a" / "mark").read_text() == "master"


def test_both_layouts_at_once_are_refused(tmp_path: Path) -> None:
    _marked(tmp_path / "broker-a", "single")
    _marked(tmp_path / "broker-a-0", "group master")
    with pytest.raises(StartupError, match="broker-a-0"):
        migrate_legacy(tmp_path)
    assert (tmp_path / "broker-a" / "mark").read_text() == "single"
