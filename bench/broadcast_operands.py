"""Two ways for a tile to read B, each against the broadcasts it replaces, in the same rounds.

    python -m bench.broadcast_operands [--quick] [--budget S] [--threads 1,2]

Each rule is a target field that Zen 4's description sets; each kernel is compiled twice for
this host, with the field as measured and with it 0, validated against a float64 product of
the same inputs, then timed in interleaved rounds (`harness.compare`):

  per-vector  `broadcast_operand_vectors` 2: two-vector dot tiles, and FMA tiles whose last
              vector computes narrow, take B as each product's `{1toN}` memory operand
              (against one broadcast per column, shared by the vectors)
  quads       `broadcast_loads_per_cycle` 2: one-vector f32 tiles of ymm or xmm FMAs with K
              unrolled take their even columns' elements four at a time from a 128-bit load
              and in-lane shuffles (against a broadcast load per element)

The cases are W2's and W4's in-cache batches (members taken in a loop) of shapes each rule
changes, W4's batch-reduce of bf16 32^3 tiles, and for each rule a control whose code is the
same in both builds (f32 32^3's two whole vectors; f32 16^3's one zmm vector). On a host
without the rule's measured rate both builds are the same code.
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


@dataclass(frozen=True)
class Case:
    inputs: str  # A's and B's type; C is f32
    shape: tuple[int, int, int]
    reduce: bool = False  # a batch-reduce into one C instead of a batch of C's

    @property
    def name(self) -> str:
        kind = "batch-reduce" if self.reduce else "batch"
        return f"{self.inputs} {'x'.join(map(str, self.shape))} {kind}"


@dataclass(frozen=True)
class Rule:
    """A target field that makes tiles read B in another way, and the cases it changes; the
    last case is the control, the same code in both builds."""

    name: str  # the build with the field as measured
    without: str  # the build with the field 0
    field: str
    measured: float
    mark: str  # what `--emit nano` shows where the rule applies
    cases: tuple[Case, ...]

    @property
    def control(self) -> Case:
        return self.cases[-1]


RULES = (
    Rule("per-vector", "shared", "broadcast_operand_vectors", 2, "{1toN}", (
        Case("f32", (20, 9, 20)),
        Case("bf16", (20, 9, 20)),
        Case("bf16", (32, 32, 32)),
        Case("bf16", (32, 32, 32), reduce=True),
        Case("f32", (32, 32, 32)),
    )),
    Rule("quads", "broadcasts", "broadcast_loads_per_cycle", 2.0, "vbroadcast128", (
        Case("f32", (8, 8, 8)),
        Case("f32", (8, 16, 8)),
        Case("f32", (4, 8, 8)),
        Case("f32", (16, 16, 16)),
    )),
)  # fmt: skip


@dataclass(frozen=True)
class Result:
    rule: Rule
    case: Case
    threads: int
    gflops: dict[str, float]  # by build
    ratio: float  # the rule's build over the other, paired by round (`harness.speed_ratio`)


def builds(host: targets.Target, rule: Rule) -> dict[str, targets.Target]:
    """The rule's build, then the other."""
    return {
        rule.name: replace(host, **{rule.field: rule.measured}),
        rule.without: replace(host, **{rule.field: 0}),
    }


def source(case: Case) -> str:
    m, n, k = case.shape
    inputs = None if case.inputs == "f32" else case.inputs
    if case.reduce:
        return kernels.batch_reduce_repeated("f32", m, n, k, inputs=inputs)
    return kernels.batched_repeated("f32", m, n, k, inputs=inputs)


def measure(rule: Rule, case: Case, settings: Settings, host: targets.Target) -> list[Result]:
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
        name: _kernel(nanotc.compile(source(case), target=t))
        for name, t in builds(host, rule).items()
    }

    def checked(what: str) -> None:
        harness.check_gemm(what, c, expected, bound, k * (count if case.reduce else 1), np.float32)

    results = []
    for threads in (1,) if case.reduce else settings.threads:
        contenders = [_contender(name, kernel, (a, b, c, initial), threads, case.reduce)
                      for name, kernel in compiled.items()]  # fmt: skip
        timings = harness.compare(
            f"{rule.name}: {case.name} threads={threads}",
            contenders,
            checked,
            settings,
            0.05,
            threads,
        )
        flops = 2.0 * m * n * k * count
        gflops = {name: flops / t.seconds / 1e9 for name, t in timings.items()}
        ratio = harness.speed_ratio(timings[rule.name], timings[rule.without])
        results.append(Result(rule, case, threads, gflops, ratio))
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
    """One table per rule."""
    lines: list[str] = []
    for rule in dict.fromkeys(r.rule for r in results):
        on, off = f"{rule.name} GF/s", f"{rule.without} GF/s"
        ratio = f"{rule.name}/{rule.without}"
        if lines:
            lines.append("")
        lines.append(f"{'case':28s} thr  {on:>16s}  {off:>16s}  {ratio:>21s}")
        for r in (r for r in results if r.rule == rule):
            lines.append(
                f"{r.case.name:28s} {r.threads:3d}  {r.gflops[rule.name]:16.1f}"
                f"  {r.gflops[rule.without]:16.1f}  {r.ratio:21.3f}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_common_options(parser)
    args = parser.parse_args(argv)
    settings = harness.settings_from(args, (1,), ("f32",))
    harness.preamble(settings)
    host = targets.host()
    cases = [(rule, case) for rule in RULES for case in rule.cases]
    results = [r for rule, case in cases for r in measure(rule, case, settings, host)]
    print(table(results))


if __name__ == "__main__":
    main()
