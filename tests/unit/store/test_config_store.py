from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from orbitmq.common.clock import ManualClock
from orbitmq.common.errors import OrbitError
from orbitmq.common.names import InvalidNameError
from orbitmq.store import config_store
from orbitmq.store.config_store import (
    BrokerConfigTables,
    ConfigFileError,
    ConfigPersistError,
    ConsumerOffsetFile,
    ConsumerOffsetTable,
    DataVersion,
    DelayOffsetTable,
    InvalidOffsetError,
    JsonConfigStore,
    Permission,
    SubscriptionGroupConfig,
    SubscriptionGroupTable,
    TopicConfig,
    TopicConfigTable,
    TopicFilterType,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=1_700_000_000_000)


@pytest.fixture
def topics_path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "topics.json"


@pytest.fixture
def offsets_path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "consumerOffset.json"


def _temp_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# ---------------------------------------------------------------------------------- round trips


def test_topic_table_round_trip(topics_path: Path, clock: ManualClock) -> None:
    table = TopicConfigTable(topics_path, clock=clock)
    a = TopicConfig(topic_name="TopicA", read_queue_nums=8, write_queue_nums=8, attributes={"k": "v"})
    b = TopicConfig(
        topic_name="%RETRY%group",
        perm=Permission.READ,
        order=True,
        topic_filter_type=TopicFilterType.MULTI_TAG,
    )
    table.put(a)
    table.put(b)
    assert table.persist() is True

    reopened = TopicConfigTable(topics_path, clock=clock)
    assert reopened.get("TopicA") == a
    assert reopened.get("%RETRY%group") == b
    assert reopened.get("%RETRY%group").perm == Permission.READ  # type: ignore[union-attr]
    assert [c.topic_name for c in reopened.list()] == ["%RETRY%group", "TopicA"]
    assert reopened.contains("TopicA") and "TopicA" in reopened and "Nope" not in reopened
    assert len(reopened) == 2
    assert reopened.data_version == table.data_version


def test_topic_table_delete(topics_path: Path) -> None:
    table = TopicConfigTable(topics_path)
    table.put(TopicConfig(topic_name="TopicA"))
    assert table.delete("TopicA") is True
    assert table.delete("TopicA") is False
    assert table.get("TopicA") is None
    table.persist()
    assert len(TopicConfigTable(topics_path)) == 0


def test_topic_config_defaults() -> None:
    config = TopicConfig(topic_name="T")
    assert (config.read_queue_nums, config.write_queue_nums) == (4, 4)
    assert config.perm == Permission.READ | Permission.WRITE == 6
    assert (Permission.READ, Permission.WRITE, Permission.INHERIT) == (4, 2, 1)
    assert config.order is False
    assert config.topic_filter_type is TopicFilterType.SINGLE_TAG
    assert config.attributes == {}


def test_topic_configs_are_frozen() -> None:
    config = TopicConfig(topic_name="T")
    with pytest.raises(ValidationError):
        config.read_queue_nums = 8  # type: ignore[misc]
    assert config.model_copy(update={"read_queue_nums": 8}).read_queue_nums == 8


def test_subscription_group_table_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "config" / "subscriptionGroup.json"
    table = SubscriptionGroupTable(path)
    group = SubscriptionGroupConfig(group_name="g1", retry_max_times=3, consume_message_orderly=True)
    table.put(group)
    table.put(SubscriptionGroupConfig(group_name="g2"))
    table.persist()

    reopened = SubscriptionGroupTable(path)
    assert reopened.get("g1") == group
    assert [g.group_name for g in reopened.list()] == ["g1", "g2"]
    assert reopened.delete("g2") is True
    assert not reopened.contains("g2")


def test_subscription_group_defaults() -> None:
    group = SubscriptionGroupConfig(group_name="g")
    assert group.model_dump() == {
        "group_name": "g",
        "consume_enable": True,
        "consume_from_min_enable": True,
        "consume_broadcast_enable": True,
        "retry_queue_nums": 1,
        "retry_max_times": 16,
        "broker_id": 0,
        "which_broker_when_consume_slowly": 1,
        "notify_consumer_ids_changed_enable": True,
        "consume_message_orderly": False,
    }
    with pytest.raises(ValidationError):
        SubscriptionGroupConfig(group_name="g", retry_max_times=1001)


def test_consumer_offset_table_round_trip(offsets_path: Path) -> None:
    table = ConsumerOffsetTable(offsets_path)
    table.commit("g1", "TopicA", 0, 10)
    table.commit("g1", "TopicA", 1, 11)
    table.commit("g2", "TopicA", 0, 5)
    table.commit("g1", "TopicB", 3, 7)
    table.persist()

    reopened = ConsumerOffsetTable(offsets_path)
    assert reopened.query("g1", "TopicA", 0) == 10
    assert reopened.query("g1", "TopicA", 1) == 11
    assert reopened.query("g1", "TopicA", 2) == -1
    assert reopened.query("unknown", "TopicA", 0) == -1
    assert reopened.offsets_of("g1", "TopicA") == {0: 10, 1: 11}
    assert reopened.offsets_of("g9", "TopicA") == {}
    assert reopened.groups_of_topic("TopicA") == {"g1", "g2"}
    assert reopened.topics_of_group("g1") == {"TopicA", "TopicB"}
    assert reopened.snapshot() == {"TopicA@g1": {0: 10, 1: 11}, "TopicA@g2": {0: 5}, "TopicB@g1": {3: 7}}


def test_consumer_offsets_remove_group_and_reset(offsets_path: Path) -> None:
    table = ConsumerOffsetTable(offsets_path)
    table.commit("g1", "TopicA", 0, 10)
    table.commit("g1", "TopicB", 0, 10)
    table.commit("g2", "TopicA", 0, 3)

    assert table.remove_group("g1") == 2
    assert table.remove_group("g1") == 0
    assert table.topics_of_group("g1") == set()
    assert table.groups_of_topic("TopicA") == {"g2"}

    table.commit("g2", "TopicA", 1, 4)
    table.reset("g2", "TopicA", {0: 0, 2: 9})
    assert table.offsets_of("g2", "TopicA") == {0: 0, 2: 9}  # queue 1 not listed: unknown
    table.reset("g2", "TopicA", {})
    assert table.query("g2", "TopicA", 0) == -1
    table.persist()
    assert ConsumerOffsetTable(offsets_path).snapshot() == {}


def test_offsets_of_returns_a_copy(offsets_path: Path) -> None:
    table = ConsumerOffsetTable(offsets_path)
    table.commit("g", "T", 0, 1)
    table.offsets_of("g", "T")[0] = 999
    assert table.query("g", "T", 0) == 1


def test_delay_offset_table_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "config" / "delayOffset.json"
    table = DelayOffsetTable(path)
    assert table.get(1) == 0  # never set: start of the level's queue
    table.set(1, 100)
    table.set(18, 7)
    table.persist()

    reopened = DelayOffsetTable(path)
    assert reopened.get(1) == 100
    assert reopened.get(18) == 7
    assert reopened.snapshot() == {1: 100, 18: 7}


def test_delay_levels_outside_the_configured_range_are_rejected(tmp_path: Path) -> None:
    table = DelayOffsetTable(tmp_path / "delayOffset.json", max_level=18)
    for level in (0, 19, -1):
        with pytest.raises(InvalidOffsetError, match=f"got {level}"):
            table.set(level, 1)
    with pytest.raises(InvalidOffsetError, match="offset must be >= 0, got -5"):
        table.set(2, -5)


def test_a_file_with_levels_above_the_configured_maximum_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "delayOffset.json"
    table = DelayOffsetTable(path, max_level=18)
    table.set(18, 1)
    table.persist()
    with pytest.raises(ConfigFileError) as info:
        DelayOffsetTable(path, max_level=10)
    assert str(path) in str(info.value)
    assert "[18]" in str(info.value)


def test_broker_config_tables_live_under_config(tmp_path: Path) -> None:
    tables = BrokerConfigTables.open(tmp_path)
    tables.topics.put(TopicConfig(topic_name="T"))
    tables.subscription_groups.put(SubscriptionGroupConfig(group_name="g"))
    tables.consumer_offsets.commit("g", "T", 0, 1)
    tables.delay_offsets.set(3, 4)
    tables.persist_all()
    names = sorted(p.name for p in (tmp_path / "config").iterdir())
    assert names == ["consumerOffset.json", "delayOffset.json", "subscriptionGroup.json", "topics.json"]
    again = BrokerConfigTables.open(tmp_path)
    assert again.consumer_offsets.query("g", "T", 0) == 1
    assert again.delay_offsets.get(3) == 4


# ------------------------------------------------------------------------- versions and layout


def test_data_version_counter_grows_with_each_change(topics_path: Path, clock: ManualClock) -> None:
    table = TopicConfigTable(topics_path, clock=clock)
    assert table.data_version == DataVersion(timestamp=0, counter=0)
    table.put(TopicConfig(topic_name="A"))
    clock.advance(5)
    table.put(TopicConfig(topic_name="B"))
    assert table.data_version == DataVersion(timestamp=clock.now_ms(), counter=2)

    table.put(TopicConfig(topic_name="B"))  # identical: not a change
    table.delete("missing")
    assert table.data_version.counter == 2

    table.persist()
    reopened = TopicConfigTable(topics_path, clock=clock)
    assert reopened.data_version.counter == 2
    reopened.delete("A")
    assert reopened.data_version.counter == 3


def test_offset_commits_bump_the_version_only_when_the_offset_moves(offsets_path: Path) -> None:
    table = ConsumerOffsetTable(offsets_path)
    table.commit("g", "T", 0, 5)
    table.commit("g", "T", 0, 5)
    assert table.data_version.counter == 1
    table.commit("g", "T", 0, 6)
    assert table.data_version.counter == 2


def test_persist_writes_only_when_dirty(topics_path: Path) -> None:
    table = TopicConfigTable(topics_path)
    assert not table.dirty
    assert table.persist() is False
    assert not topics_path.exists()  # nothing to say yet

    table.put(TopicConfig(topic_name="A"))
    assert table.dirty
    assert table.persist() is True
    assert not table.dirty
    assert table.persist() is False
    assert table.persist(force=True) is True


def test_json_layout_is_readable_and_rocketmq_shaped(topics_path: Path, clock: ManualClock) -> None:
    table = TopicConfigTable(topics_path, clock=clock)
    table.put(TopicConfig(topic_name="TopicA"))
    table.persist()
    text = topics_path.read_text()
    document = json.loads(text)
    assert text == json.dumps(document, indent=2, sort_keys=True) + "\n"
    assert document["dataVersion"] == {"timestamp": clock.now_ms(), "counter": 1}
    assert document["topicConfigTable"]["TopicA"] == {
        "topicName": "TopicA",
        "readQueueNums": 4,
        "writeQueueNums": 4,
        "perm": 6,
        "order": False,
        "topicFilterType": "SINGLE_TAG",
        "attributes": {},
    }


def test_consumer_offsets_layout(offsets_path: Path) -> None:
    table = ConsumerOffsetTable(offsets_path)
    table.commit("g1", "TopicA", 0, 12)
    table.persist()
    document = json.loads(offsets_path.read_text())
    assert document["offsetTable"] == {"TopicA@g1": {"0": 12}}


# ---------------------------------------------------------------------------- atomic writing


def test_atomic_write_leaves_no_temp_files_and_keeps_a_bak(topics_path: Path) -> None:
    table = TopicConfigTable(topics_path)
    table.put(TopicConfig(topic_name="V1"))
    table.persist()
    assert not table.store.bak_path.exists()  # first write: nothing to back up
    first = topics_path.read_bytes()

    table.put(TopicConfig(topic_name="V2"))
    table.persist()
    assert _temp_files(topics_path.parent) == []
    assert table.store.bak_path == topics_path.with_name("topics.json.bak")
    assert table.store.bak_path.read_bytes() == first
    assert set(json.loads(topics_path.read_text())["topicConfigTable"]) == {"V1", "V2"}

    table.put(TopicConfig(topic_name="V3"))
    table.persist()
    assert set(json.loads(table.store.bak_path.read_text())["topicConfigTable"]) == {"V1", "V2"}
    assert _temp_files(topics_path.parent) == []


def test_bak_survives_when_hard_links_are_not_supported(
    topics_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = TopicConfigTable(topics_path)
    table.put(TopicConfig(topic_name="V1"))
    table.persist()
    first = topics_path.read_bytes()

    def no_links(src: object, dst: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(config_store.os, "link", no_links)
    table.put(TopicConfig(topic_name="V2"))
    table.persist()
    assert table.store.bak_path.read_bytes() == first
    assert _temp_files(topics_path.parent) == []


def test_a_failed_write_leaves_the_file_intact_and_the_table_dirty(
    topics_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = TopicConfigTable(topics_path)
    table.put(TopicConfig(topic_name="V1"))
    table.persist()
    good = topics_path.read_bytes()

    real_replace = os.replace

    def disk_full(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(config_store.os, "replace", disk_full)
    table.put(TopicConfig(topic_name="V2"))
    with pytest.raises(ConfigPersistError) as info:
        table.persist()
    assert info.value.retriable is True
    assert str(topics_path) in str(info.value)
    assert topics_path.read_bytes() == good
    assert _temp_files(topics_path.parent) == []
    assert table.dirty

    monkeypatch.setattr(config_store.os, "replace", real_replace)
    assert table.persist() is True
    assert "V2" in TopicConfigTable(topics_path)


def test_leftover_temp_file_from_an_interrupted_write_is_ignored(topics_path: Path) -> None:
    table = TopicConfigTable(topics_path)
    table.put(TopicConfig(topic_name="Good"))
    table.persist()
    # A crash after the temp file was created but before os.replace: a half-written temp file.
    leftover = topics_path.with_name(".topics.json.0123456789abcdef.tmp")
    leftover.write_text('{"topicConfigTable": {"Half')

    reopened = TopicConfigTable(topics_path)
    assert [c.topic_name for c in reopened.list()] == ["Good"]
    assert not leftover.exists()
    assert topics_path.with_name("topics.json").exists()


# ------------------------------------------------------------------------------ loud failures


def test_missing_file_and_missing_bak_is_an_empty_table(topics_path: Path) -> None:
    table = TopicConfigTable(topics_path)
    assert table.list() == []
    assert table.store.loaded_from is None


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"topicConfigTable": {"A": {"topicName": "A"', "line 1 column 45"),  # truncated
        (b"", "line 1 column 1: Expecting value"),  # truncated to nothing
        (b"\x00\x00\x00\x00garbage", "line 1 column 1"),
        (b"\xff\xfe\xfa", "not UTF-8"),
        (b'{\n  "topicConfigTable": {}\n  "dataVersion": {}\n}', "line 3 column 3: Expecting ',' delimiter"),
        (b'{"topicConfigTable": {}, "topicConfigTable": {}}', "duplicate key 'topicConfigTable'"),
    ],
)
def test_corrupt_file_raises_naming_the_file_and_the_problem(
    topics_path: Path, content: bytes, problem: str
) -> None:
    topics_path.parent.mkdir(parents=True)
    topics_path.write_bytes(content)
    with pytest.raises(ConfigFileError) as info:
        TopicConfigTable(topics_path)
    message = str(info.value)
    assert message.startswith(f"{topics_path}: ")
    assert problem in message
    assert ".bak" not in message
    assert info.value.path == topics_path
    assert info.value.backup is None
    assert isinstance(info.value, OrbitError) and not info.value.retriable
    assert topics_path.read_bytes() == content  # never reset


def test_corrupt_file_with_a_bak_mentions_the_bak_and_does_not_load_it(topics_path: Path) -> None:
    table = TopicConfigTable(topics_path)
    table.put(TopicConfig(topic_name="V1"))
    table.persist()
    table.put(TopicConfig(topic_name="V2"))
    table.persist()
    topics_path.write_bytes(topics_path.read_bytes()[:40])  # torn by something outside our control

    with pytest.raises(ConfigFileError) as info:
        TopicConfigTable(topics_path)
    message = str(info.value)
    bak = topics_path.with_name("topics.json.bak")
    assert str(topics_path) in message
    assert str(bak) in message
    assert "restore" in message
    assert info.value.backup == bak


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"topicConfigTable": {"bad name": {"topicName": "bad name"}}}, "'bad name'"),
        ({"topicConfigTable": {"A": {"topicName": "A", "readQueueNums": 0}}}, "readQueueNums"),
        ({"topicConfigTable": {"A": {"topicName": "A", "perm": 8}}}, "perm 8"),
        ({"topicConfigTable": {"A": {"topicName": "A", "topicFilterType": "X"}}}, "topicFilterType"),
        ({"topicConfigTable": {"A": {"topicName": "B"}}}, "key 'A' holds the config named 'B'"),
        ({"topicConfigTable": {"A": {"topicName": "A", "readQueueNum": 4}}}, "readQueueNum"),
        ({"topicConfigTable": [], "dataVersion": {"counter": -1}}, "2 schema violations"),
        ([], "<document>"),
    ],
)
def test_schema_violations_in_topics_raise_naming_the_file(
    topics_path: Path, document: object, problem: str
) -> None:
    topics_path.parent.mkdir(parents=True)
    topics_path.write_text(json.dumps(document))
    with pytest.raises(ConfigFileError) as info:
        TopicConfigTable(topics_path)
    assert str(topics_path) in str(info.value)
    assert problem in str(info.value)


@pytest.mark.parametrize(
    ("offset_table", "problem"),
    [
        ({"TopicA@g1": {"0": -1}}, "offsetTable.TopicA@g1.0: Input should be greater than or equal to 0"),
        ({"TopicA@g1": {"-2": 1}}, "offsetTable.TopicA@g1.-2.[key]"),
        ({"TopicA": {"0": 1}}, "not of the form topic@group"),
        ({"Topic A@g1": {"0": 1}}, "'Topic A'"),
        ({"TopicA@g@1": {"0": 1}}, "'g@1'"),
    ],
)
def test_schema_violations_in_offsets_raise_naming_the_file(
    offsets_path: Path, offset_table: dict[str, object], problem: str
) -> None:
    offsets_path.parent.mkdir(parents=True)
    offsets_path.write_text(json.dumps({"offsetTable": offset_table}))
    with pytest.raises(ConfigFileError) as info:
        ConsumerOffsetTable(offsets_path)
    assert str(offsets_path) in str(info.value)
    assert problem in str(info.value)


def test_many_violations_are_summarized(offsets_path: Path) -> None:
    offsets_path.parent.mkdir(parents=True)
    offsets_path.write_text(json.dumps({"offsetTable": {"T@g": {str(q): -1 for q in range(50)}}}))
    with pytest.raises(ConfigFileError) as info:
        ConsumerOffsetTable(offsets_path)
    message = str(info.value)
    assert "50 schema violations" in message
    assert "and 45 more" in message
    assert len(message) < 1000


def test_missing_main_file_with_a_bak_loads_the_bak_with_a_warning(
    topics_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = TopicConfigTable(topics_path)
    table.put(TopicConfig(topic_name="V1"))
    table.persist()
    table.put(TopicConfig(topic_name="V2"))
    table.persist()
    topics_path.unlink()  # e.g. a crash of a rename-based writer between its two renames

    with caplog.at_level(logging.WARNING, logger="orbitmq.store.config_store"):
        reopened = TopicConfigTable(topics_path)
    assert [c.topic_name for c in reopened.list()] == ["V1"]
    assert reopened.store.loaded_from == reopened.store.bak_path
    assert any("topics.json.bak" in r.getMessage() and "missing" in r.getMessage() for r in caplog.records)

    assert reopened.dirty  # the next persist writes the main file back
    assert reopened.persist() is True
    assert [c.topic_name for c in TopicConfigTable(topics_path).list()] == ["V1"]


def test_corrupt_bak_with_missing_main_raises_naming_the_bak(topics_path: Path) -> None:
    bak = topics_path.with_name("topics.json.bak")
    bak.parent.mkdir(parents=True)
    bak.write_text("{")
    with pytest.raises(ConfigFileError) as info:
        TopicConfigTable(topics_path)
    assert str(info.value).startswith(f"{bak}: ")


# ------------------------------------------------------------------------------ input checks


def test_invalid_topic_and_group_names_are_rejected_naming_the_value() -> None:
    with pytest.raises(ValidationError, match="'bad topic'"):
        TopicConfig(topic_name="bad topic")
    with pytest.raises(ValidationError, match="128 characters"):
        TopicConfig(topic_name="T" * 128)
    with pytest.raises(ValidationError, match="'g#1'"):
        SubscriptionGroupConfig(group_name="g#1")


def test_offset_table_rejects_bad_names_and_negative_numbers(offsets_path: Path) -> None:
    table = ConsumerOffsetTable(offsets_path)
    with pytest.raises(InvalidNameError, match="'bad group'"):
        table.commit("bad group", "TopicA", 0, 1)
    with pytest.raises(InvalidNameError, match="'Topic@A'"):
        table.commit("g", "Topic@A", 0, 1)
    with pytest.raises(ValueError, match="offset must be >= 0, got -42"):
        table.commit("g", "TopicA", 0, -42)
    with pytest.raises(InvalidOffsetError, match="queue id must be >= 0, got -1"):
        table.commit("g", "TopicA", -1, 0)
    with pytest.raises(ValueError, match="got -7"):
        table.reset("g", "TopicA", {0: 1, 1: -7})
    with pytest.raises(TypeError):
        table.commit("g", "TopicA", 0, 1.5)  # type: ignore[arg-type]
    assert table.snapshot() == {}
    assert not table.dirty


def test_put_rejects_the_wrong_config_type(topics_path: Path) -> None:
    table = TopicConfigTable(topics_path)
    with pytest.raises(TypeError, match="expected a TopicConfig"):
        table.put(SubscriptionGroupConfig(group_name="g"))  # type: ignore[arg-type]


# ------------------------------------------------------------------------ generic store, threads


def test_json_config_store_on_its_own(tmp_path: Path) -> None:
    store = JsonConfigStore(tmp_path / "offsets.json", ConsumerOffsetFile, ConsumerOffsetFile)
    assert store.load() == ConsumerOffsetFile()
    value = ConsumerOffsetFile(offset_table={"T@g": {1: 2}}, data_version=DataVersion(timestamp=1, counter=1))
    store.persist(value)
    assert store.load() == value
    assert store.loaded_from == store.path


def test_concurrent_commits_and_persists_end_consistent(offsets_path: Path) -> None:
    table = ConsumerOffsetTable(offsets_path)
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                table.persist()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def committer(queue_id: int) -> None:
        for offset in range(200):
            table.commit("g", "T", queue_id, offset)

    flush_thread = threading.Thread(target=flusher)
    flush_thread.start()
    committers = [threading.Thread(target=committer, args=(q,)) for q in range(4)]
    for thread in committers:
        thread.start()
    for thread in committers:
        thread.join()
    stop.set()
    flush_thread.join()
    assert errors == []

    table.persist()
    reopened = ConsumerOffsetTable(offsets_path)
    assert reopened.offsets_of("g", "T") == {0: 199, 1: 199, 2: 199, 3: 199}
    assert reopened.data_version.counter == 800
    assert _temp_files(offsets_path.parent) == []
