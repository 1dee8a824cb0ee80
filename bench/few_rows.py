"""Operations on a C (or c) of a few rows or columns against numpy and torch, one thread.

    OPENBLAS_NUM_THREADS=1 python -m bench.few_rows [--calls 100] [--runs 7]

A C of one to four rows leaves a register tile's vectors mostly empty (dot products along K
take it where op(B) is B, tiles of C^T where op(B) is B^T), a few columns of run-time count
take single-column tiles, a gemv.n or ger whose c has fewer rows than a vector spends its
passes on masks, and a gemv.t on columns of a few elements ends each one's dot product in a
sum across lanes: the cases here are those a hunt for performance cliffs found far slower
than numpy or torch (docs/benchmarks.md), gemms of static sizes and of run-time ones. Each
case is f32, its result checked against numpy's in float64 first; nanotc and its peer then
run in alternating timings of `--calls` calls each, the median of `--runs` per side. The
ratio is nanotc's time over the peer's (below 1: nanotc faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from bench import kernels
from bench.harness import ValidationError
from nanotc.cli.options import positive

Launch = Callable[[], object]


class Case(NamedTuple):
    name: str
    peer: str
    nanotc: Launch
    other: Launch


def _memref(*shape: int | str) -> str:
    return kernels.memref("f32", *shape)


def _gemm(ta: str, m: int, n: int, k: int, rng: np.random.Generator,
          run_time: bool = False, tb: str = "n") -> Case:  # fmt: skip
    """C (m x n) = op(A) op(B) (`run_time`: a kernel of run-time sizes): for a few rows, dot
    products along K where op(B) is B, tiles of C^T where it is B^T; for a few columns, the
    direct path's single-column tiles."""
    a_shape = (k, m) if ta == "t" else (m, k)
    b_shape = (n, k) if tb == "t" else (k, n)
    a_t, b_t, c_t = _memref(*a_shape), _memref(*b_shape), _memref(m, n)
    if run_time:
        a_t = b_t = c_t = _memref("?", "?")
    kernel = kernels.compiled(f"""func @g(%A: {a_t}, %B: {b_t}, %C: {c_t}) {{
    gemm.{ta}.{tb} 1.0, %A, %B, 0.0, %C : f32, {a_t}, {b_t}, f32, {c_t}
}}""")
    a = np.asfortranarray(rng.standard_normal(a_shape, dtype=np.float32))
    b = np.asfortranarray(rng.standard_normal(b_shape, dtype=np.float32))
    c, out = np.zeros((m, n), np.float32, order="F"), np.zeros((m, n), np.float32, order="F")
    op_a = a.T if ta == "t" else a
    op_b = b.T if tb == "t" else b
    kernel(a, b, c, group_size=1, num_threads=1)
    name = f"gemm.{ta}.{tb} {m}x{n}x{k}" + (" (run-time sizes)" if run_time else "")
    _check(c, op_a.astype(np.float64) @ op_b, k, name)
    return Case(name, "numpy", lambda: kernel(a, b, c, group_size=1,
                num_threads=1), lambda: np.matmul(op_a, op_b, out=out))  # fmt: skip


def _row_vectors(batch: int, n: int, k: int, rng: np.random.Generator) -> Case:
    """c_g (1 x n) = a_g B_g for each member g, against torch.bmm."""
    import torch

    kernel = kernels.compiled(kernels.batched("f32", 1, n, k))
    a, b, c = (np.asfortranarray(rng.standard_normal(s, dtype=np.float32))
               for s in ((1, k, batch), (k, n, batch), (1, n, batch)))  # fmt: skip
    before = c.copy()
    kernel(a, b, c, group_size=batch, num_threads=1)
    want = before + np.einsum("mkg,kng->mng", a.astype(np.float64), b.astype(np.float64))
    _check(c, want, k, f"batched 1x{n}x{k}")
    ta, tb = (torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1))) for x in (a, b))
    out = torch.empty(batch, 1, n)
    return Case(f"{batch} x gemm 1x{n}x{k}", "torch.bmm",
                lambda: kernel(a, b, c, group_size=batch, num_threads=1),
                lambda: torch.bmm(ta, tb, out=out))  # fmt: skip


def _gemv(trans: str, m: int, n: int, rng: np.random.Generator) -> Case:
    """c = op(A) x of A m x n (gemv.n: c of m rows; gemv.t: A's columns m long)."""
    a_t, x_t, y_t = _memref("?", "?"), _memref("?"), _memref("?")
    kernel = kernels.compiled(f"""func @g(%A: {a_t}, %x: {x_t}, %y: {y_t}) {{
    gemv.{trans} 1.0, %A, %x, 0.0, %y : f32, {a_t}, {x_t}, f32, {y_t}
}}""")
    a = np.asfortranarray(rng.standard_normal((m, n), dtype=np.float32))
    op_a = a.T if trans == "t" else a
    x = rng.standard_normal(op_a.shape[1], dtype=np.float32)
    y, out = (np.zeros(op_a.shape[0], np.float32) for _ in range(2))
    kernel(a, x, y, group_size=1, num_threads=1)
    _check(y, op_a.astype(np.float64) @ x, op_a.shape[1], f"gemv.{trans} {m}x{n}")
    return Case(f"gemv.{trans} {m}x{n} (run-time sizes)", "numpy",
                lambda: kernel(a, x, y, group_size=1, num_threads=1),
                lambda: np.dot(op_a, x, out=out))  # fmt: skip


def _ger(m: int, n: int, rng: np.random.Generator) -> Case:
    import torch

    c_t, v_t = _memref("?", "?"), _memref("?")
    kernel = kernels.compiled(f"""func @g(%x: {v_t}, %y: {v_t}, %C: {c_t}) {{
    ger 1.0, %x, %y, 1.0, %C : f32, {v_t}, {v_t}, f32, {c_t}
}}""")
    x, y = rng.standard_normal(m, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    c = np.asfortranarray(rng.standard_normal((m, n), dtype=np.float32))
    before = c.astype(np.float64)
    kernel(x, y, c, group_size=1, num_threads=1)
    _check(c, before + np.outer(x, y), 1, f"ger {m}x{n}")
    tc = torch.from_numpy(np.ascontiguousarray(c))
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    return Case(f"ger {m}x{n} (run-time sizes)", "torch addr_",
                lambda: kernel(x, y, c, group_size=1, num_threads=1),
                lambda: tc.addr_(tx, ty))  # fmt: skip


def _check(got: np.ndarray, want: np.ndarray, depth: int, what: str) -> None:
    tolerance = 1e-4 * np.sqrt(depth) * (np.abs(want).max() + 1)
    if not np.allclose(got, want, rtol=1e-4, atol=tolerance):
        raise ValidationError(f"{what}: wrong result")


def cases(rng: np.random.Generator, with_torch: bool) -> list[Case]:
    out = [_gemm("t", 1, 1, 5000, rng), _gemm("n", 1, 1, 5000, rng), _gemm("t", 4, 4, 5000, rng),
           _gemm("t", 1, 64, 4096, rng), _gemm("n", 2, 256, 1024, rng),
           _gemm("t", 1, 1, 20000, rng, True), _gemm("t", 4, 4, 20000, rng, True),
           _gemm("n", 1, 256, 256, rng, True), _gemm("n", 4, 4, 20000, rng, True),
           _gemm("t", 4, 2000, 1000, rng, True),
           *(_gemm(ta, m, n, k, rng, run_time, tb="t") for run_time in (False, True)
             for ta, m, n, k in (("n", 1, 256, 256), ("n", 3, 256, 256), ("n", 4, 256, 256),
                                 ("n", 4, 64, 4096), ("t", 3, 256, 256),
                                 ("n", 1, 20000, 4), ("n", 4, 20000, 8), ("t", 2, 1024, 1024),
                                 ("t", 4, 256, 256))),
           *(_gemm("n", m, n, k, rng, True) for m, n, k in ((256, 4, 256), (256, 6, 256),
                                                            (1000, 3, 100), (1000, 8, 100))),
           _gemv("n", 1, 20000, rng), _gemv("n", 8, 20000, rng), _gemv("n", 16, 20000, rng),
           *(_gemv("t", m, 20000, rng) for m in (1, 2, 3, 4, 8, 16))]  # fmt: skip
    if with_torch:
        out += [_row_vectors(50, 64, 64, rng), _row_vectors(50, 256, 256, rng),
                _ger(1, 20000, rng), _ger(8, 20000, rng), _ger(16, 20000, rng)]  # fmt: skip
    return out


def timed(case: Case, calls: int, runs: int) -> tuple[float, float]:
    """Median microseconds per call of nanotc and of the peer, in alternating timings."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(runs):
        for side, launch in zip(times, (case.nanotc, case.other)):
            start = time.perf_counter()
            for _ in range(calls):
                launch()
            side.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times[0]), statistics.median(times[1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=positive, default=100, help="calls per timing (100)")
    parser.add_argument("--runs", type=positive, default=7, help="timings per side (median: 7)")
    args = parser.parse_args(argv)
    try:
        import torch

        torch.set_num_threads(1)
        with_torch = True
    except ImportError:
        with_torch = False
    print(f"f32, one thread; microseconds per call, median of {args.runs} x {args.calls} calls")
    print("| case | nanotc | peer | peer's | nanotc/peer |")
    print("| --- | ---: | --- | ---: | ---: |")
    for case in cases(np.random.default_rng(0), with_torch):
        mine, theirs = timed(case, args.calls, args.runs)
        print(f"| {case.name} | {mine:.1f} | {case.peer} | {theirs:.1f} | {mine / theirs:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
