"""The benchmarks' command lines refuse bad values with a one-line usage error (exit status 2)
naming the option, what it expects and what it got, before any benchmark starts: no traceback,
no MemoryError, no segfault in a peer."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from bench import __main__ as suite
from bench import (
    compile_time,
    harness,
    in_cache,
    k_step,
    launch,
    peak,
    target_variants,
    w1_square,
    w2_batched,
    w3_resnet,
    w4_bf16,
    w5_blas,
)
from nanotc import targets

MEMORY = 16 * 10**9  # the machine's memory, as the tests pretend


@pytest.fixture(autouse=True)
def no_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any benchmark that gets as far as its preamble fails the test; memory reads MEMORY."""

    def started(*args: object) -> None:
        raise AssertionError("the benchmark started")

    monkeypatch.setattr(harness, "preamble", started)
    monkeypatch.setattr(harness, "physical_memory", lambda: MEMORY)
    monkeypatch.delenv("NANOTC_BENCH_PEAK", raising=False)
    monkeypatch.delenv("NANOTC_BENCH_PEERS", raising=False)


def refused(main: Callable[[Sequence[str]], object], argv: list[str],
            capsys: pytest.CaptureFixture[str]) -> str:  # fmt: skip
    """The last line of the usage error `main(argv)` exits with (status 2)."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "invalid" not in err, err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--line-offset", "3", "--dtypes", "f32", "--ops", "copy", "--peers", "numpy"],
      "--line-offset: expected a multiple of 4 (the element size of f32: every --dtypes'"),
     (["--line-offset", "4"], "--line-offset: expected a multiple of 8 (the element size of f64"),
     (["--line-offset", "64"], "--line-offset: expected 0 to 63, got '64'"),
     (["--line-offset", "x"], "--line-offset: expected 0 to 63, got 'x'")],
)  # fmt: skip
def test_w5_refuses_an_offset_between_elements(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--line-offset 3 handed f32 arrays 3 bytes past a line to OpenBLAS, which segfaulted."""
    assert f"error: argument {message}" in refused(w5_blas.main, argv, capsys)


def test_w5_operands_are_never_placed_between_elements() -> None:
    """Called from Python, a misaligned offset stops before any array reaches a peer."""
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="offset must be a multiple of 8 below 64, got 4"):
        w5_blas.operands("copy", "f64", 1 << 12, 1, rng, line_offset=4)


@pytest.mark.parametrize(
    "main", [w5_blas.main, w1_square.main, w2_batched.main, suite.main], ids=lambda m: m.__module__
)
def test_thread_counts_above_the_cap_are_refused(
    main: Callable[[Sequence[str]], object], capsys: pytest.CaptureFixture[str]
) -> None:
    """--threads 100000 ended in a PoolError, then a segfault."""
    line = refused(main, ["--threads", "1,100000"], capsys)
    assert line.endswith("error: argument --threads: expected at most 256 threads (the peers' "
                         "C drivers' limit), got 100000")  # fmt: skip


def test_the_thread_cap_is_the_c_drivers() -> None:
    header = Path(w5_blas.__file__).parent / "peers" / "bench_threads.h"
    match = re.search(r"#define BENCH_MAX_THREADS (\d+)", header.read_text())
    assert match and int(match.group(1)) == harness.MAX_THREADS


@pytest.mark.parametrize(
    ("main", "argv", "message"),
    [(w2_batched.main, ["--shapes", "0x0x0"],
      "--shapes: expected MxNxK of positive integers, got '0x0x0'"),
     (w4_bf16.main, ["--shapes", "0x0x0"],
      "--shapes: expected MxNxK of positive integers, got '0x0x0'"),
     (w2_batched.main, ["--shapes=-1x8x8"],
      "--shapes: expected MxNxK of positive integers, got '-1x8x8'"),
     (w2_batched.main, ["--shapes", "8x8"],
      "--shapes: expected MxNxK of positive integers, got '8x8'"),
     (w2_batched.main, ["--shapes", "99999999999x9x9"],
      "--shapes: a batch member of 99999999999x9x9 needs 2.88e+04 GB of arrays, more than "
      "this machine's 16 GB of memory"),
     (in_cache.main, ["--shapes", "99999999999x9x9"],
      "--shapes: a batch member of 99999999999x9x9 needs 2.88e+04 GB of arrays"),
     (w2_batched.main, ["--shapes", ","], "--shapes: expected a comma-separated list, got ','"),
     (w1_square.main, ["--sizes=-8"], "--sizes: expected at least 1, got -8"),
     (w1_square.main, ["--sizes", "99999999"],
      "--sizes: n=99999999 needs 7.2e+08 GB of arrays, more than this machine's 16 GB"),
     (w1_square.main, ["--nb=-1"], "--nb: expected at least 1, got -1"),
     (w1_square.main, ["--sizes", "7", "--nb", "0"], "--nb: expected at least 1, got 0"),
     (w1_square.main, ["--sizes", "7", "--nb", "2"], "--sizes/--nb: nb=2 does not divide n=7"),
     (w1_square.main, ["--sizes", "7"],
      "--sizes/--nb: the default nb = n/threads = 3 (2 threads) does not divide n=7"),
     (w4_bf16.main, ["--parts", "bogus"],
      "--parts: unknown part 'bogus' (choose from mlp, mlp-bf16c, brgemm, batched, memory)"),
     (w4_bf16.main, ["--quick", "--parts", "mlp", "--threads", "3"],
      "--threads: the mlp parts' N = 128 is not a multiple of 3 threads"),
     (w5_blas.main, ["--ops", "bogus"],
      "--ops: unknown op 'bogus' (choose from copy, axpby, hadamard, sum, gemv.n, gemv.t, ger)"),
     (w5_blas.main, ["--variants", "bogus"],
      "--variants: unknown variant 'bogus' (choose from memory, cache)"),
     (w2_batched.main, ["--variants", "bogus"],
      "--variants: unknown variant 'bogus' (choose from memory, cache, launch)"),
     (w2_batched.main, ["--cache-kb", "nan"], "--cache-kb: expected a positive number of kB"),
     (w3_resnet.main, ["--layers", "99"],
      "--layers: expected a Table I layer id from 1 to 20, got '99'"),
     (w3_resnet.main, ["--layers", "0"],
      "--layers: expected a Table I layer id from 1 to 20, got '0'"),
     (target_variants.main, ["--variants", "k_unroll=1", "--layers", "21"],
      "--layers: expected a Table I layer id from 1 to 20, got '21'"),
     (k_step.main, ["--steps", "x"], "--steps: expected k steps from 2 to 256, got 'x'"),
     (k_step.main, ["--line-offset", "6"],
      "--line-offset: expected a multiple of 4 below 64, got '6'"),
     (k_step.main, ["--call-ms", "0"], "--call-ms: expected milliseconds from 1 to 1000, got '0'"),
     (in_cache.main, ["--line-offsets", "0,4"],
      "--line-offsets: expected a multiple of 8 below 64, got '4'"),
     (suite.main, ["--quick", "--threads", "3", "--workloads", "w1"],
      "--threads: w1: the default nb = n/threads = 21 (3 threads) does not divide n=64"),
     (compile_time.main, ["--runs", "0"], "--runs: expected at least 1, got 0"),
     (launch.main, ["--calls", "0"], "--calls: expected at least 1, got 0")],
)  # fmt: skip
def test_bad_values_are_usage_errors(
    main: Callable[[Sequence[str]], object], argv: list[str], message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Each was a traceback (ZeroDivisionError, MemoryError, CompileError, ValueError) or, for
    --layers 99 and --shapes ',', silently an empty or a default run."""
    line = refused(main, argv, capsys)
    assert f"error: argument {message}" in line, line


@pytest.mark.parametrize(
    ("peak", "message"),
    [("fp32=-1", "expected fp32=GFLOP/s, a positive number, got 'fp32=-1'"),
     ("fp32=0", "expected fp32=GFLOP/s, a positive number, got 'fp32=0'"),
     ("fp32=abc", "expected fp32=GFLOP/s, a positive number, got 'fp32=abc'"),
     ("foo=1", "unknown precision 'foo' in 'foo=1' (known: fp32, fp64, bf16, amx-bf16)")],
)  # fmt: skip
def test_peaks_must_be_positive_and_of_a_known_precision(
    peak: str, message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    line = refused(w5_blas.main, ["--peak", peak], capsys)
    assert line.endswith(f"error: argument --peak: {message}")
    monkeypatch.setenv("NANOTC_BENCH_PEAK", peak)  # the environment's, checked alike
    assert refused(w5_blas.main, [], capsys).endswith(f"error: argument --peak: {message}")


def test_the_peak_keys_are_the_measured_ones() -> None:
    names = {loop.name for loop in peak.peak_loops(targets.host())}
    assert names | {"amx-bf16"} <= set(harness.PRECISIONS)
