"""The K loop's ceiling on this core: hand-scheduled AVX-512 f32 k steps against the peak loop.

    python -m bench.k_step [--steps 64,128] [--tiles 4x6,3x8,2x12,4x6u2,3x8u2,2x12u2,2x8e]
                           [--line-offset 16] [--call-ms 1]

A gemm's K loop does what the peak loop (`bench/peak.py`) does plus loads: each k step of a V x
N register tile (V vectors of 16 floats by N columns) loads V vectors of A and broadcasts N
elements of B, and issues V * N FMAs into V * N accumulators. Here each tile's k step is
written in assembly (inline in LLVM IR, so the compiler neither schedules nor allocates it),
`u2` unrolled twice, `e` with B as the FMAs' broadcast memory operands, its A (`steps` vectors
of V * 16 floats, consecutive) and B (N columns 1 KiB apart) in L1, both starting on a cache
line (`--line-offset`: A that many bytes past one, as numpy places arrays: 16 for large ones,
where every vector load of A spans two lines). Each loop is a real gemm,
checked against numpy, and timed in the same interleaved rounds as a loop of the same FMAs on
registers only ("fma-only", V x N = 24 FMAs a step). The percent of that loop is the ceiling a
K loop of that tile reaches on this core (before anything else a gemm does: C's loads and
stores, moving between tiles, A or B beyond L1): a target above it is out of reach for any code
on this machine. How long a timed call lasts matters too (`--call-ms`): on the AMX Xeon the
FMA-only loop ran 1.07-1.14x faster in 20 ms calls than in 1 ms calls, and the loops with
loads did not (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import ctypes
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from bench import harness
from bench.harness import Contender, Settings
from nanotc import targets
from nanotc.runtime import jit

B_COLUMN_BYTES = 1024  # B's leading dimension: 256 floats
CALL_SECONDS = 0.02  # a timed call: as long as the benchmarks' kernel calls
LANES = 16  # f32 in a zmm register
_LOOP = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64
)


@dataclass(frozen=True)
class Tile:
    """V vectors by N columns, the k step unrolled `unroll` times; B's elements broadcast into a
    register per column, or (`embedded`, suffix e) as every FMA's `{1to16}` memory operand;
    'fma-only' when `loads` is False (the peak loop's 24 FMAs a step on registers)."""

    vectors: int
    columns: int
    unroll: int = 1
    embedded: bool = False
    loads: bool = True

    @property
    def name(self) -> str:
        if not self.loads:
            return "fma-only"
        unrolled = f"u{self.unroll}" if self.unroll > 1 else ""
        return f"{self.vectors}x{self.columns}{'e' if self.embedded else ''}{unrolled}"

    @staticmethod
    def parse(text: str) -> Tile:
        """VxN[e][uU], e.g. 4x6, 2x8e, 3x8u2."""
        match = re.fullmatch(r"(\d+)x(\d+)(e?)(?:u(\d+))?", text)
        if match is None:
            raise argparse.ArgumentTypeError(f"{text!r}: expected VxN[e][uU], e.g. 2x8eu2")
        vectors, columns, embedded, unroll = match.groups()
        tile = Tile(int(vectors), int(columns), int(unroll or 1), embedded == "e")
        if tile.vectors < 1 or tile.columns < 1 or tile.unroll < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: vectors, columns and unrolling from 1")
        if tile.vectors * tile.columns + tile.vectors + 1 > 32:
            raise argparse.ArgumentTypeError(f"{text!r}: needs more than 32 zmm registers")
        return tile


FMA_ONLY = Tile(4, 6, loads=False)


def k_step_assembly(tile: Tile, step: int) -> list[str]:
    """One k step (the `step`-th of an unrolled loop body), AT&T syntax: A at %rax, B at %rcx."""
    v, n = tile.vectors, tile.columns
    a_regs = [v * n + i for i in range(v)]
    if not tile.loads:
        return [f"vfmadd231ps %zmm{a_regs[0]}, %zmm{a_regs[1]}, %zmm{j}" for j in range(v * n)]
    lines = [f"vmovups {(step * v + i) * 64}(%rax), %zmm{a_regs[i]}" for i in range(v)]
    for j in range(n):
        b_at = f"{j * B_COLUMN_BYTES + 4 * step}(%rcx)"
        if tile.embedded:
            lines += [f"vfmadd231ps {b_at}{{1to16}}, %zmm{a_regs[i]}, %zmm{j * v + i}"
                      for i in range(v)]  # fmt: skip
            continue
        b_reg = v * n + v + j % 2 if v * n + v + 1 < 32 else v * n + v
        lines.append(f"vbroadcastss {b_at}, %zmm{b_reg}")
        lines += [f"vfmadd231ps %zmm{a_regs[i]}, %zmm{b_reg}, %zmm{j * v + i}" for i in range(v)]
    return lines


def loop_assembly(tile: Tile) -> str:
    """Zero the accumulators, run `steps / unroll` bodies, store the accumulators to C."""
    v, n, u = tile.vectors, tile.columns, tile.unroll
    lines = ["movq $0, %rax", "movq $1, %rcx", "movq $3, %rdx", "movq $2, %r8"]
    lines += [f"vpxord %zmm{j}, %zmm{j}, %zmm{j}" for j in range(v * n)]
    if not tile.loads:  # the FMAs' operands: any finite values
        lines += [f"vmovups (%rax), %zmm{v * n + i}" for i in range(v)]
    lines.append("1:")
    for step in range(u):
        lines += k_step_assembly(tile, step)
    if tile.loads:
        lines += [f"addq $${u * v * 64}, %rax", f"addq $${4 * u}, %rcx"]
    lines += [f"subq $${u}, %rdx", "jnz 1b"]
    lines += [f"vmovups %zmm{j}, {64 * j}(%r8)" for j in range(v * n)]
    return "\n".join(lines)


def loop_ir(tile: Tile) -> str:
    """`void k_loop(ptr a, ptr b, ptr c, i64 steps, i64 reps)`: `reps` times, the tile's k
    steps over A and B into C."""
    asm = loop_assembly(tile).replace("\n", "\\0A")
    registers = ",".join(f"~{{{r}}}" for r in ("rax", "rcx", "rdx", "r8"))
    vectors = ",".join(f"~{{zmm{r}}}" for r in range(32))
    constraints = f"r,r,r,r,{registers},{vectors},~{{memory}},~{{flags}}"
    return f"""
define void @k_loop(ptr %a, ptr %b, ptr %c, i64 %steps, i64 %reps) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  call void asm sideeffect "{asm}", "{constraints}"(ptr %a, ptr %b, ptr %c, i64 %steps)
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, %reps
  br i1 %more, label %loop, label %exit
exit:
  ret void
}}
"""


class KLoop:
    """One tile's loop, compiled for this host, on its own A, B and C."""

    def __init__(self, tile: Tile, steps: int, rng: np.random.Generator, a_offset: int = 0):
        if steps % tile.unroll:
            raise ValueError(f"{tile.name}: {steps} steps are not a multiple of its unrolling")
        target = targets.host()
        self.tile, self.steps = tile, steps
        self._module = jit.JitModule(jit.optimize(loop_ir(tile), target), target)
        self._loop = _LOOP(self._module.address("k_loop"))
        rows = tile.vectors * LANES
        a = rng.uniform(-1, 1, (steps + 1) * rows).astype(np.float32)
        b = rng.uniform(-1, 1, (tile.columns, B_COLUMN_BYTES // 4)).astype(np.float32)
        self.a = harness.placed(a, a_offset)
        self.b = harness.placed(b.T, 0).T  # B's columns are b's rows: C order, on a line
        self.c = np.zeros((tile.columns, rows), np.float32)
        self._args = (self.a.ctypes.data, self.b.ctypes.data, self.c.ctypes.data, steps)

    def __call__(self, reps: int) -> None:
        self._loop(*self._args, reps)

    def check(self, what: str) -> None:
        """C must be the gemm of A's `steps` columns of rows and B's first `steps` rows."""
        if not self.tile.loads:
            return  # the FMA-only loop's sums are not a gemm
        rows = self.tile.vectors * LANES
        a = self.a[: self.steps * rows].reshape(self.steps, rows).astype(np.float64)
        b = self.b[:, : self.steps].astype(np.float64)
        expected = b @ a  # C's column j: sum over k of B(k, j) A(:, k)
        bound = np.abs(b) @ np.abs(a)
        harness.check_gemm(what, self.c, expected, bound, self.steps, np.float32)

    def flops(self) -> float:
        """Every loop, FMA-only too, issues V * N FMAs a k step."""
        return 2.0 * LANES * self.tile.vectors * self.tile.columns * self.steps


class Result(NamedTuple):
    steps: int
    tile: str
    gflops: float
    percent_fma_only: float  # of the FMA-only loop's FLOP rate, paired by round


def run(settings: Settings, tiles: Sequence[Tile], step_counts: Sequence[int],
        a_offset: int = 0, call_seconds: float = CALL_SECONDS) -> list[Result]:  # fmt: skip
    """For each step count, every tile and the FMA-only loop in the same rounds, each timed
    call lasting about `call_seconds`; A `a_offset` bytes past a cache line."""
    rng = np.random.default_rng(settings.seed)
    results = []
    for steps in step_counts:
        loops = [KLoop(tile, steps, rng, a_offset) for tile in (FMA_ONLY, *tiles)]
        contenders = [Contender(loop.tile.name, loop) for loop in loops]
        timings = harness.compare(
            f"k steps x {steps}", contenders, _check_by_name(loops), settings, call_seconds
        )
        base = timings[FMA_ONLY.name]
        for loop in loops:
            timing = timings[loop.tile.name]
            ratio = harness.speed_ratio(timing, base) * loop.flops() / loops[0].flops()
            results.append(Result(steps, loop.tile.name, loop.flops() / timing.seconds / 1e9,
                                  100 * ratio))  # fmt: skip
    return results


def _check_by_name(loops: Sequence[KLoop]) -> Callable[[str], None]:
    """The comparison's check: the check of the loop its message names first."""
    checks = {loop.tile.name: loop.check for loop in loops}
    return lambda what: checks[what.split()[0]](what)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiles", type=harness.parse_list(Tile.parse),
                        default=tuple(Tile.parse(t) for t in
                                      ("4x6", "3x8", "2x12", "4x6u2", "3x8u2", "2x12u2")),
                        help="register tiles VxN[uU], e.g. 4x6,3x8u2")  # fmt: skip
    steps = harness.int_between(2, B_COLUMN_BYTES // 4, "k steps")
    parser.add_argument("--steps", type=harness.parse_list(steps), default=(64, 128),
                        help="k steps per loop (A in L1 up to 128 steps of 4 vectors)")  # fmt: skip
    parser.add_argument("--line-offset", type=harness.line_offset(4), default=0,
                        help="bytes past a cache line where A starts (default 0; numpy "
                             "places large arrays 16 past one)")  # fmt: skip
    parser.add_argument("--call-ms", type=harness.int_between(1, 1000, "milliseconds"),
                        default=round(CALL_SECONDS * 1000),
                        help="milliseconds a timed call lasts (default 20)")  # fmt: skip
    harness.add_common_options(parser)
    args = parser.parse_args(argv)
    if "+avx512f" not in targets.host().llvm_features.split(","):
        parser.exit(0, "bench.k_step: this host has no AVX-512; nothing to measure\n")
    for tile in args.tiles:
        if uneven := [s for s in args.steps if s % tile.unroll]:
            parser.error(f"--steps: {uneven} not a multiple of {tile.name}'s unrolling "
                         f"({tile.unroll})")  # fmt: skip
    print(f"{'steps':>5}  {'tile':<8}  {'GFLOP/s':>8}  {'% fma-only':>10}")
    settings = harness.settings_from(args, (1,), ("f32",))
    for r in run(settings, args.tiles, args.steps, args.line_offset, args.call_ms / 1000):
        print(f"{r.steps:>5}  {r.tile:<8}  {r.gflops:>8.1f}  {r.percent_fma_only:>10.1f}")


if __name__ == "__main__":
    main()
