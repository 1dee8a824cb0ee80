"""What a bf16 nanokernel's helper instructions cost beside its dot products.

A register-resident loop of 24 independent `vdpbf16ps` (both dot-product ports busy) is timed
alone and with a few instructions of one kind added to each step: the permutes, unpacks,
shuffles, broadcasts and widening loads that interleave A's K pairs, bring B's, or reorder
accumulators. Each mix prints its time over the dot products' alone: 1.00 means the added
instructions issued on other ports for free. A sweep over the number of independent
accumulator chains shows the dot product's latency: below latency x throughput chains, a
step takes the latency whatever the count. Times are relative, so no clock rate is assumed.

This is where the register-tile model's costs of A's interleave come from
(`nanotc.lowering.register_tile`, docs/benchmarks.md). Run on an AVX512-BF16 host:
`python -m bench.instruction_mix`.
"""

from __future__ import annotations

import argparse
import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass

from nanotc import targets
from nanotc.cli.options import positive
from nanotc.runtime import jit

DOTS = 24  # dot products per step: 12 cycles at two per cycle, enough to hide the latency
SCRATCH = range(DOTS, 30)  # destinations of the added instructions, past the chains
SOURCES = "%zmm30, %zmm31"
STEPS = 2_000_000
COUNTS = (4, 8, 16)  # added instructions per step


@dataclass(frozen=True)
class Mix:
    name: str
    template: str  # one added instruction; {d} is its destination, ($0) a 64-byte buffer


MIXES = (
    Mix("vpermt2w after a load (A's in-order interleave)",
        "vmovdqu64 ($0), %zmm{d}\nvpermt2w %zmm30, %zmm31, %zmm{d}"),
    Mix("vpermt2w after a 256-bit broadcast load",
        "vbroadcasti64x4 ($0), %zmm{d}\nvpermt2w %zmm30, %zmm31, %zmm{d}"),
    Mix("vpermw (one-source word permute)", "vpermw %zmm30, %zmm31, %zmm{d}"),
    Mix("vpunpcklwd (A's in-lane interleave)", "vpunpcklwd %zmm30, %zmm31, %zmm{d}"),
    Mix("vpshufd (B's pair from a 128-bit lane)", "vpshufd $$0, %zmm30, %zmm{d}"),
    Mix("vpermt2ps after a load (accumulator reorder)",
        "vmovups ($0), %zmm{d}\nvpermt2ps %zmm30, %zmm31, %zmm{d}"),
    Mix("vinserti64x4 from memory", "vinserti64x4 $$1, ($0), %zmm30, %zmm{d}"),
    Mix("vpbroadcastd from a general register", "vpbroadcastd %ecx, %zmm{d}"),
    Mix("vpbroadcastd from memory", "vpbroadcastd ($0), %zmm{d}"),
    Mix("vpmovzxwd from memory (odd K's last column)", "vpmovzxwd ($0), %zmm{d}"),
    Mix("vpsrld", "vpsrld $$16, %zmm30, %zmm{d}"),
)  # fmt: skip


def loop_asm(dots: int, added: list[str]) -> str:
    """The loop's assembly: `dots` dot products on chains zmm0.., `added` spread among them."""
    body = [f"vdpbf16ps {SOURCES}, %zmm{c}" for c in range(dots)]
    for i, instruction in enumerate(added):
        body.insert((i + 1) * len(body) // (len(added) + 1), instruction)
    return "\n".join(["1:", *body, "dec %rax", "jnz 1b"])


def loop_module(dots: int, added: list[str]) -> str:
    """LLVM IR of `void mix(i8* buffer, i64 steps)` running the loop `steps` times."""
    asm = ("mov $1, %rax\nxor %ecx, %ecx\n" + loop_asm(dots, added)).replace("\n", "\\0A")
    clobbers = ",".join(f"~{{{r}}}" for r in ["rax", "rcx", *(f"zmm{z}" for z in range(32))])
    constraints = f"r,r,{clobbers},~{{memory}},~{{flags}}"
    return f"""
define void @mix(i8* %buffer, i64 %steps) {{
  call void asm sideeffect "{asm}", "{constraints}"(i8* %buffer, i64 %steps)
  ret void
}}
"""


def timed(
    dots: int, added: list[str], target: targets.Target, steps: int = STEPS
) -> Callable[[], float]:
    """A function timing one run of `steps` steps of the loop (seconds)."""
    native = jit.JitModule(jit.optimize(loop_module(dots, added), target), target)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(native.address("mix"))
    buffer = (ctypes.c_char * 128)()

    def run(native: jit.JitModule = native) -> float:
        start = time.perf_counter()
        fn(ctypes.addressof(buffer), steps)
        return time.perf_counter() - start

    return run


def instances(mix: Mix, count: int) -> list[str]:
    return [mix.template.format(d=SCRATCH[i % len(SCRATCH)]) for i in range(count)]


def best_of(runs: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Each loop's best time over `rounds` interleaved rounds."""
    best = {name: float("inf") for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            best[name] = min(best[name], run())
    return best


def measure(
    target: targets.Target, rounds: int = 5, steps: int = STEPS
) -> tuple[dict[int, float], dict[str, float]]:
    """(time per step of c chains over the time of DOTS chains' step x c / DOTS, by c) and
    (each mix's time over the dot products' alone, by "name x count")."""
    chains = (4, 6, 8, 12, 16, DOTS)
    runs = {f"chains {c}": timed(c, [], target, steps) for c in chains}
    for mix in MIXES:
        for n in COUNTS:
            runs[f"{mix.name} x{n}"] = timed(DOTS, instances(mix, n), target, steps)
    best = best_of(runs, rounds)
    alone = best[f"chains {DOTS}"]
    sweep = {c: best[f"chains {c}"] / (alone * c / DOTS) for c in chains}
    mixes = {name: t / alone for name, t in best.items() if not name.startswith("chains")}
    return sweep, mixes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=positive, default=5, help="rounds (default 5)")
    args = parser.parse_args()
    target = targets.host()
    if not target.bf16_dot:
        raise SystemExit("instruction_mix: this host has no AVX512-BF16 dot product")
    sweep, mixes = measure(target, args.rounds)
    print("independent chains: time per step over the throughput bound (1.00 = bound)")
    for c, ratio in sweep.items():
        print(f"  {c:2d} chains  {ratio:5.2f}")
    print(f"{DOTS} vdpbf16ps per step with added instructions: time over the dots alone")
    for name, ratio in mixes.items():
        print(f"  {name:60s} {ratio:5.2f}")


if __name__ == "__main__":
    main()
