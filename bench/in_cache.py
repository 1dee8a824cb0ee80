"""In-cache GEMM: C (M x N) += A B with operands resident in L1/L2, one thread, fp32 and fp64.

The register-tiling target of the nanokernel issue: a 64 x 64 C with K = 256 (A and B 64-128
KiB each, in L2) at >= 92% of the core's peak. One gemm is repeated `reps` times in one launch
(`kernels.batched_repeated` on a batch of one), so neither launch overhead nor memory enters.

The peak loop (`bench/peak.py`) is a contender in the same interleaved rounds as the kernels:
on a shared machine whose clock moves by 1.5x within minutes, a peak measured once at the start
would put the percent of peak of rows timed in another phase off by as much. Peers on the same
arrays, where installed: libxsmm, torch, numpy (as in W2's cache variant).

    python -m bench.in_cache [--shapes 64x64x256,64x64x64] [--dtypes f32] [--line-offsets 0,16]

Where the operands lie matters here: when A's columns start 16 bytes past a cache line (where
numpy puts arrays of 128 KiB and more), every vector load of A spans two lines, and the
64x64x256 gemm, its A coming from L2, ran 8-10% slower (as did a hand-written loop). So each
configuration runs twice, every contender on the same arrays: A, B and C starting on a cache
line (`in-cache`, as `nanotc.empty_aligned` gives them), and 16 bytes past one (`in-cache+16`).

`bench/k_step.py` measures the ceiling below this on AVX-512 hosts: a tile's bare k step, in
assembly, against the same peak loop.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from bench import harness, w2_batched
from bench.harness import Contender, Row, Settings
from bench.peers import Peers, discover

SHAPES = ((64, 64, 256),)
LINE_OFFSETS = (0, 16)  # bytes past a cache line where the operands start


def run(
    settings: Settings,
    peers: Peers | None = None,
    shapes: Sequence[tuple[int, int, int]] = SHAPES,
    line_offsets: Sequence[int] = LINE_OFFSETS,
) -> list[Row]:
    """One row per (dtype, shape, line offset), validated then timed beside the peak loop."""
    peers = peers if peers is not None else discover(settings.peers)
    rng = np.random.default_rng(settings.seed)
    sizes = w2_batched.Sizes.quick() if settings.quick else w2_batched.Sizes()
    rows = []
    for dtype in settings.dtypes:
        np_dtype = harness.DTYPES[dtype]
        for m, n, k in shapes:
            values = [rng.uniform(-1, 1, (r, s, 1)).astype(np_dtype)
                      for r, s in ((m, k), (k, n), (m, n))]  # fmt: skip
            for offset in line_offsets:
                a, b, c = (harness.placed(x, offset) for x in values)
                check = w2_batched.BatchCheck(a, b, c, rng)
                case = w2_batched.Case("cache", dtype, 1, a, b, c, check, settings, sizes, False)
                rows.append(_row(case, peers, offset))
    return rows


def _row(case: w2_batched.Case, peers: Peers, offset: int) -> Row:
    (m, k, _), n = case.a.shape, case.b.shape[1]
    arrays = (case.a, case.b, case.c)
    contenders = [Contender("nanotc", case.nanotc_call(arrays)), *case.peer_contenders(peers)]
    case.check.reset()
    placement = f"+{offset}" if offset else ""
    label = f"{m}x{n}x{k} {case.dtype} (in cache, {offset} bytes past a line)"
    timings, peak = harness.compare_with_peak(
        label, contenders, case.check, case.settings, harness.PEAK_KEYS[case.dtype],
        case.sizes.call_seconds,
    )  # fmt: skip
    return Row(
        workload=f"in-cache{placement}",
        shape=f"{m}x{n}x{k}",
        dtype=case.dtype,
        threads=1,
        flops=2.0 * m * n * k,
        nanotc=timings.pop("nanotc"),
        peers=timings,
        peak=peak.gflops,
        peak_in_rounds=peak.in_rounds,
        peak_loop=peak.timing,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_common_options(parser)
    w2_batched.add_shape_option(parser)
    parser.add_argument(
        "--line-offsets", type=harness.parse_list(harness.line_offset(8)), default=LINE_OFFSETS,
        help="bytes past a cache line where A, B and C start, one row each (default 0,16)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    settings = harness.settings_from(args, threads=(1,), dtypes=("f32", "f64"))
    harness.preamble(settings)
    peers = discover(settings.peers)
    rows = run(settings, peers, args.shapes or SHAPES, args.line_offsets)
    csv = None if args.no_csv else "in_cache"
    harness.report(
        rows,
        "In-cache GEMM C += A B (column-major, one thread)",
        peers.notes,
        csv,
        spread=settings.spread,
    )


if __name__ == "__main__":
    main()
