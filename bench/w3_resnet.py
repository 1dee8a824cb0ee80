"""W3: the GEMMs of ResNet-50 v1.5 inference (batch 1) after the IM2ROW transform; fp32, 1 thread.

Shapes are Table I of Castelló et al., "Tackling the Matrix Multiplication Micro-kernel
Generation with Exo" (the Exo micro-kernel paper): the 20 distinct (m, n, k) of the 53
convolution layers. Each is one GEMM C = A B (column-major, A m x k, B k x n) in one nanotc
work-group (`kernels.single`, shapes static in the types unless --dynamic). Peers on the same
arrays: numpy (C^T = B^T A^T in place), torch.mm, BLIS (the library the paper compares with).

The table ends with two totals: `all shapes` (each distinct shape once) and `resnet50` (each
shape weighted by the number of layers that share it, i.e. one inference's GEMM time).

    python -m bench.w3_resnet [--layers 1,7,12] [--threads 1] [--dynamic]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench import harness, kernels
from bench.harness import Contender, Row, Settings, Timing
from bench.peers import Peers, discover
from bench.peers.threads import blas_threads_note
from bench.w1_square import gemm_peers


@dataclass(frozen=True)
class Layer:
    """One row of Table I: layer id, the ResNet-50 v1.5 layers sharing its GEMM, m, n, k."""

    id: int
    layers: str
    m: int
    n: int
    k: int

    @property
    def count(self) -> int:
        return len(self.layers.split("/"))


# Castelló et al., "Tackling the Matrix Multiplication Micro-kernel Generation with Exo",
# Table I: "Dimensions of the GEMM resulting from applying the IM2ROW transform to the layers of
# the ResNet50 v1.5 DNN model with a batch size of 1 sample."
TABLE_I = (
    Layer(1, "001", 12544, 64, 147),
    Layer(2, "006", 3136, 64, 64),
    Layer(3, "009/021/031", 3136, 64, 576),
    Layer(4, "012/014/024/034", 3136, 256, 64),
    Layer(5, "018/028", 3136, 64, 256),
    Layer(6, "038", 3136, 128, 256),
    Layer(7, "041/053/063/073", 784, 128, 1152),
    Layer(8, "044/056/066/076", 784, 512, 128),
    Layer(9, "046", 784, 512, 256),
    Layer(10, "050/060/070", 784, 128, 512),
    Layer(11, "080", 784, 256, 512),
    Layer(12, "083/095/105/115/125/135", 196, 256, 2304),
    Layer(13, "086/098/108/118/128/138", 196, 1024, 256),
    Layer(14, "088", 196, 1024, 512),
    Layer(15, "092/102/112/122/132", 196, 256, 1024),
    Layer(16, "142", 196, 512, 1024),
    Layer(17, "145/157/167", 49, 512, 4608),
    Layer(18, "148/160/170", 49, 2048, 512),
    Layer(19, "150", 49, 2048, 1024),
    Layer(20, "154/164", 49, 512, 2048),
)
QUICK_LAYERS = (2, 12, 18)
QUICK_SCALE = 8  # quick mode divides every dimension by this


layer_id = harness.int_between(1, len(TABLE_I), "a Table I layer id")


def run(
    settings: Settings,
    peers: Peers | None = None,
    layers: Sequence[int] | None = None,
    static: bool = True,
) -> list[Row]:
    """One row per (layer, threads), then the two totals per thread count."""
    peers = peers if peers is not None else discover(settings.peers)
    chosen = layers or (QUICK_LAYERS if settings.quick else [layer.id for layer in TABLE_I])
    table = [layer for layer in TABLE_I if layer.id in chosen]
    if settings.quick:
        table = [
            Layer(x.id, x.layers, *(max(1, d // QUICK_SCALE) for d in (x.m, x.n, x.k)))
            for x in table
        ]
    rng = np.random.default_rng(settings.seed)
    rows = []
    for dtype in settings.dtypes:
        for threads in settings.threads:
            shape_rows = [
                _layer(settings, peers, rng, dtype, threads, layer, static) for layer in table
            ]
            rows += shape_rows + _totals(shape_rows, table)
    return rows


def _layer(
    settings: Settings,
    peers: Peers,
    rng: np.random.Generator,
    dtype: str,
    threads: int,
    layer: Layer,
    static: bool,
) -> Row:
    np_dtype = harness.DTYPES[dtype]
    m, n, k = layer.m, layer.n, layer.k
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k)).astype(np_dtype))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n)).astype(np_dtype))
    c = np.full((m, n), np.nan, np_dtype, order="F")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    expected, bound = a64 @ b64, np.abs(a64) @ np.abs(b64)

    def check(what: str) -> None:
        harness.check_gemm(what, c, expected, bound, k, np_dtype)
        c.fill(np.nan)

    label = f"layer {layer.id} ({m}x{n}x{k} {dtype})"
    kernel = kernels.compiled(kernels.single(dtype, m, n, k, static))
    nanotc = harness.repeat(lambda: kernel(a, b, c, group_size=1, num_threads=threads))
    contenders = [Contender("nanotc", nanotc), *gemm_peers(peers, a, b, c, threads)]
    timings, peak = harness.compare_with_peak(
        label, contenders, check, settings, harness.PEAK_KEYS[dtype], threads=threads
    )
    return Row(
        workload="w3",
        variant=f"L{layer.id}",
        shape=f"{m}x{n}x{k}",
        dtype=dtype,
        threads=threads,
        flops=2.0 * m * n * k,
        nanotc=timings.pop("nanotc"),
        peers=timings,
        peak=peak.gflops,
        peak_in_rounds=peak.in_rounds,
        peak_loop=peak.timing,
        params=f"layers {layer.layers}; {'static' if static else 'dynamic'} shapes",
        note=blas_threads_note(threads),
    )


def launch_overhead(dtype: str, layer: Layer, static: bool) -> float:
    """Seconds per launch of a kernel with W3's signature and no work: what nanotc's launcher
    (argument checks, packing, ctypes) adds to every W3 time."""
    m, n, k = layer.m, layer.n, layer.k
    empty = kernels.compiled(kernels.single(dtype, m, n, k, static, empty=True))
    np_dtype = harness.DTYPES[dtype]
    a, b, c = (np.zeros(s, np_dtype, order="F") for s in ((m, k), (k, n), (m, n)))
    calls = 200

    def launches() -> None:
        for _ in range(calls):
            empty(a, b, c, group_size=1, num_threads=1)

    timing = harness.measure(
        launches,
        warmup=1,
        repeats=5,
        budget=1.0,
        units=calls,
    )
    return timing.seconds


def _total(rows: Sequence[Row], weights: Sequence[int], name: str, shape: str) -> Row:
    """A row whose time is the weighted sum of the rows' median times, and whose peak is the
    rows' peaks weighted by nanotc's time in each (its percent of peak is then the work done
    over the work the peak loop would have done in that time). Its ratio to a peer is the
    rows' paired ratios (`harness.speed_ratio`) weighted by nanotc's time in each: the
    peer's total time estimated shape by shape from nanotc's and the rounds they shared."""

    def total(timings: Sequence[Timing]) -> Timing:
        seconds = sum(w * t.seconds for w, t in zip(weights, timings))
        return Timing(seconds, (seconds,))

    first = rows[0]
    peers = [p for p in first.peers if all(p in r.peers for r in rows)]
    return Row(
        workload="w3",
        variant=name,
        shape=shape,
        dtype=first.dtype,
        threads=first.threads,
        flops=sum(w * r.flops for w, r in zip(weights, rows)),
        nanotc=total([r.nanotc for r in rows]),
        peers={p: total([r.peers[p] for r in rows]) for p in peers},
        ratios={p: _paired_total(rows, weights, p) for p in peers},
        peak=_time_weighted_peak(rows, weights),
        peak_in_rounds=all(r.peak_in_rounds for r in rows),
        params="sum of the median times" + ("" if name == "all" else ", weighted by layer count"),
    )


def _paired_total(rows: Sequence[Row], weights: Sequence[int], peer: str) -> float:
    """nanotc's speed over `peer`'s on the weighted rows: their paired ratios weighted by
    nanotc's time in each."""
    times = [w * r.nanotc.seconds for w, r in zip(weights, rows)]
    ratios = [harness.speed_ratio(r.nanotc, r.peers[peer]) for r in rows]
    return sum(t * ratio for t, ratio in zip(times, ratios)) / sum(times)


def _time_weighted_peak(rows: Sequence[Row], weights: Sequence[int]) -> float | None:
    if any(r.peak is None for r in rows):
        return None
    times = [w * r.nanotc.seconds for w, r in zip(weights, rows)]
    return sum(t * r.peak for t, r in zip(times, rows)) / sum(times)


def _totals(rows: Sequence[Row], table: Sequence[Layer]) -> list[Row]:
    if not rows:
        return []
    layer_count = sum(x.count for x in table)
    return [
        _total(rows, [1] * len(rows), "all", f"{len(rows)} shapes"),
        _total(rows, [x.count for x in table], "resnet50", f"{layer_count} layers"),
    ]


def total_times(rows: Sequence[Row]) -> list[str]:
    """One line per total row: milliseconds of nanotc and each peer."""
    lines = []
    for r in rows:
        if r.variant in ("all", "resnet50"):
            times = [f"nanotc {1e3 * r.nanotc.seconds:.2f} ms"]
            times += [f"{p} {1e3 * t.seconds:.2f} ms" for p, t in r.peers.items()]
            lines.append(
                f"total time, {r.variant} ({r.shape}, {r.threads} thr): " + ", ".join(times)
            )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_common_options(parser)
    parser.add_argument(
        "--layers", type=harness.parse_list(layer_id), help="Table I ids, 1-20 (default all)"
    )
    parser.add_argument("--dynamic", action="store_true", help="memref<f32x?x?> operand types")
    args = parser.parse_args(argv)
    settings = harness.settings_from(args, threads=(1,), dtypes=("f32",))
    harness.preamble(settings)
    peers = discover(settings.peers)
    rows = run(settings, peers, args.layers, static=not args.dynamic)
    csv = None if args.no_csv else "w3_resnet"
    title = "W3 ResNet-50 v1.5 im2row GEMMs (Exo paper, Table I), C = A B"
    notes = peers.notes + total_times(rows)
    if rows:
        layer = next(x for x in TABLE_I if f"L{x.id}" == rows[0].variant)
        overhead = launch_overhead(rows[0].dtype, layer, not args.dynamic)
        notes.append(
            f"nanotc launch overhead (empty kernel, same arguments): {1e6 * overhead:.1f} us"
        )
    harness.report(rows, title, notes, csv, spread=settings.spread)


if __name__ == "__main__":
    main()
