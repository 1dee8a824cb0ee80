"""Launch latency of small batched gemms: microseconds per call, by way of launching.

    python -m bench.launch [--calls 5000] [--runs 7]

Each case is a batch of f32 gemms C_i += A_i B_i small enough that starting the call is most
of its time. `call` is `kernel(A, B, C, group_size=batch)` on the same arrays every time (run
by the native launch of `nanotc.runtime.fast_launch` once the kernel has bound them);
`prepared` is the launch `kernel.prepare` returns for them; `numpy` is `np.matmul` of the
same batch as (batch, m, k) arrays into `out`. A case takes the threads of a launch that
does not say `num_threads` (`chunks` of work-groups), unless it names them. Each way's
result is first checked against numpy's (C_i's values before count); the time is the best
of `--runs` timings of `--calls` calls each.

A second table times a call of `y := a x + y` on 16 elements for each type of the scalar
`a` (and of x and y), given as a Python float, a numpy scalar of the type and a Python int: a
launch's cost beside its scalars' conversion.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from bench import kernels
from bench.harness import ValidationError
from nanotc.cli.options import positive
from nanotc.ir.types import ScalarType, numpy_dtype


class Case(NamedTuple):
    size: int  # M = N = K
    batch: int
    threads: int | None  # None: as a launch that does not say num_threads


CASES = (Case(8, 4, 1), Case(16, 26, None), Case(16, 64, None), Case(16, 256, None))


class Timed(NamedTuple):
    chunks: int
    microseconds: dict[str, float]  # way of launching -> best time per call


def launches(case: Case) -> tuple[int, dict[str, Callable[[], object]]]:
    """The chunks of the case's launch and its ways of launching, each checked once."""
    m, batch = case.size, case.batch
    rng = np.random.default_rng(0)
    a, b = (np.asfortranarray(rng.uniform(-1, 1, (m, m, batch)).astype(np.float32)) for _ in "ab")
    c = np.zeros((m, m, batch), np.float32, order="F")
    kernel = kernels.compiled(kernels.batched("f32", m, m, m))
    prepared = kernel.prepare(a, b, c, group_size=batch, num_threads=case.threads)
    rows_a, rows_b = (np.ascontiguousarray(x.transpose(2, 0, 1)) for x in (a, b))
    out = np.empty((batch, m, m), np.float32)
    ways: dict[str, Callable[[], object]] = {
        "call": lambda: kernel(a, b, c, group_size=batch, num_threads=case.threads),
        "prepared": prepared,
        "numpy": lambda: np.matmul(rows_a, rows_b, out=out),
    }
    before = np.asfortranarray(rng.uniform(-1, 1, c.shape).astype(np.float32))
    product = np.einsum("ikg,kjg->ijg", a.astype(np.float64), b.astype(np.float64))
    for name, launch in ways.items():
        c[...] = before
        launch()
        numpy = name == "numpy"
        got, expected = (out.transpose(1, 2, 0), product) if numpy else (c, before + product)
        if not np.allclose(got, expected, rtol=1e-4, atol=1e-4 * m):
            raise ValidationError(f"{name}: wrong result for f32 {m}^3 x {batch}")
    return len(prepared._work.chunks), ways


def measure(case: Case, calls: int, runs: int) -> Timed:
    chunks, ways = launches(case)
    times = {
        name: min(timeit.repeat(launch, number=calls, repeat=runs)) / calls * 1e6
        for name, launch in ways.items()
    }
    return Timed(chunks, times)


SCALAR_TYPES = ("f64", "f32", "f16", "bf16")
SCALAR_KINDS = ("Python float", "numpy scalar", "Python int")


def scalar_launches(t: str) -> dict[str, Callable[[], object]]:
    """`y := a x + y` on 16 elements of type t, its scalar a given as a Python float, a
    numpy scalar of the type and a Python int; each checked once."""
    kernel = kernels.compiled(f"""func @axpy(%a: {t}, %x: memref<{t}x16>, %y: memref<{t}x16>) {{
    axpby.n %a, %x, 1.0, %y : {t}, memref<{t}x16>, {t}, memref<{t}x16>
}}""")
    dtype = numpy_dtype(ScalarType(t))
    x, y = np.arange(16).astype(dtype), np.ones(16, dtype)
    launches: dict[str, Callable[[], object]] = {}
    for kind, a in zip(SCALAR_KINDS, (0.5, dtype.type(0.5), 2)):
        y[...] = 1
        kernel(a, x, y, group_size=1)
        if not np.array_equal(y.astype(np.float64), float(a) * np.arange(16) + 1):
            raise ValidationError(f"{t} axpby, a {kind}: wrong result")
        launches[kind] = lambda a=a: kernel(a, x, y, group_size=1)
    return launches


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=positive, default=5000, help="calls per timing (5000)")
    parser.add_argument("--runs", type=positive, default=7, help="timings per way (best: 7)")
    args = parser.parse_args(argv)
    print(f"f32 batched gemms; microseconds per call, best of {args.runs} x {args.calls} calls")
    print("| member | batch | chunks | call | prepared | numpy matmul |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for case in CASES:
        t = measure(case, args.calls, args.runs)
        us = t.microseconds
        print(f"| {case.size}^3 | {case.batch} | {t.chunks} | {us['call']:.2f} | "
              f"{us['prepared']:.2f} | {us['numpy']:.2f} |")  # fmt: skip
    print()
    print("| scalar type | " + " | ".join(f"a {kind}" for kind in SCALAR_KINDS) + " |")
    print("| --- |" + " ---: |" * len(SCALAR_KINDS))
    for t in SCALAR_TYPES:
        times = [
            min(timeit.repeat(call, number=args.calls, repeat=args.runs)) / args.calls * 1e6
            for call in scalar_launches(t).values()
        ]
        print(f"| {t} | " + " | ".join(f"{us:.2f}" for us in times) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
