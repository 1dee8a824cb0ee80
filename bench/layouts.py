"""Layouts: instructions on numpy's row-major arrays and on transposed operands, against numpy.

A numpy user's arrays are row-major (C order): a kernel takes them as `strided<?,1>` memrefs,
the transposes of column-major ones. Each case is one instruction of run-time sizes on such
operands, or with a transpose, in one work-group on one thread, called from Python as numpy
is (both pay their call's overhead), on the same arrays:

- gemm on row-major A, B and C (a row-major C is computed as the transposed problem);
- gemm.t.n, whose A^T is packed (`gemm_blocked.gathers_a`), at sizes where column-major
  operands would take the direct path;
- gemv.n and gemv.t on a row-major A (dot products along its rows, axpys down them);
- ger into a row-major C; sum.n and sum.t of row-major and column-major matrices;
- axpby.n between row-major matrices, axpby.t from column-major to column-major (a
  transposition in registers);
- batched small gemms on numpy's (batch, m, n) arrays, whose members are row-major (one
  launch over the batch, in L2).

GFLOP/s for the gemms, GB/s of the bytes each memory-bound instruction must move for the
others (operands read once, output written once, and read too where beta is not 0).

    python -m bench.layouts [--cases gemm-rrr,sum.n-cm] [--dtypes f32,f64] [--budget 2]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from bench import harness, kernels
from bench.harness import Contender, Row, Settings

ROW_MAJOR = "memref<{t}x?x?,strided<?,1>>"
COLUMN_MAJOR = "memref<{t}x?x?>"
VECTOR = "memref<{t}x?>"


@dataclass(frozen=True)
class Case:
    """One instruction with alpha 1 and `beta`: its kernel's parameters in order, the
    output last (R row-major, C column-major, V vector), numpy's call on the same arrays,
    and what it computes in float64."""

    params: str
    inst: str
    beta: float
    numpy: Callable[..., object]
    expected: Callable[..., np.ndarray]
    gemm: bool = False


CASES: dict[str, Case] = {
    "gemm-rrr": Case(
        "%a: R, %b: R, %c: R", "gemm.n.n", 0.0, lambda a, b, c: np.matmul(a, b, out=c),
        lambda a, b, c: a @ b, gemm=True,
    ),
    "gemm.t.n-ccc": Case(
        "%a: C, %b: C, %c: C", "gemm.t.n", 0.0, lambda a, b, c: np.matmul(a.T, b, out=c),
        lambda a, b, c: a.T @ b, gemm=True,
    ),
    "gemv.n-r": Case(
        "%a: R, %b: V, %c: V", "gemv.n", 0.0, lambda a, b, c: np.matmul(a, b, out=c),
        lambda a, b, c: a @ b,
    ),
    "gemv.t-r": Case(
        "%a: R, %b: V, %c: V", "gemv.t", 0.0, lambda a, b, c: np.matmul(a.T, b, out=c),
        lambda a, b, c: a.T @ b,
    ),
    "ger-r": Case(
        "%a: V, %b: V, %c: R", "ger", 1.0, lambda a, b, c: np.add(c, np.outer(a, b), out=c),
        lambda a, b, c: np.outer(a, b) + c,
    ),
    "sum.n-r": Case(
        "%a: R, %c: V", "sum.n", 0.0, lambda a, c: np.sum(a, axis=1, out=c), lambda a, c: a.sum(1)
    ),
    "sum.t-r": Case(
        "%a: R, %c: V", "sum.t", 0.0, lambda a, c: np.sum(a, axis=0, out=c), lambda a, c: a.sum(0)
    ),
    "sum.n-c": Case(
        "%a: C, %c: V", "sum.n", 0.0, lambda a, c: np.sum(a, axis=1, out=c), lambda a, c: a.sum(1)
    ),
    "axpby.n-rr": Case(
        "%a: R, %c: R", "axpby.n", 1.0, lambda a, c: np.add(a, c, out=c), lambda a, c: a + c
    ),
    "axpby.t-cc": Case(
        "%a: C, %c: C", "axpby.t", 0.0, lambda a, c: np.copyto(c, a.T), lambda a, c: a.T.copy()
    ),
}  # fmt: skip
BATCHES = {"batched-rrr 16x16x16": (16, 16, 16), "batched-rrr 56x9x9": (56, 9, 9)}
"""Batched gemms C_b := A_b B_b on numpy's (batch, m, n) arrays, whose members are row-major,
one launch over the whole batch: name -> M, N, K of a member."""
QUICK_CASES = ("gemm-rrr", "gemv.n-r", "axpby.t-cc", "batched-rrr 16x16x16")


@dataclass(frozen=True)
class Sizes:
    gemm: int = 256  # M = N = K: in L2, where the kind of path matters most
    matrix: int = 1024  # rows and columns of the memory-bound instructions' matrices
    batch_bytes: int = 256 * 1024  # a batch's operands together: in L2

    @staticmethod
    def quick() -> Sizes:
        return Sizes(gemm=48, matrix=96, batch_bytes=16 * 1024)


def kernel_text(name: str, dtype: str) -> str:
    case = CASES[name]
    types = {"R": ROW_MAJOR, "C": COLUMN_MAJOR, "V": VECTOR}
    named = [p.split(": ") for p in case.params.split(", ")]
    typed = [(n, types[kind].format(t=dtype)) for n, kind in named]
    names, operand_types = [n for n, _ in typed], [t for _, t in typed]
    signature = ", ".join(f"{n}: {t}" for n, t in typed)
    operands = f"1.0, {', '.join(names[:-1])}, {case.beta}, {names[-1]}"
    types_of = f"{dtype}, {', '.join(operand_types[:-1])}, {dtype}, {operand_types[-1]}"
    return f"func @k({signature}) {{\n  {case.inst} {operands} : {types_of}\n}}\n"


def arrays(name: str, dtype: str, sizes: Sizes, rng: np.random.Generator) -> list[np.ndarray]:
    case = CASES[name]
    n = sizes.gemm if case.gemm else sizes.matrix
    np_dtype = harness.DTYPES[dtype]
    out = []
    for kind in (p.split(": ")[1] for p in case.params.split(", ")):
        shape = (n,) if kind == "V" else (n, n)
        values = rng.uniform(-1, 1, shape).astype(np_dtype)
        out.append(np.asfortranarray(values) if kind == "C" else np.ascontiguousarray(values))
    return out


def work(name: str, n: int, size: int) -> tuple[float, float]:
    """FLOPs and bytes moved by one call on n x n matrices of `size`-byte elements."""
    inst = CASES[name].inst
    if CASES[name].gemm:
        return 2.0 * n**3, 3.0 * n * n * size
    matrix = n * n * size
    moved = {"gemv.n": matrix + 2 * n * size, "gemv.t": matrix + 2 * n * size,
             "ger": 2 * matrix + 2 * n * size, "sum.n": matrix + n * size,
             "sum.t": matrix + n * size, "axpby.n": 3 * matrix, "axpby.t": 2 * matrix}  # fmt: skip
    flops = {"gemv.n": 2 * n * n, "gemv.t": 2 * n * n, "ger": 2 * n * n, "sum.n": n * n,
             "sum.t": n * n, "axpby.n": n * n, "axpby.t": 0}  # fmt: skip
    return float(flops[inst]), float(moved[inst])


def _row(name: str, dtype: str, sizes: Sizes, settings: Settings, rng: np.random.Generator) -> Row:
    case = CASES[name]
    kernel = kernels.compiled(kernel_text(name, dtype))
    ours = arrays(name, dtype, sizes, rng)
    theirs = [x.copy(order="K") for x in ours]
    initial = [x.copy(order="K") for x in ours]
    expected = np.asarray(case.expected(*(x.astype(np.float64) for x in initial)))
    n = sizes.gemm if case.gemm else sizes.matrix
    np_dtype = harness.DTYPES[dtype]

    def check(what: str) -> None:
        got = theirs[-1] if what.startswith("numpy") else ours[-1]
        bound = np.abs(expected) + 1.0
        harness.check_gemm(what, got, expected, bound, n, np_dtype)
        for array, start in zip((theirs if what.startswith("numpy") else ours), initial):
            np.copyto(array, start)

    contenders = [
        Contender("nanotc", harness.repeat(lambda: kernel(*ours, group_size=1, num_threads=1))),
        Contender("numpy", harness.repeat(lambda: case.numpy(*theirs))),
    ]
    label = f"{name} {n}x{n} {dtype}"
    timings = harness.compare(label, contenders, check, settings)
    flops, moved = work(name, n, np.dtype(np_dtype).itemsize)
    return Row(
        workload="layouts",
        shape=f"{name} {n}",
        dtype=dtype,
        threads=1,
        flops=flops,
        bytes=None if case.gemm else moved,
        nanotc=timings.pop("nanotc"),
        peers=timings,
        peak=harness.peak_gflops(dtype, 1),
        params="one launch (one work-group) per call, from Python",
    )


def batched_text(members: tuple[int, int, int], dtype: str) -> str:
    """C_b := A_b B_b for the group's member b of batches whose members are row-major."""
    m, n, k = members
    shapes = ((m, k), (k, n), (m, n))
    batched = [f"memref<{dtype}x{r}x{c}x?,strided<?,1,?>>" for r, c in shapes]
    member = [f"memref<{dtype}x{r}x{c},strided<?,1>>" for r, c in shapes]
    views = "\n".join(
        f"  %{x} = subview %{x.upper()}[:, :, %g] : {t}" for x, t in zip("abc", batched)
    )
    return (
        f"func @k(%A: {batched[0]}, %B: {batched[1]}, %C: {batched[2]}) {{\n  %g = group_id\n"
        f"{views}\n  gemm.n.n 1.0, %a, %b, 0.0, %c : {dtype}, {member[0]}, {member[1]}, "
        f"{dtype}, {member[2]}\n}}\n"
    )


def _batch_row(name: str, dtype: str, sizes: Sizes, settings: Settings,
               rng: np.random.Generator) -> Row:  # fmt: skip
    m, n, k = members = BATCHES[name]
    kernel = kernels.compiled(batched_text(members, dtype))
    np_dtype = harness.DTYPES[dtype]
    size = np.dtype(np_dtype).itemsize
    batch = max(1, sizes.batch_bytes // ((m * k + k * n + m * n) * size))
    a, b = (rng.uniform(-1, 1, (batch, *s)).astype(np_dtype) for s in ((m, k), (k, n)))
    ours, theirs = np.zeros((batch, m, n), np_dtype), np.zeros((batch, m, n), np_dtype)
    expected = np.matmul(a.astype(np.float64), b)
    views = [x.transpose(1, 2, 0) for x in (a, b, ours)]  # (m, n, batch): row-major members

    def check(what: str) -> None:
        got = theirs if what.startswith("numpy") else ours
        harness.check_gemm(what, got, expected, np.abs(expected) + 1.0, k, np_dtype)
        got[...] = 0

    def ours_once() -> None:
        kernel(*views, group_size=batch, num_threads=1)

    contenders = [
        Contender("nanotc", harness.repeat(ours_once)),
        Contender("numpy", harness.repeat(lambda: np.matmul(a, b, out=theirs))),
    ]
    timings = harness.compare(f"{name} x{batch} {dtype}", contenders, check, settings)
    return Row(
        workload="layouts",
        shape=f"{name} x{batch}",
        dtype=dtype,
        threads=1,
        flops=2.0 * m * n * k * batch,
        nanotc=timings.pop("nanotc"),
        peers=timings,
        peak=harness.peak_gflops(dtype, 1),
        params="one launch over the batch per call, from Python",
    )


def run(settings: Settings, names: Sequence[str] | None = None, sizes: Sizes | None = None
        ) -> list[Row]:  # fmt: skip
    names = tuple(names or (QUICK_CASES if settings.quick else (*CASES, *BATCHES)))
    known = (*CASES, *BATCHES)
    unknown = set(names) - set(known)
    if unknown:
        raise ValueError(f"unknown cases: {', '.join(sorted(unknown))} (of {', '.join(known)})")
    sizes = sizes or (Sizes.quick() if settings.quick else Sizes())
    rng = np.random.default_rng(settings.seed)
    rows = []
    for dtype in settings.dtypes:
        for name in names:
            row = _batch_row if name in BATCHES else _row
            rows.append(row(name, dtype, sizes, settings, rng))
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_common_options(parser)
    names = (*CASES, *BATCHES)
    parser.add_argument(
        "--cases", type=harness.parse_list(harness.choice(names, "case")),
        help=f"of {','.join(names)}",
    )  # fmt: skip
    args = parser.parse_args(argv)
    settings = harness.settings_from(args, threads=(1,), dtypes=("f32", "f64"))
    harness.preamble(settings)
    rows = run(settings, args.cases)
    csv = None if args.no_csv else "layouts"
    harness.report(
        rows, "Layouts: row-major and transposed operands", [], csv, spread=settings.spread
    )


if __name__ == "__main__":
    main()
