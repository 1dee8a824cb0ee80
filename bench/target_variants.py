"""Target variants: the host's description against the same with some fields changed.

`nanotc.targets.MEASURED_RATES` holds what was measured per CPU (k steps an iteration,
prefetch rates, broadcast operands...). This benchmark is how such a choice is measured: the
same kernels compiled for the host as described (`nanotc`) and for each variant of it, timed in
the same interleaved rounds on the same arrays, each checked against numpy first. A ratio
nanotc/variant above 1 means the shipped description runs faster.

Workloads (`--workloads`):

  cache    W2's cache-resident batches C_i += A_i B_i (`kernels.batched_repeated`, ~256 KB)
  memory   W2's batches from memory, one member per work-group (`kernels.batched`, ~200 MB)
  w3       W3's ResNet-50 gemms, f32, static shapes, one thread; the last row is the total of
           each layer's time weighted by the layers sharing it

    python -m bench.target_variants --variants k_unroll=1,k_unroll=4 [--workloads cache,w3]
        [--shapes 32x32x32,35x9x35] [--layers 1,3,5] [--dtypes f32] [--threads 1]

A variant is `field=value[+field=value...]`, fields of `nanotc.targets.Target`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import fields, replace

import numpy as np

import nanotc
from bench import harness, kernels, w2_batched, w3_resnet
from bench.harness import Contender, Row, Settings, Timing
from nanotc import targets
from nanotc.targets import Target

WORKLOADS = ("cache", "memory", "w3")
W2_SHAPES = ((8, 8, 8), (16, 16, 16), (32, 32, 32), (64, 64, 64), (56, 9, 9), (35, 9, 35),
             (20, 9, 20))  # fmt: skip
# one timed call of a W3 layer repeats its gemm for about this long: single calls of 1-3 ms
# moved 0.7-1.7x between rounds of one run
W3_CALL_SECONDS = 0.03
Variant = tuple[str, Target]  # its name as given, and the host's description changed by it


def parse_variant(text: str, base: Target | None = None) -> Variant:
    """`field=value[+field=value...]` applied to `base` (the host's description)."""
    base = base or targets.host()
    kinds = {f.name: type(getattr(base, f.name)) for f in fields(base)}
    changes: dict[str, object] = {}
    for part in text.split("+"):
        name, _, value = part.partition("=")
        if name not in kinds or name == "name" or not value:
            raise argparse.ArgumentTypeError(
                f"variant {text!r}: expected field=value with a field of Target, got {part!r}"
            )
        changes[name] = _value(kinds[name], value, text)
    return text, replace(base, name=f"host {text}", **changes)  # type: ignore[arg-type]


def _value(kind: type, value: str, variant: str) -> object:
    if kind is bool:
        if value not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"variant {variant!r}: true or false, got {value!r}")
        return value == "true"
    try:
        return kind(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"variant {variant!r}: {value!r} is not of type {kind.__name__}"
        ) from None


def compiled(source: str, target: Target) -> kernels.Kernel:
    """The one function of `source` compiled for `target` (not cached: variants differ)."""
    compilation = nanotc.compile(source, target=target, cache=False, name="<variants>")
    (name,) = list(compilation)
    return compilation[name]


def run(settings: Settings, variants: Sequence[Variant], workloads: Sequence[str],
        shapes: Sequence[tuple[int, int, int]], layers: Sequence[int]) -> list[Row]:  # fmt: skip
    """One row per workload, shape, dtype and thread count (W3: per layer, then its total)."""
    rng = np.random.default_rng(settings.seed)
    sizes = w2_batched.Sizes.quick() if settings.quick else w2_batched.Sizes()
    rows: list[Row] = []
    for workload in workloads:
        if workload == "w3":
            rows += _w3_rows(settings, variants, rng, layers)
            continue
        for dtype in settings.dtypes:
            for threads in settings.threads:
                for shape in shapes:
                    rows.append(_w2_row(settings, variants, rng, workload, dtype, threads,
                                        shape, sizes))  # fmt: skip
    return rows


def _contenders(contender: Callable[[str, Target], Contender],
                variants: Sequence[Variant]) -> list[Contender]:  # fmt: skip
    """The kernel compiled for the host as described (`nanotc`), then for each variant."""
    return [contender("nanotc", targets.host())] + [contender(*variant) for variant in variants]


def _w2_row(settings: Settings, variants: Sequence[Variant], rng: np.random.Generator,
            workload: str, dtype: str, threads: int, shape: tuple[int, int, int],
            sizes: w2_batched.Sizes) -> Row:  # fmt: skip
    m, n, k = shape
    np_dtype = harness.DTYPES[dtype]
    batch = sizes.batch(workload, m, n, k, np.dtype(np_dtype).itemsize, threads)
    a, b, c = (
        np.asfortranarray(rng.uniform(-1, 1, (r, s, batch)).astype(np_dtype))
        for r, s in ((m, k), (k, n), (m, n))
    )
    check = w2_batched.BatchCheck(a, b, c, rng)
    source = (kernels.batched_repeated if workload == "cache" else kernels.batched)(dtype, m, n, k)

    def contender(name: str, target: Target) -> Contender:
        kernel = compiled(source, target)
        if workload == "cache":
            return Contender(name, lambda reps: kernel(a, b, c, reps, group_size=threads,
                                                       num_threads=threads))  # fmt: skip

        def sweeps(reps: int) -> None:
            for _ in range(reps):
                kernel(a, b, c, group_size=batch, num_threads=threads)

        return Contender(name, sweeps)

    contenders = _contenders(contender, variants)
    check.reset()
    label = f"{m}x{n}x{k} {dtype} threads={threads} ({workload})"
    call_seconds = sizes.call_seconds if workload == "cache" else None
    timings = harness.compare(label, contenders, check, settings, call_seconds, threads=threads)
    return Row(
        workload="variants",
        variant=workload,
        shape=f"{m}x{n}x{k} b{batch}",
        dtype=dtype,
        threads=threads,
        flops=2.0 * m * n * k * batch,
        nanotc=timings.pop("nanotc"),
        peers=timings,
        peak=harness.peak_gflops(dtype, threads),
    )


def _w3_rows(settings: Settings, variants: Sequence[Variant], rng: np.random.Generator,
             layers: Sequence[int]) -> list[Row]:  # fmt: skip
    table = [layer for layer in w3_resnet.TABLE_I if layer.id in layers]
    scale = w3_resnet.QUICK_SCALE if settings.quick else 1
    rows = [_w3_row(settings, variants, rng, layer, scale) for layer in table]
    if len(rows) > 1:
        rows.append(_weighted_total(rows, [layer.count for layer in table]))
    return rows


def _w3_row(settings: Settings, variants: Sequence[Variant], rng: np.random.Generator,
            layer: w3_resnet.Layer, scale: int) -> Row:  # fmt: skip
    m, n, k = (max(1, x // scale) for x in (layer.m, layer.n, layer.k))
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k)).astype(np.float32))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n)).astype(np.float32))
    c = np.full((m, n), np.nan, np.float32, order="F")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    expected, bound = a64 @ b64, np.abs(a64) @ np.abs(b64)

    def check(what: str) -> None:
        harness.check_gemm(what, c, expected, bound, k, np.float32)
        c.fill(np.nan)

    source = kernels.single("f32", m, n, k)

    def contender(name: str, target: Target) -> Contender:
        kernel = compiled(source, target)
        return Contender(name, harness.repeat(lambda: kernel(a, b, c, group_size=1)))

    contenders = _contenders(contender, variants)
    label = f"layer {layer.id} ({m}x{n}x{k} f32)"
    timings = harness.compare(label, contenders, check, settings, W3_CALL_SECONDS)
    return Row(
        workload="variants",
        variant=f"w3 L{layer.id}",
        shape=f"{m}x{n}x{k}",
        dtype="f32",
        threads=1,
        flops=2.0 * m * n * k,
        nanotc=timings.pop("nanotc"),
        peers=timings,
        peak=harness.peak_gflops("f32", 1),
    )


def _weighted_total(rows: Sequence[Row], weights: Sequence[int]) -> Row:
    """The layers' medians summed, each times its weight: nanotc's and each variant's."""

    def total(timing_of: Callable[[Row], Timing]) -> Timing:
        seconds = sum(w * timing_of(r).seconds for r, w in zip(rows, weights))
        return Timing(seconds, (seconds,))

    names = list(rows[0].peers)
    return Row(
        workload="variants",
        variant="w3 total",
        shape="weighted",
        dtype="f32",
        threads=1,
        flops=sum(w * r.flops for r, w in zip(rows, weights)),
        nanotc=total(lambda r: r.nanotc),
        peers={name: total(lambda r, name=name: r.peers[name]) for name in names},
        peak=harness.peak_gflops("f32", 1),
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_common_options(parser)
    w2_batched.add_shape_option(parser)
    parser.add_argument(
        "--variants", type=harness.parse_list(parse_variant), required=True,
        help="field=value[+field=value],... of nanotc.targets.Target, e.g. k_unroll=1",
    )  # fmt: skip
    parser.add_argument(
        "--workloads", type=harness.parse_list(harness.choice(WORKLOADS, "workload")),
        default=WORKLOADS, help=f"of {','.join(WORKLOADS)} (default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--layers", type=harness.parse_list(w3_resnet.layer_id),
        help="W3 layer ids, 1-20 (default: all 20)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    settings = harness.settings_from(args, threads=(1,), dtypes=("f32", "f64"))
    harness.preamble(settings)
    layers = args.layers or [layer.id for layer in w3_resnet.TABLE_I]
    if settings.quick and not args.layers:
        layers = list(w3_resnet.QUICK_LAYERS)
    shapes = args.shapes or (((8, 8, 8), (16, 16, 16)) if settings.quick else W2_SHAPES)
    rows = run(settings, args.variants, args.workloads, shapes, layers)
    harness.report(
        rows,
        "Target variants: the host as described (nanotc) against each variant",
        ["a ratio nanotc/variant above 1: the host's description runs faster"],
        None if args.no_csv else "target_variants",
        spread=settings.spread,
    )


if __name__ == "__main__":
    main()
