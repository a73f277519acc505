"""The data source's pure offset rules (no Spark, no cluster): how a micro-batch is capped, how
ranges are cut into partitions, how a start resolves per queue, and the checkpoint form."""

from __future__ import annotations

import pytest

from orbitmq_spark.offsets import QueueBounds, cap, check_ranges, from_json_dict, resolve, split, to_json_dict
from orbitmq_spark.options import OffsetKind, OffsetSpec, OptionError, parse_read_options

A0, A1, B0 = ("T", "broker-a", 0), ("T", "broker-a", 1), ("T", "broker-b", 0)


def test_cap_shares_the_limit_by_backlog_and_starves_no_queue() -> None:
    ends = cap({A0: 0, A1: 100, B0: 50}, {A0: 1000, A1: 101, B0: 50}, 100)
    assert ends[B0] == 50  # no backlog, no move
    assert ends[A1] == 101  # one message behind: still advances
    assert ends[A0] == 99  # the rest, in proportion
    assert sum(ends[k] - s for k, s in {A0: 0, A1: 100, B0: 50}.items()) == 100
    even = cap({A0: 0, B0: 0}, {A0: 13, B0: 12}, 10)  # 5.2 and 4.8: the remainder to the larger
    assert even == {A0: 6, B0: 4}
    assert sum(even.values()) == 10
    assert cap({A0: 0}, {A0: 10}, 100) == {A0: 10}  # under the limit: everything


def test_split_cuts_large_ranges_without_gaps_or_overlaps() -> None:
    pieces = split({A0: (0, 1000), A1: (5, 7), B0: (3, 3)}, min_partitions=8)
    assert len(pieces) >= 8 and all(p.size > 0 for p in pieces)
    covered = sorted((p.key, o) for p in pieces for o in range(p.start, p.end))
    assert covered == sorted([(A0, o) for o in range(1000)] + [(A1, 5), (A1, 6)])
    assert [p.key for p in split({A0: (0, 10), B0: (0, 10)}, None)] == [A0, B0]


def test_group_start_falls_back_for_queues_never_committed() -> None:
    bounds = {A0: QueueBounds(2, 10), A1: QueueBounds(0, 7), B0: QueueBounds(0, 4)}
    spec = OffsetSpec(OffsetKind.GROUP, fallback=OffsetKind.LATEST)
    assert resolve("startingOffsets", spec, bounds, committed={A0: 5, A1: -1}) == {A0: 5, A1: 7, B0: 4}
    per_queue = OffsetSpec(OffsetKind.PER_QUEUE, per_queue={A0: -2, A1: 3}, fallback=OffsetKind.EARLIEST)
    assert resolve("startingOffsets", per_queue, bounds) == {A0: 2, A1: 3, B0: 0}


def test_ranges_refuse_an_end_before_the_start_and_clip_to_the_max() -> None:
    bounds = {A0: QueueBounds(0, 10)}
    assert check_ranges({A0: 4}, {A0: 50}, bounds, True) == {A0: (4, 10)}
    with pytest.raises(OptionError, match=r"'endingOffsets'.*before its starting offset 4"):
        check_ranges({A0: 4}, {A0: 3}, bounds, True)


def test_checkpoint_form_round_trips() -> None:
    offsets = {A0: 3, A1: 0, B0: 12}
    document = to_json_dict(offsets)
    assert document == {"T": {"broker-a:0": 3, "broker-a:1": 0, "broker-b:0": 12}}
    assert from_json_dict(document) == offsets


def test_stream_only_and_batch_only_options_are_refused_in_the_other_mode() -> None:
    base = {"namesrv": "127.0.0.1:9876", "topic": "T"}
    with pytest.raises(OptionError, match="'endingOffsets': applies to batch reads only"):
        parse_read_options({**base, "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(OptionError, match=r"'group'.*not both"):
        parse_read_options(
            {**base, "group": "g", "startingOffsets": '{"T": {"broker-a:0": 1}}'}, streaming=False
        )
    options = parse_read_options(
        {**base, "STARTINGOFFSETS": "timestamp:2026-11-21T10:00:00Z"}, streaming=True
    )
    assert options.starting.timestamp_ms == 1_795_255_200_000
