"""The soak's own arithmetic: which sends count as lost, the p99 of each minute and its drift,
growth from the warm-up, and which tables count as not back (pure functions, no servers)."""

from __future__ import annotations

from array import array

from orbitmq.bench.soak import Marks, PathTally, _path_results, p99_per_minute, warmup_s
from orbitmq.bench.soak_report import verdict
from orbitmq.bench.soak_watch import Samples, growth, tables_back


def test_lost_counts_acknowledged_never_consumed_and_duplicates_are_told_apart() -> None:
    tally = PathTally()
    for seq in range(1, 1001):
        tally.acked.add(seq)
    for seq in [*range(1, 998), 5, 5, 2_000]:  # 998..1000 never consumed; 5 twice; 2 000 unacked
        tally.consumed_one(seq, 0, 0)
    figures = _path_results({"client": tally}, 0)["client"]
    assert (figures["acknowledged"], figures["lost"], figures["consumed"]) == (1000, 3, 997)
    assert figures["duplicates"] == 2
    assert verdict({"paths": {"client": figures}}) == ["client: 3 acknowledged messages never consumed"]


def test_marks_grow_past_their_first_size_and_count_once() -> None:
    marks, other = Marks(), Marks()
    assert marks.add(3_000_000) and not marks.add(3_000_000) and marks.add(1)
    other.add(1)
    assert (marks.count, marks.missing_from(other), other.missing_from(marks)) == (2, 1, 0)


def test_p99_per_minute_leaves_out_the_partial_last_minute_and_drift_starts_after_warmup() -> None:
    minutes = {0: array("f", [500.0] * 100), 1: array("f", [10.0] * 100), 2: array("f", [30.0] * 100)}
    minutes[3] = array("f", [1.0])
    assert p99_per_minute(minutes) == [500.0, 10.0, 30.0]
    tally = PathTally(minutes=minutes)
    assert _path_results({"proxy": tally}, warm_s=60)["proxy"]["p99_drift_ms"] == 20.0
    assert warmup_s(3_600) == 300 and warmup_s(600) == 60


def test_growth_compares_the_window_after_warmup_with_the_last_one() -> None:
    samples = Samples()
    for t in range(0, 100):
        samples.add("broker", t, {"rss_anon_mb": 100 + (t >= 85) * 20, "open_fds": 40})
    figures = growth(samples, warm_s=10, end_s=99, window_s=10)["broker"]
    assert figures["rss_anon_mb"]["growth"] == 0.2 and figures["open_fds"]["growth"] == 0
    result = {"duration_s": 600, "growth": {"broker": figures}, "paths": {}}
    assert verdict(result) == ["broker rss_anon_mb grew 20.0% (100.0 -> 120.0) after the warm-up"]
    assert verdict({**result, "duration_s": 45}) == []  # a short run's growth is reported only


def test_a_table_is_not_back_while_its_smallest_value_after_is_above_its_largest_before() -> None:
    before = {"broker/table:broker_clients": 3.0, "proxy/series": 78.0}
    assert tables_back(before, {"broker/table:broker_clients": 3.0, "proxy/series": 78.0}) == {}
    assert tables_back(before, {"broker/table:broker_clients": 4.0, "proxy/series": 70.0}) == {
        "broker/table:broker_clients": {"before": 3.0, "after": 4.0}
    }


def test_tasks_and_sockets_are_judged_idle_before_and_after_the_traffic() -> None:
    idle = {
        "proxy/asyncio_tasks": {"before": 40.0, "after": 44.0},
        "sidecar/open_sockets": {"before": 6.0, "after": 9.0},
    }
    assert verdict({"idle": idle}) == ["sidecar/open_sockets idle at 9.0 after the traffic, 6.0 before"]
