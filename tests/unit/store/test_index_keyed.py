"""A column batch's keys indexed in one piece (``_native.index_put``) against the Python path,
key by key (:meth:`IndexFile.put`): the same files, byte for byte, on real mapped files."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from orbitmq.common.clock import ManualClock
from orbitmq.native import NATIVE
from orbitmq.store import index_file
from orbitmq.store.dispatch import KeyedBatch
from orbitmq.store.index_file import IndexFile, IndexService

pytestmark = pytest.mark.skipif(NATIVE is None, reason="orbitmq._native is not built (or turned off)")

T0 = 1_700_000_000_000
ALL_TIME = (0, 2**62)
SIZE = 300

TRICKY_KEYS: list[tuple[str | None, str | None]] = [
    ("order-1", "U1"),
    (None, "U2"),
    ("a b  c ", None),  # pieces between spaces; empty ones dropped
    ("dup dup x dup", "x"),  # each key once, the unique key too
    ("", ""),  # nothing to index, but the message is seen
    ("é 注文 ünï", "UNIQ-é"),  # UTF-8 hashed, split on ASCII spaces only
    (" ".join(f"k{n}" for n in range(70)), "U70"),  # more keys than the C path takes
    ("same", "same"),
]


def _batch(first: int, keys: list[tuple[str | None, str | None]], *, topic: str = "orders") -> KeyedBatch:
    """Messages ``first``, ``first + 1``, ... at ``SIZE`` bytes apart, every one keyed."""
    count = len(keys)
    offsets = [(first + n) * SIZE for n in range(count)]
    return KeyedBatch(
        topic,
        2,
        [(n, raw, unique) for n, (raw, unique) in enumerate(keys)],
        offsets,
        [SIZE] * count,
        T0 + first * 1000,
        list(range(first, first + count)),
        0,
    )


def _index(
    directory: Path, batches: list[KeyedBatch], *, one_by_one: bool, max_entries: int = 40
) -> IndexService:
    service = IndexService(directory, slot_count=16, max_entries=max_entries, clock=ManualClock(T0))
    service.load(None)
    for batch in batches:
        service.build_batch(batch.requests() if one_by_one else (batch,))
    return service


def _files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def _random_keys(rng: random.Random, count: int) -> list[tuple[str | None, str | None]]:
    words = ["a", "b", "order", "é", "", "x y", "  "]
    return [
        (
            rng.choice([None, " ".join(rng.choice(words) for _ in range(rng.randrange(4)))]),
            rng.choice([None, "", f"U{rng.randrange(50)}", "a"]),
        )
        for _ in range(count)
    ]


def test_the_extension_indexes_keyed_batches() -> None:
    """A build whose index layout the index file does not recognise would quietly index key by
    key in Python."""
    assert index_file._INDEX_PUT is not None


def test_a_keyed_batch_writes_the_files_put_writes_key_by_key(tmp_path: Path) -> None:
    """Rolls (40 entries a file), skipped replays, the fallback for a message with 71 keys, and
    every kind of key: the files (header, slots, entries) and every lookup are the same."""
    rng = random.Random(24)
    batches, first = [], 0
    for keys in (TRICKY_KEYS, *(_random_keys(rng, size) for size in (1, 8, 32, 3, 17))):
        batches.append(_batch(first, keys))
        first += len(keys)
    batches.append(batches[2])  # replayed after a crash: nothing twice
    fast = _index(tmp_path / "c", batches, one_by_one=False)
    python = _index(tmp_path / "py", batches, one_by_one=True)
    try:
        assert len(_files(tmp_path / "c")) >= 3
        assert _files(tmp_path / "c") == _files(tmp_path / "py")
        for key in ("order-1", "U2", "b", "c", "dup", "x", "注文", "k69", "U70", "same", "a", "order"):
            assert fast.query("orders", key, 100, *ALL_TIME) == python.query("orders", key, 100, *ALL_TIME)
        assert fast.query("orders", "注文", 10, *ALL_TIME) == [5 * SIZE]
        assert fast.end_phy_offset == python.end_phy_offset == first * SIZE
    finally:
        fast.close()
        python.close()


def test_a_batch_that_fits_takes_the_c_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No key of an everyday batch goes through IndexFile.put (the Python path's cost)."""
    service = _index(tmp_path / "warm", [_batch(0, [("k0", "U0")])], one_by_one=False, max_entries=200)

    def python_put(*_: object, **__: object) -> bool:
        raise AssertionError("a key went the Python way")

    monkeypatch.setattr(IndexFile, "put", python_put)
    keys = [(f"order-{n} tag", f"U{n}") for n in range(1, 33)]
    service.build_batch((_batch(1, keys),), 33 * SIZE, T0 + 1000)
    try:
        assert service.query("orders", "order-7", 10, *ALL_TIME) == [7 * SIZE]
        assert service.query("orders", "U32", 10, *ALL_TIME) == [32 * SIZE]
        assert len(service.query("orders", "tag", 100, *ALL_TIME)) == 32
        assert service.files[-1].entry_count == 2 + 32 * 3
    finally:
        service.close()


def test_without_the_extension_a_keyed_batch_is_indexed_key_by_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = _batch(0, TRICKY_KEYS)
    reference = _files_of(tmp_path / "c", batch)
    monkeypatch.setattr(index_file, "_INDEX_PUT", None)
    assert _files_of(tmp_path / "py", batch) == reference


def _files_of(directory: Path, batch: KeyedBatch) -> dict[str, bytes]:
    _index(directory, [batch], one_by_one=False).close()
    return _files(directory)
