from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orbitmq.client.offset_store import (
    DEFAULT_INSTANCE_NAME,
    LOCK_FILE_NAME,
    OFFSETS_ROOT_ENV,
    LocalFileOffsetStore,
    OffsetFileInUseError,
    OffsetStore,
    RemoteOffsetStoreState,
    default_offsets_root,
    local_client_id,
    local_offsets_path,
)
from orbitmq.client.queue import MessageQueue
from orbitmq.store.config_store import ConfigFileError

Q0 = MessageQueue("TopicTest", "broker-a", 0)
Q1 = MessageQueue("TopicTest", "broker-a", 1)
Q2 = MessageQueue("TopicTest", "broker-b", 0)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return local_offsets_path(tmp_path, "10.0.0.1@4711", "GID_test")


def test_both_stores_have_the_interface(path: Path) -> None:
    stores: list[OffsetStore] = [LocalFileOffsetStore(path), RemoteOffsetStoreState()]
    for store in stores:
        store.load()
        store.update(Q0, 5)
        assert store.read(Q0, from_memory=True) == 5
        assert store.snapshot() == {Q0: 5}
        store.remove(Q0)
        assert store.read(Q0, from_memory=True) == -1


# ------------------------------------------------------------------------------- local file


def test_local_path_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert local_offsets_path(tmp_path, "c1", "G") == tmp_path / "c1" / "G" / "offsets.json"
    for bad in ("", "..", "a/b"):
        with pytest.raises(ValueError, match="client id"):
            local_offsets_path(tmp_path, bad, "G")
    with pytest.raises(ValueError, match="group"):
        local_offsets_path(tmp_path, "c1", "bad/group")
    monkeypatch.setenv(OFFSETS_ROOT_ENV, str(tmp_path / "root"))
    assert default_offsets_root() == tmp_path / "root"
    store = LocalFileOffsetStore.for_client("c1", "G")
    assert store.path == tmp_path / "root" / "c1" / "G" / "offsets.json"


def test_local_client_id_is_host_and_instance_name_never_the_pid() -> None:
    """What names the file must survive a restart: a new pid must find the old file."""
    host = socket.gethostname()
    assert local_client_id(None) == local_client_id("") == f"{host}@{DEFAULT_INSTANCE_NAME}"
    assert local_client_id("audit-1") == f"{host}@audit-1"
    assert str(os.getpid()) not in local_client_id(None).removeprefix(host)


def test_a_second_claim_in_this_process_is_refused_until_release(path: Path) -> None:
    first, second = LocalFileOffsetStore(path), LocalFileOffsetStore(path)
    first.claim()
    first.claim()  # idempotent
    with pytest.raises(OffsetFileInUseError, match=rf"{path}.*pid {os.getpid()}, this process") as refused:
        second.claim()
    assert refused.value.holder_pid == os.getpid() and refused.value.retriable
    first.release()
    second.claim()
    second.release()
    second.release()  # nothing held: nothing to do


_HOLD = """
import sys, time
from orbitmq.client.offset_store import LocalFileOffsetStore
LocalFileOffsetStore(sys.argv[1]).claim()
print("held", flush=True)
time.sleep(60)
"""


def test_a_claim_held_by_another_process_is_refused_and_freed_when_it_is_killed(path: Path) -> None:
    """The kernel drops a flock when its holder dies, so a SIGKILLed consumer never blocks its
    restart, while a live one in another process is named."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(OffsetFileInUseError, match=rf"pid {holder.pid}\)") as refused:
            LocalFileOffsetStore(path).claim()
        assert refused.value.holder_pid == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    store = LocalFileOffsetStore(path)
    store.claim()
    assert (path.parent / LOCK_FILE_NAME).read_text() == f"{os.getpid()}\n"
    store.release()


def test_local_round_trip_across_reopen(path: Path) -> None:
    store = LocalFileOffsetStore(path)
    store.load()  # no file yet: no offsets
    assert store.snapshot() == {}
    store.update(Q0, 100)
    store.update(Q1, 7)
    store.update(Q2, 0)
    assert store.persist([Q0, Q1, Q2]) == {}
    assert path.is_file()

    reopened = LocalFileOffsetStore(path)
    assert reopened.read(Q0, from_memory=True) == -1  # nothing read before load()
    reopened.load()
    assert reopened.snapshot() == {Q0: 100, Q1: 7, Q2: 0}
    on_disk = json.loads(path.read_text())
    assert on_disk["offsetTable"][0] == {
        "topic": "TopicTest",
        "brokerName": "broker-a",
        "queueId": 0,
        "offset": 100,
    }


def test_local_keeps_a_backup_and_leaves_no_temp_files(path: Path) -> None:
    store = LocalFileOffsetStore(path)
    store.update(Q0, 1)
    store.persist([Q0])
    store.update(Q0, 2)
    store.persist([Q0])
    assert json.loads(path.with_name("offsets.json.bak").read_text())["offsetTable"][0]["offset"] == 1
    assert json.loads(path.read_text())["offsetTable"][0]["offset"] == 2
    assert sorted(p.name for p in path.parent.iterdir()) == ["offsets.json", "offsets.json.bak"]


def test_local_persist_writes_only_when_changed(path: Path) -> None:
    store = LocalFileOffsetStore(path)
    store.update(Q0, 1)
    store.persist([Q0])
    inode = path.stat().st_ino  # every write replaces the file, so a new inode means a write
    store.persist([Q0])
    store.update(Q0, 1)  # same value: still clean
    store.persist([Q0])
    assert path.stat().st_ino == inode
    store.update(Q0, 2)
    store.persist([Q0])
    assert path.stat().st_ino != inode


def test_local_persist_writes_queues_missing_from_this_rebalance(path: Path) -> None:
    store = LocalFileOffsetStore(path)
    store.update(Q0, 10)
    store.update(Q1, 20)
    store.persist([Q0])  # Q1 missing from the route just now: its offset must survive
    reopened = LocalFileOffsetStore(path)
    reopened.load()
    assert reopened.snapshot() == {Q0: 10, Q1: 20}


def test_increase_only(path: Path) -> None:
    for store in (LocalFileOffsetStore(path), RemoteOffsetStoreState()):
        store.update(Q0, 50)
        store.update(Q0, 40)  # a late consume task reporting an older offset
        assert store.read(Q0, from_memory=True) == 50
        store.update(Q0, 60)
        assert store.read(Q0, from_memory=True) == 60
        store.update(Q0, 10, increase_only=False)  # an offset reset
        assert store.read(Q0, from_memory=True) == 10


@pytest.mark.parametrize("offset", [-1, True, 1.5])
def test_update_rejects_bad_offsets(offset: object) -> None:
    with pytest.raises(ValueError, match="offset"):
        RemoteOffsetStoreState().update(Q0, offset)  # type: ignore[arg-type]


def test_update_rejects_non_queues() -> None:
    with pytest.raises(TypeError, match="MessageQueue"):
        RemoteOffsetStoreState().update(("TopicTest", "broker-a", 0), 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "line 1"),
        ('{"offsetTable": [{"topic": "T", "brokerName": "b", "queueId": 0, "offset": -5}]}', "offset"),
        ('{"offsetTable": [{"topic": "T", "brokerName": "b", "queueId": 0}]}', "offset"),
        ('{"offsets": []}', "offsets"),
        (
            '{"offsetTable": [{"topic": "T", "brokerName": "b", "queueId": 0, "offset": 1},'
            ' {"topic": "T", "brokerName": "b", "queueId": 0, "offset": 2}]}',
            "more than once",
        ),
    ],
)
def test_corrupt_file_is_a_clear_error_naming_it(path: Path, content: str, problem: str) -> None:
    path.parent.mkdir(parents=True)
    path.write_text(content)
    store = LocalFileOffsetStore(path)
    with pytest.raises(ConfigFileError, match=problem) as info:
        store.load()
    assert str(path) in str(info.value)
    assert path.read_text() == content  # never silently replaced
    with pytest.raises(ConfigFileError):
        store.read(Q0, from_memory=False)


def test_local_read_from_file_updates_memory(path: Path) -> None:
    writer = LocalFileOffsetStore(path)
    writer.update(Q0, 33)
    writer.persist([Q0])
    reader = LocalFileOffsetStore(path)
    assert reader.read(Q0, from_memory=True) == -1
    assert reader.read(Q0, from_memory=False) == 33
    assert reader.read(Q0, from_memory=True) == 33
    assert reader.read(Q1, from_memory=False) == -1


def test_local_remove_takes_the_queue_out_of_the_file(path: Path) -> None:
    store = LocalFileOffsetStore(path)
    store.update(Q0, 1)
    store.update(Q1, 2)
    store.persist([Q0, Q1])
    store.remove(Q1)
    assert store.snapshot() == {Q0: 1}
    store.persist([Q0])
    reopened = LocalFileOffsetStore(path)
    reopened.load()
    assert reopened.snapshot() == {Q0: 1}


def test_local_loads_the_backup_when_the_main_file_is_missing(path: Path) -> None:
    store = LocalFileOffsetStore(path)
    store.update(Q0, 1)
    store.persist([Q0])
    store.update(Q0, 2)
    store.persist([Q0])
    path.unlink()
    recovered = LocalFileOffsetStore(path)
    recovered.load()
    assert recovered.snapshot() == {Q0: 1}
    recovered.persist([Q0])  # written back to the main file though unchanged in memory
    assert json.loads(path.read_text())["offsetTable"][0]["offset"] == 1


def test_local_concurrent_updates_and_persists(path: Path) -> None:
    store = LocalFileOffsetStore(path)
    queues = [MessageQueue("TopicTest", "broker-a", i) for i in range(4)]

    def consume(mq: MessageQueue) -> None:
        for offset in range(1, 201):
            store.update(mq, offset)

    def persist() -> None:
        for _ in range(20):
            store.persist(queues)

    threads = [threading.Thread(target=consume, args=(mq,)) for mq in queues]
    threads.append(threading.Thread(target=persist))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    store.persist(queues)
    reopened = LocalFileOffsetStore(path)
    reopened.load()
    assert reopened.snapshot() == dict.fromkeys(queues, 200)


# ------------------------------------------------------------------------------- clustering


def test_remote_dirty_tracking() -> None:
    state = RemoteOffsetStoreState()
    state.update(Q0, 10)
    state.update(Q1, 20)
    assert state.dirty_offsets() == {Q0: 10, Q1: 20}
    assert state.persist([Q0]) == {Q0: 10}  # only the queues asked for
    state.mark_persisted(Q0, 10)
    assert state.dirty_offsets() == {Q1: 20}
    state.update(Q0, 15)  # consumption moved on after the commit was sent
    state.mark_persisted(Q0, 10)  # a late acknowledgement of the older value
    assert state.dirty_offsets() == {Q0: 15, Q1: 20}
    state.mark_persisted(Q0, 15)
    state.mark_persisted(Q1, 20)
    assert state.dirty_offsets() == {}
    assert state.persist([Q0, Q1]) == {}


def test_remote_remove_forgets_offset_and_dirtiness() -> None:
    state = RemoteOffsetStoreState()
    state.update(Q0, 10)
    state.remove(Q0)
    assert state.dirty_offsets() == {}
    state.mark_persisted(Q0, 10)  # acknowledgement after the queue was dropped: ignored
    assert state.snapshot() == {}
    state.update(Q0, 12)
    assert state.dirty_offsets() == {Q0: 12}


def test_remote_read_from_store_is_unknown_here() -> None:
    state = RemoteOffsetStoreState()
    state.load()
    state.update(Q0, 10)
    assert state.read(Q0, from_memory=True) == 10
    assert state.read(Q0, from_memory=False) == -1  # the broker is the store: ask it
