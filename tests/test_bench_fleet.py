"""The fleet benchmark's summary of repeated overhead runs (``bench_fleet --runs N``): each measure
as its range over the runs, and how many runs met issue 11's aim (strictly under it)."""

from __future__ import annotations

from benchmarks.bench_fleet import AIM_MS, OVERHEAD_ROWS, overhead_rows, wake_cost, wake_rows


def _run(overhead: float, **rest: float) -> dict[str, float]:
    run = {key: 1.0 for key, _ in OVERHEAD_ROWS}
    return {**run, **rest, "overhead_vs_in_process_ms": overhead}


def test_one_run_gives_each_measure_and_whether_it_met_the_aim() -> None:
    rows = dict(overhead_rows([_run(4.31, round_trip_ms=9.04)]))
    assert rows["round trip, 1-page PDF (median)"] == "9.0 ms"
    assert rows["fleet overhead per job against in-process"] == "4.31 ms"
    assert rows[f"runs under the {AIM_MS:g} ms aim against in-process"] == "1 of 1"


def test_the_aims_measure_has_the_digits_that_tell_a_run_just_under_it_from_one_at_it() -> None:
    rows = dict(overhead_rows([_run(4.994)]))
    assert rows["fleet overhead per job against in-process"] == "4.99 ms"
    assert rows[f"runs under the {AIM_MS:g} ms aim against in-process"] == "1 of 1"


def test_several_runs_give_ranges_and_count_only_runs_strictly_under_the_aim() -> None:
    runs = [_run(4.0, in_process_ms=3.8), _run(AIM_MS, in_process_ms=7.1), _run(6.0, in_process_ms=5.0)]
    rows = dict(overhead_rows(runs))
    assert rows["fleet overhead per job against in-process"] == "4.00-6.00 ms"
    assert rows["same job in-process (submit -> bundle, interleaved)"] == "3.8-7.1 ms"
    assert rows[f"runs under the {AIM_MS:g} ms aim against in-process"] == "1 of 3"
    assert len(rows) == len(OVERHEAD_ROWS) + 1


def test_the_wake_cost_pairs_a_round_trip_after_a_sleep_with_one_right_after(redis_server) -> None:
    cost = wake_cost(redis_server.url, asleep_s=0.001, pings=20)
    assert cost["asleep_ms"] == 1.0
    assert cost["back_to_back_us"] > 0 and cost["after_sleep_us"] > 0
    rows = dict(wake_rows({"asleep_ms": 5.0, "back_to_back_us": 90.4, "after_sleep_us": 253.0}))
    assert rows["this machine: a Redis round trip back to back"] == "90 us"
    assert rows["same, both sides asleep 5 ms before (a 1-page job's length)"] == "253 us (2.8x)"
