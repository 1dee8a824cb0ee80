"""Tiles that read B's broadcast once per vector against the same tiles sharing one broadcast
per column, in the same rounds.

    python -m bench.broadcast_operands [--quick] [--budget S] [--threads 1,2]

Each kernel is compiled twice, for this host with `broadcast_operand_vectors` 2 (Zen 4's
rule: two-vector dot tiles, and FMA tiles whose last vector computes narrow, take B as each
product's `{1toN}` memory operand) and with it 0 (one broadcast per column), validated
against a float64 product of the same inputs, then timed in interleaved rounds
(`harness.compare`). The cases are W2's and W4's in-cache batches (members taken in a loop)
of the shapes the rule changes, W4's batch-reduce of bf16 32^3 tiles, and f32 32^3, whose
two whole vectors keep the shared broadcast either way: the noise control. On a host whose
FMAs take no broadcast operand (AVX2) both builds are the same code.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, replace

import ml_dtypes
import numpy as np

import nanotc
from bench import harness, kernels
from bench.harness import Settings
from nanotc import targets

CACHE_BYTES = 256 * 10**3  # a batch's operands, within L2 (W2's and W4's in-cache variants)
REDUCE_COUNT = 64  # members of the batch-reduce (W4's brgemm part)
BUILDS = {"per-vector": 2, "shared": 0}  # build name -> broadcast_operand_vectors


@dataclass(frozen=True)
class Case:
    inputs: str  # A's and B's type; C is f32
    shape: tuple[int, int, int]
    reduce: bool = False  # a batch-reduce into one C instead of a batch of C's

    @property
    def name(self) -> str:
        kind = "batch-reduce" if self.reduce else "batch"
        return f"{self.inputs} {'x'.join(map(str, self.shape))} {kind}"


CASES = (
    Case("f32", (20, 9, 20)),
    Case("bf16", (20, 9, 20)),
    Case("bf16", (32, 32, 32)),
    Case("bf16", (32, 32, 32), reduce=True),
    Case("f32", (32, 32, 32)),  # the control: the same code in both builds
)


@dataclass(frozen=True)
class Result:
    case: Case
    threads: int
    gflops: dict[str, float]  # by build
    ratio: float  # per-vector over shared, paired by round (`harness.speed_ratio`)


def builds(host: targets.Target) -> dict[str, targets.Target]:
    return {name: replace(host, broadcast_operand_vectors=n) for name, n in BUILDS.items()}


def source(case: Case) -> str:
    m, n, k = case.shape
    inputs = None if case.inputs == "f32" else case.inputs
    if case.reduce:
        return kernels.batch_reduce_repeated("f32", m, n, k, inputs=inputs)
    return kernels.batched_repeated("f32", m, n, k, inputs=inputs)


def measure(case: Case, settings: Settings, host: targets.Target) -> list[Result]:
    """The case's two builds timed in the same rounds, on each of the settings' threads."""
    m, n, k = case.shape
    rng = np.random.default_rng(settings.seed)
    dtype = ml_dtypes.bfloat16 if case.inputs == "bf16" else np.float32
    per_member = (m * k + k * n) * np.dtype(dtype).itemsize + (0 if case.reduce else m * n * 4)
    count = REDUCE_COUNT if case.reduce else max(2, CACHE_BYTES // per_member // 2 * 2)
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k, count)).astype(dtype))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n, count)).astype(dtype))
    x, y = a.astype(np.float64), b.astype(np.float64)
    if case.reduce:
        initial = np.zeros((m, n), np.float32, order="F")
        expected, bound = np.einsum("mki,kni->mn", x, y), np.einsum("mki,kni->mn", abs(x), abs(y))
    else:
        initial = np.asfortranarray(rng.uniform(-1, 1, (m, n, count)).astype(np.float32))
        expected = initial + np.einsum("mki,kni->mni", x, y)
        bound = abs(initial) + np.einsum("mki,kni->mni", abs(x), abs(y))
    c = initial.copy(order="F")
    compiled = {
        name: _kernel(nanotc.compile(source(case), target=t)) for name, t in builds(host).items()
    }

    def checked(what: str) -> None:
        harness.check_gemm(what, c, expected, bound, k * (count if case.reduce else 1), np.float32)

    results = []
    for threads in (1,) if case.reduce else settings.threads:
        contenders = [_contender(name, kernel, (a, b, c, initial), threads, case.reduce)
                      for name, kernel in compiled.items()]  # fmt: skip
        timings = harness.compare(
            f"{case.name} threads={threads}", contenders, checked, settings, 0.05, threads
        )
        flops = 2.0 * m * n * k * count
        gflops = {name: flops / t.seconds / 1e9 for name, t in timings.items()}
        ratio = harness.speed_ratio(timings["per-vector"], timings["shared"])
        results.append(Result(case, threads, gflops, ratio))
    return results


def _kernel(compilation: nanotc.Compilation) -> Callable[..., object]:
    (name,) = list(compilation)
    return compilation[name]


def _contender(name: str, kernel: Callable[..., object], arrays: tuple[np.ndarray, ...],
               threads: int, reduce: bool) -> harness.Contender:  # fmt: skip
    """`kernel` on (a, b, c) `reps` times; the validating call (reps 1) starts from C's
    initial values."""
    a, b, c, initial = arrays

    def call(reps: int) -> None:
        if reps == 1:
            np.copyto(c, initial)
        if reduce:
            kernel(a, b, c, reps, group_size=1)
        else:
            kernel(a, b, c, reps, group_size=threads, num_threads=threads)

    return harness.Contender(name, call)


def table(results: list[Result]) -> str:
    lines = [f"{'case':28s} thr  per-vector GF/s  shared GF/s  per-vector/shared"]
    for r in results:
        lines.append(
            f"{r.case.name:28s} {r.threads:3d}  {r.gflops['per-vector']:15.1f}"
            f"  {r.gflops['shared']:11.1f}  {r.ratio:17.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_common_options(parser)
    args = parser.parse_args(argv)
    settings = harness.settings_from(args, (1,), ("f32",))
    harness.preamble(settings)
    results = [r for case in CASES for r in measure(case, settings, targets.host())]
    print(table(results))


if __name__ == "__main__":
    main()
