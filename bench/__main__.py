"""Run every workload: `python -m bench [--quick] [--workloads w1,w2,w3,w4,w5,in-cache,layouts]
[common options]` (also `nanotc bench [w1 w2 w3 w4 w5 in-cache layouts] [options]`).

Each workload keeps its own defaults (W1, W2, W5: fp32 and fp64 on 1 and 2 threads; W3: fp32
on 1 thread; W4: bf16 on 1 and 2 threads; in-cache and layouts: fp32 and fp64 on 1 thread) unless
--threads/--dtypes are given. A workload that fails is reported with its traceback and the
others still run; the exit status is then 1. One CSV per workload goes to bench/results/
(unless --no-csv; --results-dir to write elsewhere), with a PNG chart beside it when
matplotlib is installed (unless --no-chart).
"""

from __future__ import annotations

import argparse
import datetime
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import (
    chart,
    harness,
    in_cache,
    layouts,
    w1_square,
    w2_batched,
    w3_resnet,
    w4_bf16,
    w5_blas,
)
from bench.harness import Row, Settings
from bench.peers import Peers, discover


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    csv: str
    threads: tuple[int, ...]
    dtypes: tuple[str, ...]
    run: Callable[[Settings, Peers], list[Row]]


WORKLOADS = (
    Workload(
        "w1", "W1 square GEMM C = A B", "w1_square", (1, 2), ("f32", "f64"),
        lambda s, p: w1_square.run(s, p),
    ),
    Workload(
        "w2", "W2 batched small GEMM C_i += A_i B_i", "w2_batched", (1, 2), ("f32", "f64"),
        lambda s, p: w2_batched.run(s, p),
    ),
    Workload(
        "w3", "W3 ResNet-50 im2row GEMMs (Exo, Table I)", "w3_resnet", (1,), ("f32",),
        lambda s, p: w3_resnet.run(s, p),
    ),
    Workload(
        "w4", "W4 bf16 gemm (bf16 A, B; f32 C)", "w4_bf16", (1, 2), ("f32",),
        lambda s, p: w4_bf16.run(s, p),
    ),
    Workload(
        "w5", "W5 memory-bound instructions against copy bandwidth", "w5_blas", (1, 2),
        ("f32", "f64"), lambda s, p: w5_blas.run(s, p),
    ),
    Workload(
        "in-cache", "In-cache GEMM C += A B (one thread)", "in_cache", (1,), ("f32", "f64"),
        lambda s, p: in_cache.run(s, p),
    ),
    Workload(
        "layouts", "Layouts: row-major and transposed operands (one thread)", "layouts", (1,),
        ("f32", "f64"), lambda s, p: layouts.run(s),
    ),
)  # fmt: skip


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run the workloads; `prog` names the command in usage and errors (`nanotc bench`)."""
    parser = argparse.ArgumentParser(prog=prog, description="Run every nanotc benchmark workload.")
    harness.add_common_options(parser)
    parser.add_argument(
        "--workloads",
        type=harness.parse_list(str),
        default=tuple(w.name for w in WORKLOADS),
        help="which workloads (default w1,w2,w3,w4,w5,in-cache,layouts)",
    )
    parser.add_argument("--no-chart", action="store_true", help="do not draw PNG charts")
    parser.add_argument(
        "--results-dir", type=Path, default=harness.RESULTS, help="where CSVs and charts go"
    )
    args = parser.parse_args(argv)
    unknown = set(args.workloads) - {w.name for w in WORKLOADS}
    if unknown:
        parser.error(f"unknown workloads: {', '.join(sorted(unknown))}")
    if problem := _uneven_threads(args):
        parser.error(f"argument --threads: {problem}")
    first = harness.settings_from(args, threads=(1,), dtypes=("f32",))
    harness.preamble(first)
    peers = discover(first.peers)
    print("\n".join(f"peer: {note}" for note in peers.notes))
    if not args.no_chart and not chart.available():
        print("note: no charts: matplotlib is not installed (pip install matplotlib)")
    failed = []
    for workload in WORKLOADS:
        if workload.name not in args.workloads:
            continue
        settings = harness.settings_from(args, workload.threads, workload.dtypes)
        try:
            rows = workload.run(settings, peers)
        except Exception:
            failed.append(workload.name)
            print(f"\n== {workload.title}: FAILED", file=sys.stderr)
            traceback.print_exc()
            continue
        notes = []
        if workload.name == "w2":
            sizes = w2_batched.Sizes.quick() if settings.quick else w2_batched.Sizes()
            notes = w2_batched.notes_for(sizes, w2_batched.VARIANTS)
        elif workload.name == "w3":
            notes = w3_resnet.total_times(rows)
        harness.report(
            rows,
            workload.title,
            notes,
            None if args.no_csv else workload.csv,
            args.results_dir,
            spread=settings.spread,
        )
        if not args.no_chart:
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            png = args.results_dir / f"{workload.csv}-{stamp}.png"
            drawn = chart.draw(rows, workload.title, png)
            if drawn is not None:
                print(f"chart: {drawn}")
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _uneven_threads(args: argparse.Namespace) -> str | None:
    """Why a workload chosen cannot split its default shapes over the thread counts given."""
    sizes = w1_square.QUICK_SIZES if args.quick else w1_square.SIZES
    checks = {
        "w1": lambda: w1_square.check_blocks(sizes, None, args.threads),
        "w4": lambda: w4_bf16.check_threads(w4_bf16.PARTS, args.threads, args.quick),
    }
    for name, check in checks.items():
        if args.threads and name in args.workloads:
            try:
                check()
            except ValueError as error:
                return f"{name}: {error}"
    return None


if __name__ == "__main__":
    sys.exit(main())
