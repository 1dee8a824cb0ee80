"""W2: batched small GEMM C_i += A_i B_i (column-major), the tensor language's main use case.

Shapes (M, N, K): 8^3, 16^3, 32^3, 64^3, 56x9x9, 35x9x35, 20x9x20; fp32 and fp64; 1 and 2 threads.
Three variants:

  memory  a batch filling ~200 MB (--working-set-mb), one sweep per timed call; GB/s counts A
          and B read plus C read and written. nanotc: `kernels.batched`, group_size = batch.
  cache   a batch of ~256 KB in total (--cache-kb), swept many times inside one timed call so
          it stays in L2. nanotc: `kernels.batched_repeated`, one work-group per thread, each
          sweeping its contiguous slice %reps times (no launch overhead measured).
  launch  a batch of 64 members (--launch-batch), one launch from Python per sweep, as in
          `memory`, many per timed call: what a Python caller of small batches pays, argument
          binding and thread start included.

Peers on the same arrays: libxsmm (bench/peers/libxsmm_driver.c: one JIT kernel, the same
slices per thread, timed in C), torch.baddbmm_ (in place on the row-major transposed views,
C_i^T += B_i^T A_i^T), and numpy np.matmul over the stacked batch (a baseline: the product goes
to a scratch batch, then is added to C). The memory variant also times `stream`
(bench/peers/memory_driver.c), not a gemm: the same sweep's traffic without its arithmetic,
member by member, A_i and B_i read and C_i read and written back unchanged. Its "GF/s" is the
rate the gemm would have at the stream's speed, and nanotc/stream the share of that speed
nanotc reaches. `--aligned-copy` adds `nanotc-aligned`: nanotc's kernel on copies of A, B and C
whose data start on a cache line (`nanotc.empty_aligned`; numpy starts a large array's data 16
bytes past one), so nanotc/nanotc-aligned is what that placement costs. The notes under the
table say how the memory and cache rows stand against issue 4's targets (`target_notes`).

    python -m bench.w2_batched [--variants memory,cache] [--shapes 32x32x32,35x9x35] ...
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

import nanotc
from bench import harness, kernels
from bench.harness import Contender, Row, Settings
from bench.peers import Peers, discover, memory, torch_peer
from bench.peers.threads import blas_threads, blas_threads_note
from nanotc.cli.options import positive

SHAPES = ((8, 8, 8), (16, 16, 16), (32, 32, 32), (64, 64, 64), (56, 9, 9), (35, 9, 35), (20, 9, 20))
QUICK_SHAPES = ((8, 8, 8), (35, 9, 35))
VARIANTS = ("memory", "cache", "launch")
SAMPLE = 48  # batch members validated (all of them in small batches)
# issue 4's targets for W2 (memory and cache variants): every row at least this share of
# libxsmm, their geometric mean at least GEOMEAN_OVER_LIBXSMM, every row TORCH_FACTOR x torch
LEAST_OVER_LIBXSMM = 0.95
GEOMEAN_OVER_LIBXSMM = 1.1
TORCH_FACTOR = 2.0


@dataclass(frozen=True)
class Sizes:
    """How much data each variant uses, and how long one timed call of `cache` should last."""

    working_set: int = 200 * 10**6  # bytes of A, B and C in the memory variant
    cache: int = 256 * 10**3  # bytes of A, B and C in the cache variant
    call_seconds: float = 0.1  # target duration of one timed call of cache and launch
    launch_batch: int = 64  # members of the launch variant's batch

    @staticmethod
    def quick() -> Sizes:
        return Sizes(working_set=4 * 10**6, cache=64 * 10**3, call_seconds=0.01, launch_batch=8)

    def batch(self, variant: str, m: int, n: int, k: int, itemsize: int, multiple: int) -> int:
        """Members of a variant's batch, a positive multiple of `multiple` (the thread counts)."""
        if variant == "launch":
            return max(multiple, self.launch_batch // multiple * multiple)
        total = self.working_set if variant == "memory" else self.cache
        return batch_size(m, n, k, itemsize, total, multiple)


class BatchCheck:
    """Validates sampled batch members of C against numpy after one sweep of C_i += A_i B_i.

    `reset()` restores C's initial random values; a check ends with it, so with a reset before
    the first implementation's validation sweep every sweep starts from them and every check is
    as strict as the first (and beta = 1 really is tested)."""

    def __init__(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, rng: np.random.Generator):
        batch = c.shape[2]
        chosen = rng.choice(batch, size=min(batch, SAMPLE), replace=False)
        self.members = np.unique(np.concatenate([[0, batch - 1], chosen]))
        a64, b64 = (x[:, :, self.members].astype(np.float64) for x in (a, b))
        self.initial = c.copy(order="F")
        before = self.initial[:, :, self.members].astype(np.float64)
        self.expected = before + np.einsum("mki,kni->mni", a64, b64)
        self.bound = np.abs(before) + np.einsum("mki,kni->mni", np.abs(a64), np.abs(b64))
        self.c, self.k, self.dtype = c, a.shape[1], c.dtype.type

    def reset(self) -> None:
        np.copyto(self.c, self.initial)

    def __call__(self, what: str) -> None:
        got = self.c[:, :, self.members]
        harness.check_gemm(what, got, self.expected, self.bound, self.k, self.dtype)
        self.reset()

    def unchanged(self, what: str) -> None:
        """For a contender that only moves C's bytes (`stream`): C must be as it was."""
        if not np.array_equal(self.c, self.initial):
            raise harness.ValidationError(f"{what}: C changed")


def batch_size(m: int, n: int, k: int, itemsize: int, total_bytes: int, multiple: int) -> int:
    """Members filling `total_bytes` with A, B and C, rounded to a positive multiple."""
    per_member = (m * k + k * n + m * n) * itemsize
    return max(multiple, total_bytes // per_member // multiple * multiple)


def run(
    settings: Settings,
    peers: Peers | None = None,
    shapes: Sequence[tuple[int, int, int]] | None = None,
    variants: Sequence[str] = VARIANTS,
    sizes: Sizes | None = None,
    prefetch: bool = False,
    aligned_copy: bool = False,
) -> list[Row]:
    """One row per (variant, dtype, shape, threads), validated then timed."""
    peers = peers if peers is not None else discover(settings.peers)
    shapes = tuple(shapes or (QUICK_SHAPES if settings.quick else SHAPES))
    sizes = sizes or (Sizes.quick() if settings.quick else Sizes())
    multiple = math.lcm(*settings.threads)
    rng = np.random.default_rng(settings.seed)
    rows = []
    for variant in variants:
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r} (choose from {', '.join(VARIANTS)})")
        for dtype in settings.dtypes:
            np_dtype = harness.DTYPES[dtype]
            for m, n, k in shapes:
                batch = sizes.batch(variant, m, n, k, np.dtype(np_dtype).itemsize, multiple)
                a, b, c = (
                    np.asfortranarray(rng.uniform(-1, 1, (r, s, batch)).astype(np_dtype))
                    for r, s in ((m, k), (k, n), (m, n))
                )
                check = BatchCheck(a, b, c, rng)
                for threads in settings.threads:
                    case = Case(variant, dtype, threads, a, b, c, check, settings, sizes, prefetch,
                                aligned_copy)  # fmt: skip
                    rows.append(case.row(peers))
                del a, b, c, check
    return rows


@dataclass
class Case:
    """One configuration: the arrays, the thread count, and the implementations to compare."""

    variant: str
    dtype: str
    threads: int
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    check: BatchCheck
    settings: Settings
    sizes: Sizes
    prefetch: bool
    aligned_copy: bool = False

    def row(self, peers: Peers) -> Row:
        """Validate one sweep of each implementation, then time them in interleaved rounds: one
        sweep per call (memory) or a calibrated number of sweeps per call (cache, launch);
        seconds per sweep."""
        a, b, c, threads = self.a, self.b, self.c, self.threads
        (m, k, batch), n = a.shape, b.shape[1]
        label = f"{m}x{n}x{k} {self.dtype} batch={batch} threads={threads} ({self.variant})"
        contenders = [
            Contender("nanotc", self.nanotc_call((a, b, c))),
            *self.aligned_contender(),
            *self.peer_contenders(peers),
        ]
        call_seconds = None if self.variant == "memory" else self.sizes.call_seconds
        self.check.reset()  # C holds the sweeps timed in the previous configuration
        timings = harness.compare(
            label, contenders, self.check, self.settings, call_seconds, threads=threads
        )
        itemsize = c.itemsize
        traffic = self.variant == "memory"
        return Row(
            workload="w2",
            variant=self.variant,
            shape=f"{m}x{n}x{k} b{batch}",
            dtype=self.dtype,
            threads=threads,
            flops=2.0 * m * n * k * batch,
            bytes=float((m * k + k * n + 2 * m * n) * itemsize * batch) if traffic else None,
            nanotc=timings.pop("nanotc"),
            peers=timings,
            peak=harness.peak_gflops(self.dtype, threads),
            params=f"batch={batch}, {batch * (m * k + k * n + m * n) * itemsize} bytes",
            note=blas_threads_note(threads),
        )

    def nanotc_call(self, arrays: tuple[np.ndarray, np.ndarray, np.ndarray]
                    ) -> Callable[[int], None]:  # fmt: skip
        """nanotc's call on `arrays` (A, B, C): one launch per sweep (memory, launch) or `reps`
        sweeps in one launch (cache)."""
        (a, b, c), threads = arrays, self.threads
        (m, k, batch), n = a.shape, b.shape[1]
        if self.variant != "cache":
            kernel = kernels.compiled(kernels.batched(self.dtype, m, n, k))

            def sweeps(reps: int) -> None:
                for _ in range(reps):
                    kernel(a, b, c, group_size=batch, num_threads=threads)

            return sweeps
        repeated = kernels.compiled(kernels.batched_repeated(self.dtype, m, n, k))

        def cache(reps: int) -> None:
            repeated(a, b, c, reps, group_size=threads, num_threads=threads)

        return cache

    def aligned_contender(self) -> list[Contender]:
        """`nanotc-aligned` where asked for: nanotc on line-aligned copies of A, B and C (C as
        the check starts it), validated against its own copy of C."""
        if not self.aligned_copy:
            return []
        sources = (self.a, self.b, self.check.initial)
        copies = [nanotc.empty_aligned(x.shape, x.dtype) for x in sources]
        for copy, source in zip(copies, sources):
            copy[...] = source
        a, b, c = copies
        check = BatchCheck(a, b, c, np.random.default_rng(self.settings.seed))
        return [Contender("nanotc-aligned", self.nanotc_call((a, b, c)), check=check)]

    def peer_contenders(self, peers: Peers) -> list[Contender]:
        """The available peers sweeping the same batch `reps` times per call, on the same
        arrays and thread count."""
        a, b, c, threads = self.a, self.b, self.c, self.threads
        contenders: list[Contender] = []
        if peers.libxsmm is not None:
            xsmm = peers.libxsmm

            def libxsmm(reps: int) -> float:
                return xsmm.gemm_batch(a, b, c, reps=reps, threads=threads, prefetch=self.prefetch)

            contenders.append(Contender("libxsmm", libxsmm))
        # Row-major views of the transposes: C_i^T += B_i^T A_i^T, contiguous, no copies.
        at, bt, ct = (x.transpose(2, 1, 0) for x in (a, b, c))
        if peers.torch is not None:
            torch = peers.torch
            tat, tbt, tct = (torch.from_numpy(x) for x in (at, bt, ct))

            def torch_call(reps: int) -> None:
                for _ in range(reps):
                    tct.baddbmm_(tbt, tat)

            contenders.append(Contender("torch", torch_call, torch_peer.threads(torch, threads)))
        scratch = np.empty_like(ct)

        def numpy_call(reps: int) -> None:
            for _ in range(reps):
                np.matmul(bt, at, out=scratch)
                np.add(ct, scratch, out=ct)

        contenders.append(Contender("numpy", numpy_call, blas_threads(threads)))
        return contenders + self.stream_contender()

    def stream_contender(self) -> list[Contender]:
        """`stream`, the memory variant's reference, where its driver builds."""
        driver = memory.load() if self.variant == "memory" else None
        if driver is None or isinstance(driver, str):
            return []
        a, b, c, threads = self.a, self.b, self.c, self.threads

        def stream(reps: int) -> float:
            return driver.stream(a, b, c, reps, threads)

        return [Contender("stream", stream, check=self.check.unchanged)]


def parse_shape(text: str) -> tuple[int, int, int]:
    """`MxNxK` of positive integers, one batch member of which fits in memory as float64
    twice over (A, B and C, and as much again: the check's copy of C, numpy's scratch...)."""
    try:
        m, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        m = n = k = 0
    if min(m, n, k) < 1:
        raise argparse.ArgumentTypeError(f"expected MxNxK of positive integers, got {text!r}")
    harness.check_memory(2 * 8 * (m * k + k * n + m * n), f"a batch member of {m}x{n}x{k}")
    return m, n, k


def add_shape_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shapes", type=harness.parse_list(parse_shape), help="MxNxK,... (M,N,K)")


def add_options(parser: argparse.ArgumentParser) -> None:
    add_shape_option(parser)
    parser.add_argument(
        "--variants", type=harness.parse_list(harness.choice(VARIANTS, "variant")),
        help=f"of {','.join(VARIANTS)} (default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--working-set-mb", dest="working_set", type=harness.amount(10**6, "MB"),
        help="memory variant size (default 200)",
    )  # fmt: skip
    parser.add_argument(
        "--cache-kb", dest="cache", type=harness.amount(10**3, "kB"),
        help="cache variant size (default 256)",
    )  # fmt: skip
    parser.add_argument("--launch-batch", type=positive, help="launch variant batch (default 64)")
    parser.add_argument(
        "--libxsmm-prefetch", action="store_true", help="libxsmm kernels prefetch the next operands"
    )
    parser.add_argument(
        "--aligned-copy", action="store_true", help="also time nanotc on line-aligned copies"
    )


def sizes_from(args: argparse.Namespace, quick: bool) -> Sizes:
    sizes = Sizes.quick() if quick else Sizes()
    if args.working_set:
        sizes = replace(sizes, working_set=args.working_set)
    if args.cache:
        sizes = replace(sizes, cache=args.cache)
    if args.launch_batch:
        sizes = replace(sizes, launch_batch=args.launch_batch)
    return sizes


def notes_for(sizes: Sizes, variants: Sequence[str]) -> list[str]:
    if "memory" not in variants:
        return []
    notes = []
    llc = harness.last_level_cache()
    if llc and sizes.working_set <= llc:
        notes.append(
            f"memory variant: {sizes.working_set / 1e6:.0f} MB fits in this CPU's "
            f"{llc >> 20} MiB last-level cache; raise --working-set-mb for DRAM bandwidth"
        )
    driver = memory.load()
    if isinstance(driver, str):
        notes.append(f"memory variant: no stream reference ({driver})")
    return notes


def target_notes(rows: Sequence[Row]) -> list[str]:
    """How the memory and cache rows stand against issue 4's W2 targets. A row below
    TORCH_FACTOR x torch also says what share of its bound torch runs at, the bound being
    the peak of its threads (and, from memory, the stream's rate where that is lower): from
    half of it up, TORCH_FACTOR x torch would be faster than the bound."""
    measured = [r for r in rows if r.variant in ("memory", "cache")]
    notes = []
    for variant in ("memory", "cache"):
        ours = [r for r in measured if r.variant == variant and r.ratio("libxsmm")]
        if ours:
            ratios = [r.ratio("libxsmm") or 0.0 for r in ours]
            low = [f"{_label(r)} {x:.2f}" for r, x in zip(ours, ratios) if x < LEAST_OVER_LIBXSMM]
            below = f" (below: {', '.join(low)})" if low else ""
            mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
            notes.append(
                f"target {variant}: {len(ours) - len(low)} of {len(ours)} rows >= "
                f"{LEAST_OVER_LIBXSMM}x libxsmm{below}; geometric mean {mean:.2f}x "
                f"(target {GEOMEAN_OVER_LIBXSMM}x)"
            )
    notes += [_torch_note(r) for r in measured if (r.ratio("torch") or TORCH_FACTOR) < TORCH_FACTOR]
    return notes


def _torch_note(row: Row) -> str:
    """A row below TORCH_FACTOR x torch, with torch's share of the row's bound."""
    torch = row.gflops(row.peers["torch"])
    bound, what = row.peak or math.inf, "peak"
    if "stream" in row.peers and row.gflops(row.peers["stream"]) < bound:
        bound, what = row.gflops(row.peers["stream"]), "stream rate"
    share = f"; torch runs at {torch / bound:.0%} of the {what}" if math.isfinite(bound) else ""
    ratio = row.ratio("torch") or 0.0
    return f"target: {_label(row)} at {ratio:.2f}x torch (target {TORCH_FACTOR}x){share}"


def _label(row: Row) -> str:
    return f"{row.variant} {row.shape.split()[0]} {row.dtype} {row.threads}T"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_common_options(parser)
    add_options(parser)
    args = parser.parse_args(argv)
    settings = harness.settings_from(args, threads=(1, 2), dtypes=("f32", "f64"))
    harness.preamble(settings)
    peers = discover(settings.peers)
    sizes = sizes_from(args, settings.quick)
    variants = tuple(args.variants or VARIANTS)
    rows = run(
        settings, peers, args.shapes, variants, sizes, args.libxsmm_prefetch, args.aligned_copy
    )
    csv = None if args.no_csv else "w2_batched"
    notes = peers.notes + notes_for(sizes, variants) + target_notes(rows)
    harness.report(
        rows,
        "W2 batched small GEMM C_i += A_i B_i (column-major)",
        notes,
        csv,
        spread=settings.spread,
    )


if __name__ == "__main__":
    main()
