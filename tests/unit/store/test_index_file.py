"""Index files and the index service, on real memory-mapped files under tmp_path."""

from __future__ import annotations

import shutil
import threading
import zlib
from pathlib import Path

import pytest

from orbitmq.common.clock import ManualClock
from orbitmq.store.dispatch import DispatchRequest
from orbitmq.store.index_file import (
    ENTRY_SIZE,
    HEADER_SIZE,
    SLOT_SIZE,
    IndexFile,
    IndexService,
    index_file_size,
    index_key,
    key_hash,
)

T0 = 1_700_000_000_000
ALL_TIME = (0, 2**62)
MSG_SIZE = 100


def _request(
    index: int,
    keys: tuple[str, ...] = (),
    *,
    unique_key: str | None = None,
    topic: str = "orders",
    timestamp_ms: int | None = None,
) -> DispatchRequest:
    """Message number ``index``: at physical offset index * MSG_SIZE, stored one second apart."""
    return DispatchRequest(
        topic=topic,
        queue_id=0,
        physical_offset=index * MSG_SIZE,
        size=MSG_SIZE,
        tags_code=0,
        store_timestamp_ms=T0 + index * 1000 if timestamp_ms is None else timestamp_ms,
        queue_offset=index,
        keys=keys,
        unique_key=unique_key,
    )


def _new_file(tmp_path: Path, slot_count: int = 64, max_entries: int = 128, **kwargs: int) -> IndexFile:
    return IndexFile(tmp_path / "index-file", slot_count, max_entries, create=True, **kwargs)


def _service(directory: Path, slot_count: int = 64, max_entries: int = 128) -> IndexService:
    return IndexService(directory, slot_count, max_entries, clock=ManualClock(T0))


# -- IndexFile -----------------------------------------------------------------------------------


def test_layout_constants_match_the_documented_format() -> None:
    assert (HEADER_SIZE, SLOT_SIZE, ENTRY_SIZE) == (40, 4, 20)
    assert index_file_size(3, 5) == 40 + 3 * 4 + 5 * 20


def test_put_lookup_round_trip(tmp_path: Path) -> None:
    index_file = _new_file(tmp_path, begin_phy_offset=1000, begin_timestamp_ms=T0)
    assert index_file.path.stat().st_size == index_file_size(64, 128)
    assert index_file.put("orders#a", 1000, T0)
    assert index_file.put("orders#b", 1100, T0 + 10)
    assert index_file.put("orders#a", 1200, T0 + 20)

    assert index_file.lookup("orders#a", 10, *ALL_TIME) == [1200, 1000]
    assert index_file.lookup("orders#b", 10, *ALL_TIME) == [1100]
    assert index_file.lookup("orders#c", 10, *ALL_TIME) == []
    assert index_file.lookup("orders#a", 1, *ALL_TIME) == [1200]
    assert index_file.entry_count == 3
    assert index_file.used_slot_count == len({key_hash("orders#a") % 64, key_hash("orders#b") % 64})
    assert (index_file.begin_phy_offset, index_file.end_phy_offset) == (1000, 1201)
    assert (index_file.begin_timestamp_ms, index_file.end_timestamp_ms) == (T0, T0 + 20)
    index_file.close()


def test_header_is_written_big_endian_on_every_put(tmp_path: Path) -> None:
    index_file = _new_file(tmp_path, begin_phy_offset=7, begin_timestamp_ms=T0)
    index_file.put("k", 7, T0 + 5000, end_phy_offset=57)
    raw = index_file.path.read_bytes()
    assert int.from_bytes(raw[0:8], "big") == T0
    assert int.from_bytes(raw[8:16], "big") == T0 + 5000
    assert int.from_bytes(raw[16:24], "big") == 7
    assert int.from_bytes(raw[24:32], "big") == 57
    assert int.from_bytes(raw[32:36], "big") == 1
    assert int.from_bytes(raw[36:40], "big") == 1
    entry = raw[HEADER_SIZE + 64 * SLOT_SIZE : HEADER_SIZE + 64 * SLOT_SIZE + ENTRY_SIZE]
    assert int.from_bytes(entry[0:4], "big") == zlib.crc32(b"k")
    assert int.from_bytes(entry[4:12], "big") == 7
    assert int.from_bytes(entry[12:16], "big") == 5  # seconds after the begin timestamp
    assert int.from_bytes(entry[16:20], "big") == 0  # end of chain
    index_file.close()


def test_first_put_sets_an_unset_begin_timestamp(tmp_path: Path) -> None:
    index_file = _new_file(tmp_path)
    index_file.put("k", 0, T0 + 123)
    assert index_file.begin_timestamp_ms == T0 + 123
    assert index_file.lookup("k", 5, T0 + 123, T0 + 123) == [0]
    index_file.close()


def test_lookup_filters_by_time_range(tmp_path: Path) -> None:
    index_file = _new_file(tmp_path, begin_timestamp_ms=T0)
    for second in range(10):
        index_file.put("orders#k", second * 100, T0 + second * 1000)

    assert index_file.lookup("orders#k", 100, T0 + 3000, T0 + 5000) == [500, 400, 300]
    assert index_file.lookup("orders#k", 100, T0 + 9000, T0 + 20_000) == [900]
    assert index_file.lookup("orders#k", 100, T0 + 20_000, T0 + 30_000) == []
    assert index_file.lookup("orders#k", 2, T0, T0 + 9000) == [900, 800]
    index_file.close()


def test_time_filter_is_conservative_within_one_second(tmp_path: Path) -> None:
    """The index keeps whole seconds: a message is never missed, a neighbour may be included."""
    index_file = _new_file(tmp_path, begin_timestamp_ms=T0)
    index_file.put("k", 1, T0 + 1700)  # stored as second 1
    assert index_file.lookup("k", 5, T0 + 1700, T0 + 1700) == [1]
    assert index_file.lookup("k", 5, T0 + 1999, T0 + 5000) == [1]
    assert index_file.lookup("k", 5, T0 + 2000, T0 + 5000) == []
    assert index_file.lookup("k", 5, 0, T0 + 999) == []
    index_file.close()


def test_timestamps_before_the_begin_timestamp_still_match(tmp_path: Path) -> None:
    index_file = _new_file(tmp_path, begin_timestamp_ms=T0)
    index_file.put("k", 1, T0 - 2500)  # the clock stepped back
    assert index_file.lookup("k", 5, T0 - 2500, T0 - 2500) == [1]
    assert index_file.lookup("k", 5, T0, T0 + 1000) == []
    index_file.close()


def test_hash_collisions_in_a_tiny_slot_table(tmp_path: Path) -> None:
    keys = [f"orders#key-{i}" for i in range(200)]
    assert len({key_hash(k) for k in keys}) == len(keys)  # distinct CRCs: no candidate may leak
    index_file = _new_file(tmp_path, slot_count=2, max_entries=1000, begin_timestamp_ms=T0)
    for round_ in range(3):
        for i, key in enumerate(keys):
            index_file.put(key, round_ * 10_000 + i, T0 + round_)

    assert index_file.used_slot_count <= 2
    for i, key in enumerate(keys):
        assert index_file.lookup(key, 10, *ALL_TIME) == [20_000 + i, 10_000 + i, i]
    index_file.close()


def test_identical_hashes_are_all_returned_as_candidates(tmp_path: Path) -> None:
    plum, buck = index_key("orders", "plumless"), index_key("orders", "buckeroo")
    assert key_hash(plum) == key_hash(buck)  # a known CRC-32 collision
    index_file = _new_file(tmp_path, begin_timestamp_ms=T0)
    index_file.put(plum, 100, T0)
    index_file.put(buck, 200, T0)
    assert index_file.lookup(plum, 10, *ALL_TIME) == [200, 100]
    assert index_file.lookup(buck, 10, *ALL_TIME) == [200, 100]
    index_file.close()


def test_file_reports_full(tmp_path: Path) -> None:
    index_file = _new_file(tmp_path, slot_count=4, max_entries=2)
    assert index_file.put("a", 0, T0) and index_file.put("b", 1, T0)
    assert index_file.is_full and index_file.remaining == 0
    assert not index_file.put("c", 2, T0)
    assert index_file.entry_count == 2
    assert index_file.lookup("c", 5, *ALL_TIME) == []
    index_file.close()


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    index_file = _new_file(tmp_path, begin_phy_offset=0, begin_timestamp_ms=T0)
    for i in range(50):
        index_file.put(f"k{i % 7}", i * 10, T0 + i * 1000)
    index_file.flush()
    index_file.close()
    index_file.close()  # idempotent

    reopened = IndexFile(tmp_path / "index-file", 64, 128, create=False)
    assert reopened.entry_count == 50
    assert reopened.end_phy_offset == 491
    assert reopened.end_timestamp_ms == T0 + 49_000
    assert reopened.lookup("k3", 100, *ALL_TIME) == [i * 10 for i in reversed(range(50)) if i % 7 == 3]
    assert reopened.put("k3", 5000, T0 + 60_000)
    assert reopened.lookup("k3", 1, *ALL_TIME) == [5000]
    reopened.delete()
    assert not (tmp_path / "index-file").exists()


def test_open_with_the_wrong_geometry_is_refused(tmp_path: Path) -> None:
    _new_file(tmp_path).close()
    with pytest.raises(ValueError, match="slot_count=32"):
        IndexFile(tmp_path / "index-file", 32, 128, create=False)
    with pytest.raises(FileExistsError):
        IndexFile(tmp_path / "index-file", 64, 128, create=True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"slot_count": 0, "max_entries": 10}, "slot_count=0"),
        ({"slot_count": 10, "max_entries": 0}, "max_entries=0"),
        ({"slot_count": -5, "max_entries": 10}, "slot_count=-5"),
        ({"slot_count": 10, "max_entries": 10, "begin_phy_offset": -1}, "begin_phy_offset=-1"),
        ({"slot_count": 10, "max_entries": 10, "begin_timestamp_ms": -3}, "begin_timestamp_ms=-3"),
    ],
)
def test_index_file_rejects_bad_arguments(tmp_path: Path, kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        IndexFile(tmp_path / "f", create=True, **kwargs)
    assert not (tmp_path / "f").exists()


def test_put_and_lookup_reject_bad_arguments(tmp_path: Path) -> None:
    index_file = _new_file(tmp_path, begin_timestamp_ms=T0)
    with pytest.raises(ValueError, match="phy_offset=-1"):
        index_file.put("k", -1, T0)
    with pytest.raises(ValueError, match=r"store_timestamp_ms=\d+.*2\*\*31 seconds"):
        index_file.put("k", 1, T0 + 2**31 * 1000)
    with pytest.raises(ValueError, match="max_num=0"):
        index_file.lookup("k", 0, *ALL_TIME)
    with pytest.raises(ValueError, match="begin_ms=10"):
        index_file.lookup("k", 1, 10, 5)
    assert index_file.entry_count == 0
    index_file.close()


# -- IndexService --------------------------------------------------------------------------------


def test_service_builds_and_queries(tmp_path: Path) -> None:
    service = _service(tmp_path / "index")
    assert service.load(None) == 0
    service.build(_request(0, ("order-1", "customer-9"), unique_key="U0"))
    service.build(_request(1, ("order-2",)))
    service.build(_request(2, ("order-1",), unique_key="U2"))
    service.build(_request(3, ("order-1",), topic="payments"))

    assert service.query("orders", "order-1", 10, *ALL_TIME) == [200, 0]
    assert service.query("orders", "customer-9", 10, *ALL_TIME) == [0]
    assert service.query("orders", "U2", 10, *ALL_TIME) == [200]
    assert service.query("payments", "order-1", 10, *ALL_TIME) == [300]
    assert service.query("orders", "order-1", 1, *ALL_TIME) == [200]
    assert service.query("orders", "order-1", 10, T0 + 1000, T0 + 1500) == []
    assert service.query("orders", "order-1", 10, T0 + 2000, T0 + 2000) == [200]
    assert service.end_phy_offset == 4 * MSG_SIZE
    service.close()


def test_service_skips_empty_and_repeated_keys(tmp_path: Path) -> None:
    service = _service(tmp_path)
    service.load(None)
    service.build(_request(0, ("a", "", "a"), unique_key="a"))
    service.build(_request(1, ("",)))
    (index_file,) = service.files
    assert index_file.entry_count == 1
    assert service.query("orders", "a", 10, *ALL_TIME) == [0]
    assert service.query("orders", "", 10, *ALL_TIME) == []
    service.close()


def test_message_without_keys_advances_the_end(tmp_path: Path) -> None:
    service = _service(tmp_path)
    service.load(None)
    service.build(_request(0))
    assert service.end_phy_offset == MSG_SIZE
    assert service.files[0].entry_count == 0
    service.build(_request(1, ("k",)))
    service.build(_request(2))
    assert service.end_phy_offset == 3 * MSG_SIZE
    assert service.flush() == 3 * MSG_SIZE
    service.close()

    reopened = _service(tmp_path)
    assert reopened.load(None) == 3 * MSG_SIZE
    reopened.build(_request(1, ("k",)))  # replayed: skipped
    assert reopened.query("orders", "k", 10, *ALL_TIME) == [MSG_SIZE]
    reopened.close()


def test_replaying_the_same_requests_does_not_duplicate(tmp_path: Path) -> None:
    service = _service(tmp_path, slot_count=8, max_entries=4)
    requests = [_request(i, (f"k{i % 3}",), unique_key=f"u{i}") for i in range(10)]
    service.load(None)
    for request in requests:
        service.build(request)
    files_before = [f.entry_count for f in service.files]
    for request in requests:
        service.build(request)
    for request in requests[5:]:
        service.build(request)
    assert [f.entry_count for f in service.files] == files_before
    assert service.query("orders", "k0", 100, *ALL_TIME) == [900, 600, 300, 0]
    assert service.query("orders", "u4", 100, *ALL_TIME) == [400]
    service.close()


def test_full_file_rolls_and_queries_span_files(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    service = IndexService(tmp_path, slot_count=4, max_entries=3, clock=clock)
    service.load(None)
    for i in range(7):
        clock.advance(1)
        service.build(_request(i, ("shared", f"own-{i}")))

    files = service.files
    assert [f.entry_count for f in files] == [2, 2, 2, 2, 2, 2, 2]  # a message's keys stay together
    assert [f.begin_phy_offset for f in files] == [i * MSG_SIZE for i in range(7)]
    assert [f.end_phy_offset for f in files] == [(i + 1) * MSG_SIZE for i in range(7)]
    assert files[3].begin_timestamp_ms == T0 + 3000
    assert service.query("orders", "shared", 100, *ALL_TIME) == [600, 500, 400, 300, 200, 100, 0]
    assert service.query("orders", "shared", 3, *ALL_TIME) == [600, 500, 400]
    assert service.query("orders", "shared", 100, T0 + 1000, T0 + 2000) == [200, 100]
    assert service.query("orders", "own-4", 100, *ALL_TIME) == [400]
    service.close()


def test_rolling_without_space_for_one_message(tmp_path: Path) -> None:
    service = _service(tmp_path, slot_count=4, max_entries=2)
    service.load(None)
    service.build(_request(0, ("a", "b", "c", "d", "e")))
    service.build(_request(1, ("a",)))
    # A message with more keys than a file holds is split; the files it does not finish end at it.
    assert [f.entry_count for f in service.files] == [2, 2, 2]
    assert [f.end_phy_offset for f in service.files] == [0, 0, 2 * MSG_SIZE]
    assert service.query("orders", "a", 10, *ALL_TIME) == [MSG_SIZE, 0]
    assert service.query("orders", "e", 10, *ALL_TIME) == [0]
    service.close()


def test_file_names_are_timestamps_with_suffixes_in_age_order(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    service = IndexService(tmp_path, slot_count=4, max_entries=1, clock=clock)
    service.load(None)
    service.build(_request(0, ("a",)))
    service.build(_request(1, ("a",)))  # same millisecond
    clock.advance(-60_000)  # the clock steps back
    service.build(_request(2, ("a",)))
    clock.advance(120_000)
    service.build(_request(3, ("a",)))
    names = [f.path.name for f in service.files]
    assert names == ["20231114221320000", "20231114221320000_1", "20231114221320000_2", "20231114221420000"]
    service.close()

    reopened = IndexService(tmp_path, slot_count=4, max_entries=1, clock=clock)
    assert reopened.load(None) == 4 * MSG_SIZE
    assert [f.path.name for f in reopened.files] == names
    assert reopened.query("orders", "a", 10, *ALL_TIME) == [300, 200, 100, 0]
    reopened.close()


def test_reopen_after_close_keeps_everything(tmp_path: Path) -> None:
    service = _service(tmp_path, slot_count=16, max_entries=10)
    service.load(None)
    for i in range(25):
        service.build(_request(i, (f"k{i % 4}",)))
    service.close()
    service.close()  # idempotent

    reopened = _service(tmp_path, slot_count=16, max_entries=10)
    assert reopened.load(None) == 25 * MSG_SIZE
    assert len(reopened.files) == 3
    assert reopened.query("orders", "k1", 100, *ALL_TIME) == [
        i * MSG_SIZE for i in range(24, -1, -1) if i % 4 == 1
    ]
    reopened.build(_request(25, ("k1",)))
    assert reopened.query("orders", "k1", 1, *ALL_TIME) == [2500]
    reopened.close()


def test_unclean_load_deletes_files_past_the_checkpoint(tmp_path: Path) -> None:
    service = _service(tmp_path, slot_count=8, max_entries=4)
    service.load(None)
    for i in range(6):
        service.build(_request(i, ("k",)))
    checkpoint = service.flush()
    assert checkpoint == 6 * MSG_SIZE
    for i in range(6, 10):
        service.build(_request(i, ("k",)))
    assert [f.end_phy_offset for f in service.files] == [400, 800, 1000]
    service.close()  # stands in for a crash: only the headers and the checkpoint matter

    recovered = _service(tmp_path, slot_count=8, max_entries=4)
    replay_from = recovered.load(checkpoint)
    assert replay_from == 400  # the second file (400..800) ended past the checkpoint
    assert [f.end_phy_offset for f in recovered.files] == [400]
    assert len(list(tmp_path.iterdir())) == 1
    assert recovered.query("orders", "k", 100, *ALL_TIME) == [300, 200, 100, 0]

    for i in range(replay_from // MSG_SIZE - 2, 10):  # the dispatcher replays (a little early, too)
        recovered.build(_request(i, ("k",)))
    assert recovered.query("orders", "k", 100, *ALL_TIME) == [i * MSG_SIZE for i in range(9, -1, -1)]
    recovered.close()


def test_unclean_load_keeps_files_within_the_checkpoint(tmp_path: Path) -> None:
    service = _service(tmp_path, slot_count=8, max_entries=4)
    service.load(None)
    for i in range(8):
        service.build(_request(i))
    checkpoint = service.flush()
    service.close()

    recovered = _service(tmp_path, slot_count=8, max_entries=4)
    assert recovered.load(checkpoint + 50) == 8 * MSG_SIZE
    assert recovered.flush() == 8 * MSG_SIZE
    recovered.close()


def test_unclean_load_of_a_single_unflushed_file_replays_from_its_begin(tmp_path: Path) -> None:
    service = _service(tmp_path)
    service.load(None)
    for i in range(3, 6):
        service.build(_request(i, ("k",)))
    service.close()

    recovered = _service(tmp_path)
    assert recovered.load(0) == 300
    assert recovered.files == ()
    assert recovered.query("orders", "k", 10, *ALL_TIME) == []
    recovered.close()


def test_unclean_load_drops_a_file_whose_header_never_reached_disk(tmp_path: Path) -> None:
    service = _service(tmp_path, slot_count=8, max_entries=2)
    service.load(None)
    for i in range(4):
        service.build(_request(i, ("k",)))
    first, second = service.files
    service.close()
    second.path.write_bytes(bytes(index_file_size(8, 2)))  # zeros: a header page that was lost

    recovered = _service(tmp_path, slot_count=8, max_entries=2)
    assert recovered.load(10_000) == 200
    assert [f.path for f in recovered.files] == [first.path]
    recovered.close()


def test_unclean_load_repairs_slots_newer_than_the_header(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service = _service(tmp_path, slot_count=4)
    service.load(None)
    for i in range(5):
        service.build(_request(i, (f"k{i % 2}",)))
    checkpoint = service.flush()
    (index_file,) = service.files
    durable_header = index_file.path.read_bytes()[:HEADER_SIZE]
    for i in range(5, 9):
        service.build(_request(i, (f"k{i % 2}",)))
    service.close()
    with index_file.path.open("r+b") as raw:  # the crash lost the header page only
        raw.write(durable_header)

    recovered = _service(tmp_path, slot_count=4)
    assert recovered.load(checkpoint) == 500
    assert "rebuilding 5 entries" in caplog.text
    assert recovered.query("orders", "k0", 10, *ALL_TIME) == [400, 200, 0]
    assert recovered.query("orders", "k1", 10, *ALL_TIME) == [300, 100]
    for i in range(5, 9):
        recovered.build(_request(i, (f"k{i % 2}",)))
    assert recovered.query("orders", "k0", 10, *ALL_TIME) == [800, 600, 400, 200, 0]
    assert recovered.query("orders", "k1", 10, *ALL_TIME) == [700, 500, 300, 100]
    recovered.close()


def test_load_removes_empty_files_and_ignores_foreign_names(tmp_path: Path) -> None:
    (tmp_path / "20231114221320000").touch()  # crashed between create and truncate
    (tmp_path / "notes.txt").write_text("not an index file")
    service = _service(tmp_path)
    assert service.load(None) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    service.close()


def test_flush_reports_the_durable_offset(tmp_path: Path) -> None:
    service = _service(tmp_path, slot_count=8, max_entries=3)
    service.load(None)
    assert service.flush() == 0
    service.build(_request(0, ("a",)))
    service.build(_request(1, ("b",)))
    assert service.flush() == 200
    assert service.flush() == 200
    service.close()


def test_flush_from_another_thread_while_building(tmp_path: Path) -> None:
    service = _service(tmp_path, slot_count=64, max_entries=50)
    service.load(None)
    done = threading.Event()
    flushed: list[int] = []

    def flusher() -> None:
        while not done.is_set():
            flushed.append(service.flush())

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for i in range(300):
            service.build(_request(i, (f"k{i % 10}",)))
    finally:
        done.set()
        thread.join()
    assert flushed == sorted(flushed)
    assert service.flush() == 300 * MSG_SIZE
    assert len(service.query("orders", "k3", 1000, *ALL_TIME)) == 30
    service.close()


def test_delete_before_never_deletes_the_newest_file(tmp_path: Path) -> None:
    service = _service(tmp_path, slot_count=8, max_entries=2)
    service.load(None)
    for i in range(6):
        service.build(_request(i, ("k",)))
    assert [f.end_phy_offset for f in service.files] == [200, 400, 600]

    assert service.delete_before(100) == 0
    assert service.delete_before(399) == 1  # [0, 200) is gone from the commit log
    assert [f.begin_phy_offset for f in service.files] == [200, 400]
    assert service.delete_before(10_000) == 1  # the newest file stays
    assert len(service.files) == 1
    assert len(list(tmp_path.iterdir())) == 1
    assert service.query("orders", "k", 10, *ALL_TIME) == [500, 400]
    service.close()


def test_service_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="slot_count=0"):
        IndexService(tmp_path, slot_count=0)
    with pytest.raises(ValueError, match="max_entries=-1"):
        IndexService(tmp_path, max_entries=-1)
    service = _service(tmp_path)
    with pytest.raises(RuntimeError, match="load"):
        service.build(_request(0, ("k",)))
    with pytest.raises(ValueError, match="flushed_phy_offset=-1"):
        service.load(-1)
    service.load(None)
    with pytest.raises(RuntimeError, match="already loaded"):
        service.load(None)
    with pytest.raises(ValueError, match="max_num=0"):
        service.query("orders", "k", 0, *ALL_TIME)
    with pytest.raises(ValueError, match="begin_ms=5"):
        service.query("orders", "k", 1, 5, 4)
    with pytest.raises(ValueError, match="min_phy_offset=-2"):
        service.delete_before(-2)
    service.close()
    with pytest.raises(RuntimeError, match="closed"):
        service.query("orders", "k", 1, *ALL_TIME)


@pytest.mark.parametrize(("keyed", "replay_from"), [({0}, 400), ({0, 5}, 0)])
def test_a_crash_after_keyless_passes_loses_no_key_and_doubles_none(
    tmp_path: Path, keyed: set[int], replay_from: int
) -> None:
    """A pass with nothing to index leaves the header to flush(), so after a crash the header
    on disk may lag behind the log: replay starts at or before it, re-marks the keyless
    messages, and every key is found once. (A file whose header claims more than the
    checkpoint is dropped and rebuilt from its begin, as before.)"""
    live, crashed = tmp_path / "live", tmp_path / "crashed"

    def build(service: IndexService, i: int) -> None:
        requests = [_request(i, ("k",))] if i in keyed else []
        service.build_batch(requests, (i + 1) * MSG_SIZE, T0 + i * 1000)

    service = _service(live)
    service.load(None)
    for i in range(4):
        build(service, i)
    checkpoint = service.flush()
    assert checkpoint == 4 * MSG_SIZE
    for i in range(4, 8):
        build(service, i)
    shutil.copytree(live, crashed)  # what a SIGKILL leaves: the mapped pages, no close
    service.close()

    recovered = _service(crashed)
    assert recovered.load(checkpoint) == replay_from
    for i in range(replay_from // MSG_SIZE, 8):  # the dispatcher replays from there
        build(recovered, i)
    assert recovered.query("orders", "k", 10, *ALL_TIME) == sorted(
        (i * MSG_SIZE for i in keyed), reverse=True
    )
    assert recovered.flush() == 8 * MSG_SIZE
    recovered.close()
