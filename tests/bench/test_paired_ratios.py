"""`harness.speed_ratio` and the rows that use it: nanotc/peer and percent of peak paired by
round where both were timed in the same rounds, the ratio of medians otherwise; the rounds'
range of a paired ratio in tables (`--spread`) and CSV."""

from __future__ import annotations

import csv
import statistics

import pytest

from bench import harness
from bench.harness import Row, Timing


def timing(*samples: float) -> Timing:
    return Timing(statistics.median(samples), samples)


# the machine slows 2x after the second round: both slow alike, nanotc stays 1.1x faster
NANOTC = timing(1.0, 1.0, 2.0, 2.0, 2.0)
PEER = timing(1.1, 1.1, 2.2, 2.2, 2.2)
# the peer's last three rounds ran before the slowdown: its median is the fast phase's
PEER_FAST_MEDIAN = timing(1.1, 1.1, 2.2, 1.1, 1.1)


def test_timings_of_the_same_rounds_are_paired() -> None:
    assert harness.speed_ratio(NANOTC, PEER) == pytest.approx(1.1)
    # per round 1.1, 1.1, 1.1, 0.55, 0.55: their median, not 1.1 / 2 from the medians
    assert harness.speed_ratio(NANOTC, PEER_FAST_MEDIAN) == pytest.approx(1.1)
    assert PEER_FAST_MEDIAN.seconds / NANOTC.seconds == pytest.approx(0.55)


def test_timings_of_different_rounds_take_the_ratio_of_medians() -> None:
    assert harness.speed_ratio(NANOTC, timing(3.0, 3.0, 3.0)) == pytest.approx(1.5)
    assert harness.speed_ratio(timing(2.0), timing(3.0)) == pytest.approx(1.5)


def row(peers: dict[str, Timing], **fields: object) -> Row:
    return Row("w", "1x1x1", "f32", 1, flops=4e9, nanotc=NANOTC, peers=peers, **fields)


def test_a_rows_ratio_is_paired_unless_given() -> None:
    timed = row({"numpy": PEER_FAST_MEDIAN})
    assert timed.ratio("numpy") == pytest.approx(1.1)
    assert timed.ratio("torch") is None
    given = row({"numpy": PEER_FAST_MEDIAN}, ratios={"numpy": 0.9})
    assert given.ratio("numpy") == 0.9


def test_percent_of_a_peak_timed_in_the_rounds_is_paired() -> None:
    # the peak loop does 5 GFLOP per call, nanotc 4: in every round but the fourth the loop
    # took 1.25x nanotc's time, so nanotc ran at its peak
    loop = timing(1.25, 1.25, 2.5, 1.25, 2.5)
    peak = 5.0 / loop.seconds
    assert row({}, peak=peak, peak_loop=loop).percent_peak == pytest.approx(100.0)
    # without the loop's rounds: the medians' rates, 2 GFLOP/s over 4
    assert row({}, peak=peak).percent_peak == pytest.approx(50.0)


def test_a_paired_ratio_has_the_range_of_its_rounds() -> None:
    # per round 1.1, 1.1, 1.1, 0.55, 0.55
    assert harness.round_ratios(NANOTC, PEER_FAST_MEDIAN) == pytest.approx([1.1] * 3 + [0.55] * 2)
    assert row({"numpy": PEER_FAST_MEDIAN}).ratio_range("numpy") == pytest.approx((0.55, 1.1))
    assert row({"numpy": PEER}).ratio_range("numpy") == pytest.approx((1.1, 1.1))


def test_only_a_paired_ratio_has_a_range() -> None:
    assert harness.round_ratios(NANOTC, timing(3.0, 3.0, 3.0)) == []
    assert row({"numpy": timing(3.0, 3.0, 3.0)}).ratio_range("numpy") is None
    assert row({"numpy": PEER}, ratios={"numpy": 0.9}).ratio_range("numpy") is None
    assert row({}).ratio_range("numpy") is None


def test_the_table_prints_the_range_when_asked() -> None:
    rows = [row({"numpy": PEER_FAST_MEDIAN}), row({"numpy": timing(3.0)})]
    plain = harness.format_table(rows, ["numpy"]).splitlines()
    assert plain[2].endswith(" 1.10") and plain[3].endswith(" 1.50")
    spread = harness.format_table(rows, ["numpy"], spread=True).splitlines()
    assert spread[2].endswith(" 1.10 (0.55-1.10)")
    assert spread[3].endswith(" 1.50")  # one round: no range


def test_the_csv_has_the_range_of_each_paired_ratio(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = [row({"numpy": PEER_FAST_MEDIAN}), row({"numpy": timing(3.0)})]
    with open(harness.write_csv(rows, "spread", tmp_path), encoding="utf-8") as f:
        paired, single = csv.DictReader(f)
    assert float(paired["ratio_numpy_min"]) == pytest.approx(0.55)
    assert float(paired["ratio_numpy_max"]) == pytest.approx(1.1)
    assert single["ratio_numpy_min"] == single["ratio_numpy_max"] == ""
