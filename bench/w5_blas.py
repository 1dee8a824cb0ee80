"""W5: the memory-bound instructions against this machine's copy bandwidth.

copy (axpby with alpha 1, beta 0), axpby, hadamard, sum, gemv.n, gemv.t and ger on dynamic
vectors and column-major matrices; fp32 and fp64; 1 and 2 threads. nanotc's kernel
(`kernels.sliced`) splits the operands into one slice per work-group, one work-group per
thread. GB/s counts the bytes each instruction must move: its operands read once, its output
written once (and read too when beta is not 0). `% copy` is nanotc's GB/s over the rate of
glibc's memcpy (the `memcpy` peer of the copy row of the same variant, dtype and thread
count, one memcpy of a slice per thread), the best a copy reaches here.

Two variants, as in W2: `memory` (operands of ~200 MB together, one pass per timed call) and
`cache` (~512 KB, in L2, many passes per timed call; the peers loop in Python, which costs
them microseconds a pass).

Peers on the same arrays: memcpy (copy only); numpy's OpenBLAS through its CBLAS (`openblas`:
copy, axpby, gemv, ger; threads as set for numpy); torch (copy_, mul_/add_, addcmul_, sum,
mv, addr_); numpy expressions (np.copyto, ufuncs with `out=`, sum, dot, outer: one thread,
several passes where numpy has no single routine).

    python -m bench.w5_blas [--variants memory,cache] [--ops axpby,gemv.t] [--line-offset 16] ...
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from bench import harness, kernels
from bench.harness import Contender, Row, Settings
from bench.peers import Peers, cblas, discover, memory, torch_peer
from bench.peers.threads import blas_threads, blas_threads_note

OPS = kernels.SLICED_OPS
QUICK_OPS = ("copy", "axpby", "sum", "gemv.t")
VARIANTS = ("memory", "cache")
ALIGN = 64  # elements: slices start 64 elements apart, whole vectors of any target


@dataclass(frozen=True)
class Sizes:
    working_set: int = 200 * 10**6  # bytes of all operands, memory variant
    cache: int = 512 * 10**3  # bytes of all operands, cache variant
    call_seconds: float = 0.05  # duration of one timed call of the cache variant

    @staticmethod
    def quick() -> Sizes:
        return Sizes(working_set=4 * 10**6, cache=64 * 10**3, call_seconds=0.005)


@dataclass
class Operands:
    """One instruction's arguments in the kernel's order, the one it writes, what that
    should hold after one call (float64), a bound on the rounding error, the length of the
    sums behind each element, and the bytes and flops of one call."""

    args: dict[str, np.ndarray]
    out: str
    expected: np.ndarray
    bound: np.ndarray
    depth: int
    bytes: float
    flops: float

    def __post_init__(self) -> None:
        self.initial = self.args[self.out].copy(order="A")

    def reset(self) -> None:
        np.copyto(self.args[self.out], self.initial)

    def check(self, what: str) -> None:
        got = self.args[self.out]
        dtype = got.dtype.type
        if got.ndim == 1 and self.expected.ndim == 0:  # sum: per-work-group partial sums
            got = np.asarray(got.astype(np.float64).sum())
        harness.check_gemm(what, got, self.expected, self.bound, self.depth, dtype)
        self.reset()


def operands(op: str, dtype: str, total: int, threads: int, rng: np.random.Generator,
             line_offset: int | None = None) -> Operands:  # fmt: skip
    """Random operands of `op` filling about `total` bytes, its slices divisible by `threads`;
    each starting `line_offset` bytes past a cache line (default: where numpy puts it)."""
    np_dtype = harness.DTYPES[dtype]
    size = np.dtype(np_dtype).itemsize
    step = ALIGN * threads

    def rand(*shape: int) -> np.ndarray:
        values = np.asfortranarray(rng.uniform(-1, 1, shape).astype(np_dtype))
        return values if line_offset is None else harness.placed(values, line_offset)

    if op in ("gemv.n", "gemv.t", "ger"):
        side = max(step, math.isqrt(total // size) // step * step)
        a, x, y = rand(side, side), rand(side), rand(side)
        a64, x64, y64 = (v.astype(np.float64) for v in (a, x, y))
        if op == "ger":
            args = {"x": x, "y": y, "a": a}
            expected, bound = a64 + np.outer(x64, y64), np.abs(a64) + np.outer(abs(x64), abs(y64))
            return Operands(args, "a", expected, bound, 1, 2.0 * side * side * size, 2.0 * side**2)
        mat = a64 if op == "gemv.n" else a64.T
        expected, bound = mat @ x64, np.abs(mat) @ np.abs(x64)
        y[:] = np.nan  # beta = 0: the output must not be read
        bytes_ = float(side * side + 2 * side) * size
        return Operands({"a": a, "x": x, "y": y}, "y", expected, bound, side, bytes_, 2.0 * side**2)
    vectors = {"copy": 2, "axpby": 2, "hadamard": 3, "sum": 1}[op]
    n = max(step, total // (vectors * size) // step * step)
    x, y, z = rand(n), rand(n), rand(n)
    x64, y64, z64 = (v.astype(np.float64) for v in (x, y, z))
    if op == "copy":
        y[:] = np.nan
        return Operands({"x": x, "y": y}, "y", x64, np.abs(x64), 1, 2.0 * n * size, 0.0)
    if op == "axpby":
        expected, bound = 1.5 * x64 + 0.5 * y64, 1.5 * abs(x64) + 0.5 * abs(y64)
        return Operands({"x": x, "y": y}, "y", expected, bound, 1, 3.0 * n * size, 3.0 * n)
    if op == "hadamard":
        expected, bound = 1.5 * x64 * y64 + z64, 1.5 * abs(x64 * y64) + abs(z64)
        args = {"x": x, "y": y, "z": z}
        return Operands(args, "z", expected, bound, 1, 4.0 * n * size, 3.0 * n)
    partials = np.full(threads, np.nan, dtype=np_dtype)
    expected, bound = np.asarray(x64.sum()), np.asarray(np.abs(x64).sum())
    return Operands({"x": x, "s": partials}, "s", expected, bound, n, float(n * size), float(n))


def nanotc_call(op: str, dtype: str, data: Operands, threads: int) -> Callable[[int], None]:
    kernel = kernels.compiled(kernels.sliced(op, dtype))
    arrays = list(data.args.values())

    def call(reps: int) -> None:
        kernel(*arrays, reps, group_size=threads, num_threads=threads)

    return call


def _numpy_calls(op: str, args: dict[str, np.ndarray]) -> Callable[[], object]:
    """numpy's one pass (or fewest passes) of `op` on the same arrays."""
    if op == "copy":
        return lambda: np.copyto(args["y"], args["x"])
    if op == "sum":
        x, partials = args["x"], args["s"]

        def total() -> None:
            partials[0] = x.sum()
            partials[1:] = 0

        return total
    if op in ("gemv.n", "gemv.t"):
        mat = args["a"] if op == "gemv.n" else args["a"].T
        return lambda: np.dot(mat, args["x"], out=args["y"])
    if op == "ger":
        a, x, y = args["a"], args["x"], args["y"]
        return lambda: np.add(a, np.outer(x, y), out=a)
    if op == "axpby":
        x, y = args["x"], args["y"]
        scratch = np.empty_like(x)

        def axpby() -> None:
            np.multiply(x, 1.5, out=scratch)
            np.multiply(y, 0.5, out=y)
            np.add(y, scratch, out=y)

        return axpby
    x, y, z = args["x"], args["y"], args["z"]
    scratch = np.empty_like(x)

    def hadamard() -> None:
        np.multiply(x, y, out=scratch)
        np.multiply(scratch, 1.5, out=scratch)
        np.add(z, scratch, out=z)

    return hadamard


def _cblas_call(op: str, blas: cblas.Cblas, args: dict[str, np.ndarray]) -> Callable[[], object]:
    if op == "copy":
        return lambda: blas.copy(args["x"], args["y"])
    if op == "axpby":
        return lambda: blas.axpby(1.5, args["x"], 0.5, args["y"])
    if op in ("gemv.n", "gemv.t"):
        return lambda: blas.gemv(op == "gemv.t", args["a"], args["x"], 0.0, args["y"])
    return lambda: blas.ger(args["x"], args["y"], args["a"])


def _torch_call(op: str, torch: ModuleType, args: dict[str, np.ndarray]) -> Callable[[], object]:
    t = {name: torch.from_numpy(array) for name, array in args.items()}
    if op == "copy":
        return lambda: t["y"].copy_(t["x"])
    if op == "axpby":
        return lambda: t["y"].mul_(0.5).add_(t["x"], alpha=1.5)
    if op == "hadamard":
        return lambda: t["z"].addcmul_(t["x"], t["y"], value=1.5)
    if op == "sum":
        first = t["s"][0]
        return lambda: (torch.sum(t["x"], 0, out=first), t["s"][1:].zero_())
    # Column-major a is the row-major a^T: a x = (a^T)^T x, a += x y^T is a^T += y x^T.
    at = t["a"].T
    if op == "gemv.n":
        return lambda: torch.mv(at.T, t["x"], out=t["y"])
    if op == "gemv.t":
        return lambda: torch.mv(at, t["x"], out=t["y"])
    return lambda: at.addr_(t["y"], t["x"])


CBLAS_OPS = ("copy", "axpby", "gemv.n", "gemv.t", "ger")


def peer_contenders(op: str, data: Operands, threads: int, peers: Peers) -> list[Contender]:
    args = data.args
    contenders = []
    copier = memory.load()
    if op == "copy" and not isinstance(copier, str):

        def copy(reps: int) -> float:
            return copier.copy(args["x"], args["y"], reps, threads)

        contenders.append(Contender("memcpy", copy))
    blas = cblas.load()
    if op in CBLAS_OPS and not isinstance(blas, str):
        call = harness.repeat(_cblas_call(op, blas, args))
        contenders.append(Contender("openblas", call, blas_threads(threads)))
    if peers.torch is not None:
        call = harness.repeat(_torch_call(op, peers.torch, args))
        contenders.append(Contender("torch", call, torch_peer.threads(peers.torch, threads)))
    contenders.append(Contender("numpy", harness.repeat(_numpy_calls(op, args))))
    return contenders


def run(
    settings: Settings,
    peers: Peers | None = None,
    ops: Sequence[str] | None = None,
    variants: Sequence[str] = VARIANTS,
    sizes: Sizes | None = None,
    line_offset: int | None = None,
) -> list[Row]:
    """One row per (variant, dtype, op, threads); copy first, for the `% copy` reference.
    `line_offset`: operands start that many bytes past a cache line (default: as allocated)."""
    peers = peers if peers is not None else discover(settings.peers)
    ops = tuple(ops or (QUICK_OPS if settings.quick else OPS))
    unknown = set(ops) - set(OPS) | set(variants) - set(VARIANTS)
    if unknown:
        raise ValueError(f"unknown ops or variants: {', '.join(sorted(unknown))}")
    ops = ("copy", *(op for op in ops if op != "copy"))
    sizes = sizes or (Sizes.quick() if settings.quick else Sizes())
    rng = np.random.default_rng(settings.seed)
    rows = []
    for variant in variants:
        total = sizes.working_set if variant == "memory" else sizes.cache
        call_seconds = None if variant == "memory" else sizes.call_seconds
        for dtype in settings.dtypes:
            for threads in settings.threads:
                copy_rate = None
                for op in ops:
                    data = operands(op, dtype, total, threads, rng, line_offset)
                    row = _row(op, variant, dtype, threads, data, settings, peers, call_seconds)
                    if op == "copy" and "memcpy" in row.peers:
                        copy_rate = row.gbs(row.peers["memcpy"])
                    row.reference_gbs = copy_rate
                    rows.append(row)
    return rows


def _row(
    op: str,
    variant: str,
    dtype: str,
    threads: int,
    data: Operands,
    settings: Settings,
    peers: Peers,
    call_seconds: float | None,
) -> Row:
    contenders = [
        Contender("nanotc", nanotc_call(op, dtype, data, threads)),
        *peer_contenders(op, data, threads, peers),
    ]
    shape = "x".join(str(s) for s in data.args["a" if "a" in data.args else "x"].shape)
    label = f"{op} {shape} {dtype} threads={threads} ({variant})"
    data.reset()
    timings = harness.compare(label, contenders, data.check, settings, call_seconds, threads)
    return Row(
        workload="w5",
        variant=variant,
        shape=f"{op} {shape}",
        dtype=dtype,
        threads=threads,
        flops=data.flops,
        bytes=data.bytes,
        nanotc=timings.pop("nanotc"),
        peers=timings,
        peak=harness.peak_gflops(dtype, threads),
        params=f"{data.bytes:.0f} bytes moved per call",
        note=blas_threads_note(threads),
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_common_options(parser)
    parser.add_argument(
        "--ops", type=harness.parse_list(harness.choice(OPS, "op")), help=f"of {','.join(OPS)}"
    )
    parser.add_argument(
        "--variants", type=harness.parse_list(harness.choice(VARIANTS, "variant")),
        help=f"of {','.join(VARIANTS)} (default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--line-offset", type=harness.line_offset(1),
        help="bytes past a cache line where operands start: a multiple of every --dtypes' "
        "element size below 64 (f32: 4, f64: 8)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    settings = harness.settings_from(args, threads=(1, 2), dtypes=("f32", "f64"))
    if args.line_offset is not None:
        for dtype in settings.dtypes:
            if args.line_offset % (size := np.dtype(harness.DTYPES[dtype]).itemsize):
                parser.error(f"argument --line-offset: expected a multiple of {size} (the "
                             f"element size of {dtype}: every --dtypes' operands start there), "
                             f"got {args.line_offset}")  # fmt: skip
    harness.preamble(settings)
    peers = discover(settings.peers)
    variants = tuple(args.variants or VARIANTS)
    rows = run(settings, peers, args.ops, variants, line_offset=args.line_offset)
    csv = None if args.no_csv else "w5_blas"
    harness.report(
        rows,
        "W5 memory-bound instructions against copy bandwidth",
        peers.notes,
        csv,
        spread=settings.spread,
    )


if __name__ == "__main__":
    main()
