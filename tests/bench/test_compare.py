"""`harness.compare` with fake contenders: interleaved rounds, validation first, the budget, times
a contender measures itself, and settings entered once.

The fakes record every call (name, reps) in one log, so the order of validation, warm-up and
timed calls is visible; no real kernel runs and no call sleeps more than a few milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from bench import harness
from bench.harness import Contender, Settings

NAMES = ("nanotc", "numpy", "torch")


def recorder(log: list[tuple[str, int]], name: str, seconds: float = 0.0) -> Callable[[int], None]:
    """A call that logs itself and sleeps `seconds` (0: returns at once)."""

    def call(reps: int) -> None:
        log.append((name, reps))
        if seconds:
            time.sleep(seconds)

    return call


def passes(what: str) -> None:
    """A check every contender passes."""


def fakes(log: list[tuple[str, int]], seconds: float = 0.0) -> list[Contender]:
    return [Contender(name, recorder(log, name, seconds)) for name in NAMES]


def round_calls(
    log: list[tuple[str, int]], settings: Settings, contenders: int = len(NAMES)
) -> list[tuple[str, int]]:
    """The log without its validation and warm-up calls (one plus warmup - 1 per contender):
    the rounds' calls, each timed one right after an untimed one of the same contender."""
    return log[contenders * settings.warmup :]


def timed_calls(
    log: list[tuple[str, int]], settings: Settings, contenders: int = len(NAMES)
) -> list[tuple[str, int]]:
    return round_calls(log, settings, contenders)[1::2]


def test_every_round_calls_each_contender_once_in_a_shuffled_order() -> None:
    log: list[tuple[str, int]] = []
    settings = Settings(warmup=2, repeats=12, budget=100.0)
    timings = harness.compare("8x8x8", fakes(log), passes, settings)
    assert log[: len(NAMES)] == [(name, 1) for name in NAMES]  # validation, in the given order
    calls = timed_calls(log, settings)
    assert len(calls) == len(NAMES) * settings.repeats
    size = len(NAMES)
    rounds = [tuple(n for n, _ in calls[i : i + size]) for i in range(0, len(calls), size)]
    assert all(sorted(r) == sorted(NAMES) for r in rounds)
    assert len(set(rounds)) > 1  # the order changes between rounds
    assert list(timings) == list(NAMES)
    assert all(t.repeats == settings.repeats and t.seconds > 0 for t in timings.values())


def test_the_order_of_rounds_is_reproducible() -> None:
    def rounds(seed: int) -> list[tuple[str, int]]:
        log: list[tuple[str, int]] = []
        harness.compare("x", fakes(log), passes, Settings(repeats=8, budget=100.0, seed=seed))
        return log

    assert rounds(0) == rounds(0)
    assert rounds(0) != rounds(1)


def test_a_wrong_result_stops_before_any_timing() -> None:
    log: list[tuple[str, int]] = []
    checked: list[str] = []

    def check(what: str) -> None:
        checked.append(what)
        if what.startswith("numpy"):
            raise harness.ValidationError(f"{what}: wrong result")

    with pytest.raises(harness.ValidationError, match="numpy 8x8x8"):
        harness.compare("8x8x8", fakes(log), check, Settings(warmup=3, repeats=5))
    assert checked == ["nanotc 8x8x8", "numpy 8x8x8"]
    assert log == [("nanotc", 1), ("numpy", 1)]  # no warm-up, no timed call


def test_a_contender_can_bring_its_own_check() -> None:
    log: list[tuple[str, int]] = []
    own: list[str] = []
    contenders = fakes(log)
    contenders[2] = Contender("torch", recorder(log, "torch"), check=own.append)
    checked: list[str] = []
    harness.compare("x", contenders, checked.append, Settings(repeats=1))
    assert checked == ["nanotc x", "numpy x"] and own == ["torch x"]


def test_the_budget_stops_slow_calls_after_one_round() -> None:
    settings = Settings(repeats=5, budget=0.001)  # 3 ms for 3 contenders; a round takes 6 ms
    slow = harness.compare("x", fakes([], seconds=0.002), passes, settings)
    assert [t.repeats for t in slow.values()] == [1, 1, 1]
    fast = harness.compare("x", fakes([]), passes, Settings(repeats=5, budget=1.0))
    assert [t.repeats for t in fast.values()] == [5, 5, 5]


def test_seconds_a_contender_measures_itself_are_used() -> None:
    reps_seen: list[int] = []

    def self_timed(reps: int) -> float:
        reps_seen.append(reps)
        return 0.001 * reps  # as if each repetition took 1 ms, whatever the wall time

    contenders = [
        Contender("libxsmm", self_timed),
        Contender("nanotc", harness.repeat(lambda: None)),
    ]
    timings = harness.compare("x", contenders, passes, Settings(repeats=3), call_seconds=0.004)
    assert timings["libxsmm"].samples == pytest.approx((0.001, 0.001, 0.001))
    assert reps_seen[-3:] == [4, 4, 4]  # calibrated to a 4 ms call; samples are per repetition
    assert timings["nanotc"].seconds < 0.001  # wall time of a call that does nothing


def test_without_call_seconds_every_call_does_the_work_once() -> None:
    log: list[tuple[str, int]] = []
    harness.compare("x", fakes(log), passes, Settings(warmup=2, repeats=3))
    assert {reps for _, reps in log} == {1}


def test_settings_are_entered_once_around_every_call() -> None:
    log: list[tuple[str, int] | str] = []

    @contextmanager
    def setting(name: str) -> Iterator[None]:
        log.append(f"enter {name}")
        yield
        log.append(f"exit {name}")

    def contender(name: str) -> Contender:
        return Contender(name, lambda reps: log.append((name, reps)), setting(name))

    contenders = [contender(name) for name in NAMES]
    harness.compare("x", contenders, passes, Settings(warmup=2, repeats=4))
    events = [e for e in log if isinstance(e, str)]
    assert sorted(events) == sorted(f"{e} {n}" for e in ("enter", "exit") for n in NAMES)
    count = len(NAMES)
    assert all(isinstance(e, str) and e.startswith("enter") for e in log[:count])
    assert all(isinstance(e, str) and e.startswith("exit") for e in log[-count:])
    # validation, one warm-up, four rounds of an untimed and a timed call
    assert len(log) == 2 * count + count * (2 + 2 * 4)


def test_settings_are_exited_when_a_check_fails() -> None:
    exited: list[str] = []

    @contextmanager
    def setting() -> Iterator[None]:
        try:
            yield
        finally:
            exited.append("numpy")

    def fails(what: str) -> None:
        raise harness.ValidationError(what)

    with pytest.raises(harness.ValidationError):
        harness.compare("x", [Contender("numpy", lambda reps: None, setting())], fails, Settings())
    assert exited == ["numpy"]


def test_contender_names_must_differ() -> None:
    log: list[tuple[str, int]] = []
    with pytest.raises(ValueError, match="differ"):
        harness.compare("x", [*fakes(log), Contender("numpy", lambda r: None)], passes, Settings())


def test_each_timed_call_follows_a_warm_call_and_on_threads_a_pause(monkeypatch) -> None:
    """Every timed call follows an untimed call of the same contender (an idle unit warms up);
    on two threads a pause comes first (another library's workers stop busy-waiting)."""
    pauses: list[float] = []
    monkeypatch.setattr(harness.time, "sleep", pauses.append)
    monkeypatch.setattr(harness, "WARM_SECONDS", 0.0)  # one warm call (see the next test)
    settings = Settings(warmup=1, repeats=3, budget=100.0)
    for threads, expected_pauses in ((2, [harness.SETTLE_SECONDS] * 9), (1, [])):
        log: list[tuple[str, int]] = []
        pauses.clear()
        harness.compare("8x8x8", fakes(log), passes, settings, threads=threads)
        calls = round_calls(log, settings)
        assert len(calls) == 2 * len(NAMES) * settings.repeats
        assert all(calls[i] == calls[i + 1] for i in range(0, len(calls), 2))  # warm, timed
        assert pauses == expected_pauses


def test_warm_up_calls_go_on_for_the_given_time() -> None:
    """After a pause the untimed calls before a timed one last at least WARM_SECONDS (cores
    come back from idle slowly); with no time given there is still one."""
    stamps: list[float] = []

    def call(reps: int) -> None:
        stamps.append(time.perf_counter())

    start = time.perf_counter()
    harness._warm_up(call, 1, 0.01)
    assert len(stamps) > 1 and time.perf_counter() - start >= 0.01
    stamps.clear()
    harness._warm_up(call, 1, 0.0)
    assert len(stamps) == 1


def test_calibration_is_not_set_by_one_slow_call() -> None:
    """A first call that pays a one-off delay (a pool thread waking) must not set the count."""
    calls: list[int] = []

    def first_call_slow(reps: int) -> float:
        calls.append(reps)
        return 0.001 * reps + (0.05 if len(calls) == 1 else 0.0)

    assert harness.calibrate(first_call_slow, target=0.008) == 8


@pytest.mark.parametrize("option", ["--peers", "--dtypes"])
def test_an_unknown_name_is_an_option_error(option: str, capsys) -> None:
    """A misspelt peer or dtype stops the benchmark with argparse's one-line error."""
    parser = harness.argparse.ArgumentParser(prog="w")
    harness.add_common_options(parser)
    with pytest.raises(SystemExit):
        parser.parse_args([option, "numpy,nonesuch"])
    assert f"argument {option}: unknown" in capsys.readouterr().err


def test_an_unknown_peer_in_the_environment_is_an_option_error(monkeypatch, capsys) -> None:
    monkeypatch.setenv("NANOTC_BENCH_PEERS", "torch,nonesuch")
    parser = harness.argparse.ArgumentParser(prog="w")
    harness.add_common_options(parser)
    with pytest.raises(SystemExit):
        parser.parse_args([])
    assert "argument --peers: unknown peer 'nonesuch'" in capsys.readouterr().err


def test_the_peak_loop_is_timed_in_the_same_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """`compare_with_peak` times the peak loop as one more contender of every round and turns
    its median into the peak, which is not among the returned timings."""
    log: list[tuple[str, int]] = []

    def fake_loop(precision: str, threads: int) -> tuple[Contender, float]:
        assert (precision, threads) == ("fp32", 2)
        return Contender("peak", recorder(log, "peak", 0.002), check=passes), 4e6

    monkeypatch.setattr(harness, "_peak_loop", fake_loop)
    monkeypatch.setattr(harness, "_peak_override", {})
    monkeypatch.setattr(harness, "SETTLE_SECONDS", 0.0)  # no pause, no warm-up: one call before
    monkeypatch.delenv("NANOTC_BENCH_PEAK", raising=False)
    settings = Settings(repeats=3, budget=100.0)
    timings, peak = harness.compare_with_peak("x", fakes(log), passes, settings, "fp32", None, 2)
    assert list(timings) == list(NAMES)
    peak_calls = [n for n, _ in timed_calls(log, settings, len(NAMES) + 1) if n == "peak"]
    assert len(peak_calls) == settings.repeats
    assert peak.in_rounds and peak.gflops == pytest.approx(4e6 / 0.002 / 1e9, rel=0.5)


def test_a_given_peak_is_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_loop(precision: str, threads: int) -> None:
        raise AssertionError("the peak loop ran although a peak was given")

    monkeypatch.setattr(harness, "_peak_loop", no_loop)
    monkeypatch.setattr(harness, "_peak_override", {"fp32": 100.0, "fp64": 50.0})
    settings = Settings(repeats=2, budget=100.0)
    timings, peak = harness.compare_with_peak("x", fakes([]), passes, settings, "fp64", None, 2)
    assert list(timings) == list(NAMES)
    assert peak == harness.Peak(100.0, in_rounds=False)


def test_the_peak_contender_runs_on_every_thread() -> None:
    """bench.peak's contender: the loop on `threads` threads at once (flops of all of them,
    through nanotc's native pool); no loop for AMX tiles on this host."""
    from bench import peak

    single, two = peak.contender("fp32", 1), peak.contender("fp32", 2)
    assert single is not None and two is not None
    assert two[1] == 2 * single[1]
    with two[0].setting:
        two[0].call(1)
    assert peak.contender("amx-bf16", 1) is None


def test_given_peaks_from_the_command_line_replace_the_environments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--peak replaces $NANOTC_BENCH_PEAK, which is then not read (a bad value there once
    raised mid-run though --peak was given)."""
    monkeypatch.setattr(harness, "_peak_override", {})
    monkeypatch.setenv("NANOTC_BENCH_PEAK", "fp32=200,fp64=100")
    assert harness.given_peaks() == {"fp32": 200.0, "fp64": 100.0}
    monkeypatch.setenv("NANOTC_BENCH_PEAK", "fp32=-1")
    harness.override_peaks({"fp32": 150.0})
    assert harness.given_peaks() == {"fp32": 150.0}
