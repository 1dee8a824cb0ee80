"""Cold and warm compile times through the kernel cache, each in a fresh process.

    python -m bench.compile_time [--runs 5] [--stages]

For each kernel, `cold` is `nanotc.compile(source)` in a new process with an empty cache
directory (parse, check, lower, emit LLVM IR, optimise, generate code, store the entry);
`warm` is the same call in another new process once the entry exists (parse, check, load the
object file). Both exclude `import nanotc`, reported separately. Medians over `--runs` processes.

`--stages` instead splits a cold compile into its stages, in this process (after one compile of
each kernel, so the first one's one-time costs are not counted), medians over `--runs`
compiles: parse and check, nanotc's lowering, emitting LLVM IR, printing it as text, LLVM's
optimisation (parsing the text, verifying, the O2 passes) and its code generation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import kernels
from nanotc.cli.options import positive

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, sys, time
start = time.perf_counter()
import nanotc
imported = time.perf_counter()
compilation = nanotc.compile(sys.stdin.read())
done = time.perf_counter()
print(json.dumps({"import": imported - start, "compile": done - imported,
                  "origin": compilation.origin}))
"""


def cases() -> dict[str, str]:
    """Kernel name -> source: from a tiny fused kernel to gemms with both lowering paths."""
    from nanotc import recipes

    os.environ["NANOTC_CACHE"] = "0"  # building the recipe here must not fill a cache
    recipe = recipes.tall_and_skinny("f32", 16, 64).source
    return {
        "fused_kernel (examples/)": (ROOT / "examples" / "fused_kernel.ir").read_text(),
        "W2 batched 64x64x64 f32": kernels.batched("f32", 64, 64, 64),
        "W3 static 12544x64x147 f32": kernels.single("f32", 12544, 64, 147),
        "W1 dynamic column block f64": kernels.column_blocks("f64", 128),
        "dynamic gemm.t.n f32": kernels.dynamic("f32", "t.n"),
        "dynamic gemm.n.t f32": kernels.dynamic("f32", "n.t"),
        "dynamic row-major A, B, C f32": kernels.dynamic("f32", row_major=True),
        "tall_and_skinny f32 N=16 K=64": recipe,
        # on AMX hosts: exact tiles, packed one iteration ahead (two copies of the loop)
        "W4 batched 35x9x35 bf16": kernels.batched_repeated("f32", 35, 9, 35, inputs="bf16"),
        "W4 MLP column block bf16": kernels.column_blocks("f32", 1024, inputs="bf16"),
    }


def run_child(source: str, cache_dir: str) -> dict[str, float | str]:
    env = {**os.environ, "NANOTC_CACHE_DIR": cache_dir}
    env.pop("NANOTC_CACHE", None)
    result = subprocess.run([sys.executable, "-c", CHILD], input=source, capture_output=True,
                            text=True, env=env, timeout=600, check=True)  # fmt: skip
    return json.loads(result.stdout)


def measure(source: str, runs: int) -> dict[str, float]:
    cold, warm, imports = [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="nanotc-cache-") as directory:
            first = run_child(source, directory)
            second = run_child(source, directory)
            assert (first["origin"], second["origin"]) == ("compiled", "disk"), (first, second)
            cold.append(float(first["compile"]))
            warm.append(float(second["compile"]))
            imports.append(float(second["import"]))
    return {
        "cold": statistics.median(cold),
        "warm": statistics.median(warm),
        "import": statistics.median(imports),
    }


STAGES = ("check", "lower", "emit", "IR text", "LLVM opt", "codegen")


def stage_times(source: str) -> list[float]:
    """Seconds of each of `STAGES` in one compile of `source` for this machine."""
    from nanotc.api import Compilation, llvm_pipeline
    from nanotc.check import load
    from nanotc.codegen.llvm.module import emit_module
    from nanotc.runtime import jit
    from nanotc.targets import get
    from nanotc.tuning import database

    target = get(None)
    options = database.options_for(target)
    program: Any = None
    steps: list[Callable[[Any], Any]] = [
        lambda _: load(source, "<bench>"),
        lambda checked: Compilation(checked, target, options).lowered,
        lambda lowered: emit_module(lowered, target),
        lambda module: (str(module), llvm_pipeline(module)),
        lambda emitted: jit.optimize(emitted[0], target, emitted[1]),
        lambda module: jit.jit_object_code(module, target),
    ]
    times = []
    for step in steps:
        start = time.perf_counter()
        program = step(program)
        times.append(time.perf_counter() - start)
    return times


def print_stages(runs: int) -> None:
    print(f"median of {runs} compiles in this process, after one; ms per stage")
    print(f"| kernel | {' | '.join(STAGES)} | total |")
    print(f"| --- |{' ---: |' * (len(STAGES) + 1)}")
    for name, source in cases().items():
        stage_times(source)
        samples = [stage_times(source) for _ in range(runs)]
        medians = [statistics.median(column) * 1e3 for column in zip(*samples)]
        total = statistics.median(sum(sample) for sample in samples) * 1e3
        cells = " | ".join(f"{ms:.1f}" for ms in medians)
        print(f"| {name} | {cells} | {total:.0f} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=positive, default=5, help="processes per median (default 5)")
    parser.add_argument("--stages", action="store_true",
                        help="time each stage of a cold compile, in this process")  # fmt: skip
    args = parser.parse_args(argv)
    if args.stages:
        print_stages(args.runs)
        return 0
    print(f"median of {args.runs} processes each; times of nanotc.compile(), import excluded")
    print("| kernel | cold (ms) | warm (ms) | cold / warm | import nanotc (ms) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, source in cases().items():
        t = measure(source, args.runs)
        print(
            f"| {name} | {t['cold'] * 1e3:.0f} | {t['warm'] * 1e3:.1f} | "
            f"{t['cold'] / t['warm']:.0f}x | {t['import'] * 1e3:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
