"""W4: bf16 gemm (bf16 A and B, f32 C, f32 accumulation) against fp32 and bf16 peers.

Three parts, each row comparing nanotc's bf16 kernel with nanotc's own fp32 kernel on the same
shape (column `f32`: nanotc fp32 GFLOP/s; ratio above 1: bf16 is faster) and with the bf16
peers found:

  mlp      a 512-batch MLP layer C = A B: M = 512, N = K = 1024 and 2048; 1 and 2 threads
           (`kernels.column_blocks`, one column block per thread as in W1). Peer: torch.mm
           on bf16 tensors (oneDNN; its output is bf16, validated with bf16 tolerance).
  brgemm   batch-reduce C += sum_i A_i B_i over 32 (64^3) or 64 (32^3) pairs, one thread,
           swept many times per call (`kernels.batch_reduce_repeated`). Peer: libxsmm's bf16
           batch-reduce kernel (A pre-packed in its VNNI-2 layout, timed in C).
  mlp-bf16c  the mlp part into a bf16 C (f32 accumulation, rounded once): C's size is known
           at run time only, so nanotc computes it in f32 panels and rounds them into C
           (`lowering.gemm.through_f32_scratch`). Peer: torch.mm, whose C is bf16 too.
  batched  W2's cache-resident batched small gemms C_i += A_i B_i in bf16, one and two threads
           (`kernels.batched_repeated`), a batch of ~256 KB (in L2; `--cache-kb` for
           another). Peer: torch.baddbmm_ on bf16 tensors (bf16 C). `--inputs f16`: f16 A
           and B instead (no peer). A, B and C start `--offset` bytes past a cache line (0
           unless given: numpy would put arrays this small wherever malloc did, and C's
           columns straddling lines move bf16 8^3 by 1.17x and f32 8^3 by 1.06x).
  memory   the same gemms as W2's memory variant: a batch of ~200 MB of bf16 A and B and f32
           C (`--working-set-mb`), one member per work-group (`kernels.batched`), one sweep
           per timed call; column `f32`: nanotc's fp32 kernel on the same members (their
           larger A and B), where bf16's smaller operands pay though its arithmetic cannot.
           No torch: its bf16 gemms on this kind of machine take seconds per sweep.

% peak is of the unit nanotc's kernel uses: AMX tiles (`amx-bf16` of bench.peak) when the
kernel has `tile.amx_gemm` or `tile.amx_small_gemm`, vdpbf16ps (`bf16`) when its code has
it, else fp32 FMAs (bf16 widened to f32, where the target's vdpbf16ps is slower than FMA).
The vdpbf16ps and FMA loops are timed in the same rounds as the kernels.

    python -m bench.w4_bf16 [--parts mlp,mlp-bf16c,brgemm,batched,memory] [--threads 1,2]
                            [--shapes 56x9x9,16x16x16]   (batched and memory)
                            [--cache-kb 16] [--working-set-mb 50] [--inputs f16] [--offset 16]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache

import ml_dtypes
import numpy as np

import nanotc
from bench import harness, kernels
from bench.harness import Contender, Row, Settings, Timing
from bench.peers import Peers, discover, torch_peer
from bench.w2_batched import SHAPES as BATCHED_SHAPES
from bench.w2_batched import add_shape_option

BF16 = ml_dtypes.bfloat16
SIXTEEN_BIT = {"bf16": BF16, "f16": np.float16}
PARTS = ("mlp", "mlp-bf16c", "brgemm", "batched", "memory")
MLP = ((512, 1024, 1024), (512, 2048, 2048))
QUICK_MLP = ((64, 128, 128),)
BRGEMM = ((64, 64, 64, 32), (32, 32, 32, 64))  # M, N, K, pairs
CALL_SECONDS = 0.1
CACHE_BYTES = 256 * 10**3
WORKING_SET_BYTES = 200 * 10**6


@cache
def unit(source: str) -> str:
    """The key of bench.peak's peaks for the unit the compiled kernel multiplies with: AMX
    tiles, vdpbf16ps, or FMAs on bf16 widened to f32."""
    compilation = nanotc.compile(source, name="<bench>")
    if "tile.amx_" in compilation.tiled():
        return "amx-bf16"
    return "bf16" if "vdpbf16ps" in compilation.assembly() else "fp32"


def sixteen_bit(rng: np.random.Generator, *shape: int, inputs: str = "bf16") -> np.ndarray:
    """Uniform values in [-1, 1] as a Fortran-ordered array of bf16 (or `inputs`)."""
    return np.asfortranarray(rng.uniform(-1, 1, shape).astype(SIXTEEN_BIT[inputs]))


class Check:
    """Validates C against a float64 product of the bf16 inputs: f32 accumulation, or bf16
    accumulation for a peer whose C is bf16 (its library's order is unknown), or
    (`rounded_to`) f32 accumulation rounded once to C's 16-bit type, as nanotc's bf16 C."""

    def __init__(self, expected: np.ndarray, bound: np.ndarray, k: int):
        self.expected, self.bound, self.k = expected, bound, k

    def __call__(self, c: np.ndarray, dtype: type, what: str, rounded_to: type | None = None
                 ) -> None:  # fmt: skip
        got = np.asarray(c, dtype=np.float64)
        tolerance_type = np.float32 if dtype is np.float32 else BF16
        eps = float(ml_dtypes.finfo(tolerance_type).eps)
        tolerance = 4 * eps * (np.sqrt(self.k) + 4) * self.bound + 1e-30
        if rounded_to is not None:
            tolerance += float(ml_dtypes.finfo(rounded_to).eps) * np.abs(self.expected)
        bad = ~(np.abs(got - self.expected) <= tolerance)
        if bad.any():
            raise harness.ValidationError(f"{what}: {int(bad.sum())} of {bad.size} wrong")


@dataclass(frozen=True)
class Batches:
    """The batched and memory parts' shapes (None: W2's) and the bytes of A, B and C in one
    batch of each."""

    shapes: Sequence[tuple[int, int, int]] | None = None
    cache_bytes: int = CACHE_BYTES
    working_set: int = WORKING_SET_BYTES
    inputs: str = "bf16"  # the batched part's A and B: bf16 or f16
    offset: int = 0  # bytes past a cache line where the batched part's A, B and C start


def run(settings: Settings, peers: Peers | None = None, parts: Sequence[str] = PARTS,
        batches: Batches = Batches()) -> list[Row]:  # fmt: skip
    peers = peers if peers is not None else discover(settings.peers)
    check_threads(parts, settings.threads, settings.quick)  # before any row is timed
    rng = np.random.default_rng(settings.seed)
    rows: list[Row] = []
    for part in parts:
        if part not in PARTS:
            raise ValueError(f"unknown part {part!r} (choose from {', '.join(PARTS)})")
        if part == "batched":
            rows += _batched(settings, peers, rng, batches)
        elif part == "memory":
            rows += _memory(settings, rng, batches)
        elif part == "mlp-bf16c":
            rows += _mlp(settings, peers, rng, output="bf16")
        else:
            rows += {"mlp": _mlp, "brgemm": _brgemm}[part](settings, peers, rng)
    return rows


def check_threads(parts: Sequence[str], threads: Sequence[int], quick: bool) -> None:
    """Raise ValueError unless every thread count divides the mlp parts' N: one column block
    per thread, all of the same width."""
    if not {"mlp", "mlp-bf16c"} & set(parts):
        return
    for _, n, _ in QUICK_MLP if quick else MLP:
        if uneven := next((t for t in threads if n % t), None):
            raise ValueError(f"the mlp parts' N = {n} is not a multiple of {uneven} threads")


def _mlp(settings: Settings, peers: Peers, rng: np.random.Generator, output: str = "f32"
         ) -> list[Row]:  # fmt: skip
    """The MLP layers into C of `output` (f32 or bf16)."""
    shapes = QUICK_MLP if settings.quick else MLP
    return [row for shape in shapes for row in _mlp_shape(settings, peers, rng, shape, output)]


def _mlp_shape(settings: Settings, peers: Peers, rng: np.random.Generator,
               shape: tuple[int, int, int], output: str) -> list[Row]:  # fmt: skip
    m, n, k = shape
    a, b = sixteen_bit(rng, m, k), sixteen_bit(rng, k, n)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    c_type = np.float32 if output == "f32" else BF16
    c, c32 = np.zeros((m, n), c_type, order="F"), np.zeros((m, n), np.float32, order="F")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    check = Check(a64 @ b64, np.abs(a64) @ np.abs(b64), k)

    def checked(what: str) -> None:
        check(c, np.float32, what, rounded_to=None if output == "f32" else c_type)

    def checked32(what: str) -> None:
        check(c32, np.float32, what)

    rows = []
    for threads in settings.threads:
        label = f"{m}x{n}x{k} threads={threads}"
        nb = n // threads
        source = kernels.column_blocks(output, nb, inputs="bf16")
        kernel, kernel32 = (
            kernels.compiled(source),
            kernels.compiled(kernels.column_blocks("f32", nb)),
        )

        def ours(t: int = threads, kernel: kernels.Kernel = kernel) -> None:
            kernel(a, b, c, group_size=t, num_threads=t)

        def ours32(t: int = threads, kernel32: kernels.Kernel = kernel32) -> None:
            kernel32(a32, b32, c32, group_size=t, num_threads=t)

        contenders = [
            Contender("nanotc", harness.repeat(ours)),
            Contender("f32", harness.repeat(ours32), check=checked32),
        ]
        if peers.torch is not None:
            contenders.append(_torch_mm(peers.torch, a, b, check, threads))
        timings, peak = harness.compare_with_peak(
            f"bf16 {label}", contenders, checked, settings, unit(source), threads=threads
        )
        variant = "mlp" if output == "f32" else "mlp-bf16c"
        rows.append(_row(variant, f"{m}x{n}x{k}", threads, 2.0 * m * n * k, timings, peak,
                         f"nb={nb}, group_size={threads}"))  # fmt: skip
    return rows


def _torch_mm(torch, a: np.ndarray, b: np.ndarray, check: Check, threads: int) -> Contender:
    """torch.mm on bf16 tensors, row-major views of the transposes: C^T = B^T A^T."""
    ta, tb = (torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) for x in (a, b))
    out = torch.empty((b.shape[1], a.shape[0]), dtype=torch.bfloat16)

    def call() -> None:
        torch.mm(tb.T, ta.T, out=out)

    def checked(what: str) -> None:
        check(out.float().numpy().T, BF16, what)

    return Contender("torch", harness.repeat(call), torch_peer.threads(torch, threads), checked)


def _brgemm(settings: Settings, peers: Peers, rng: np.random.Generator) -> list[Row]:
    shapes = ((32, 32, 32, 8),) if settings.quick else BRGEMM
    return [_brgemm_shape(settings, peers, rng, *shape) for shape in shapes]


def _brgemm_shape(
    settings: Settings, peers: Peers, rng: np.random.Generator, m: int, n: int, k: int, count: int
) -> Row:
    a, b = sixteen_bit(rng, m, k, count), sixteen_bit(rng, k, n, count)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    c = np.zeros((m, n), np.float32, order="F")
    product = np.einsum("mki,kni->mn", a64, b64)
    check = Check(product, np.einsum("mki,kni->mn", np.abs(a64), np.abs(b64)), k * count)
    source = kernels.batch_reduce_repeated("f32", m, n, k, inputs="bf16")
    kernel = kernels.compiled(source)
    kernel32 = kernels.compiled(kernels.batch_reduce_repeated("f32", m, n, k))

    def checked(what: str) -> None:
        check(c, np.float32, what)

    def from_zero(name: str, run: Callable[[int], float | None]) -> Contender:
        def call(reps: int) -> float | None:
            c.fill(0)  # each call sums from zero, so the validating call is exact
            return run(reps)

        return Contender(name, call)

    contenders = [
        from_zero("nanotc", lambda r: kernel(a, b, c, r, group_size=1)),
        from_zero("f32", lambda r: kernel32(a32, b32, c, r, group_size=1)),
    ]
    xsmm = peers.libxsmm
    missing = xsmm.bf16_brgemm_missing(m, n, k) if xsmm is not None else None
    if xsmm is not None and missing is None:
        packed = xsmm.vnni_pack(a)
        contenders.append(from_zero("libxsmm", lambda r: xsmm.bf16_brgemm(packed, b, c, reps=r)))
    label = f"{m}x{n}x{k} x{count}"
    timings, peak = harness.compare_with_peak(
        f"bf16 {label}", contenders, checked, settings, unit(source), CALL_SECONDS
    )
    row = _row("brgemm", label, 1, 2.0 * m * n * k * count, timings, peak, f"pairs={count}")
    return replace(row, note=f"libxsmm: {missing}") if missing else row


def _batched(
    settings: Settings, peers: Peers, rng: np.random.Generator, batches: Batches
) -> list[Row]:
    shapes = batches.shapes or (((16, 16, 16),) if settings.quick else BATCHED_SHAPES)
    return [
        row
        for m, n, k in shapes
        for row in _batched_shape(settings, peers, rng, (m, n, k), batches)
    ]


def _members(
    rng: np.random.Generator, shape: tuple[int, int, int], initial: np.ndarray,
    inputs: str = "bf16",
) -> tuple[np.ndarray, np.ndarray, Check]:  # fmt: skip
    """A batch of bf16 (or `inputs`) A_i and B_i (as many members as `initial`, C's starting
    values) and the check of C_i = initial_i + A_i B_i."""
    m, n, k = shape
    batch = initial.shape[2]
    a = sixteen_bit(rng, m, k, batch, inputs=inputs)
    b = sixteen_bit(rng, k, n, batch, inputs=inputs)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    product = initial + np.einsum("mki,kni->mni", a64, b64)
    bound = np.abs(initial) + np.einsum("mki,kni->mni", np.abs(a64), np.abs(b64))
    return a, b, Check(product, bound, k)


def _batched_shape(
    settings: Settings, peers: Peers, rng: np.random.Generator, shape: tuple[int, int, int],
    batches: Batches,
) -> list[Row]:  # fmt: skip
    m, n, k = shape
    per_member = (m * k + k * n) * 2 + m * n * 4
    batch = max(2, batches.cache_bytes // per_member // 2 * 2)
    initial = np.asfortranarray(rng.uniform(-1, 1, (m, n, batch)).astype(np.float32))
    a, b, check = _members(rng, shape, initial, batches.inputs)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    a, b, a32, b32, c = (harness.placed(x, batches.offset) for x in (a, b, a32, b32, initial))
    source = kernels.batched_repeated("f32", m, n, k, inputs=batches.inputs)
    kernel = kernels.compiled(source)
    kernel32 = kernels.compiled(kernels.batched_repeated("f32", m, n, k))

    def checked(what: str) -> None:
        check(c, np.float32, what)

    def from_initial(name: str, run: Callable[[int], None]) -> Contender:
        def call(reps: int) -> None:
            if reps == 1:  # the validating call starts from the initial C
                np.copyto(c, initial)
            run(reps)

        return Contender(name, call)

    rows = []
    for threads in settings.threads:
        label = f"{m}x{n}x{k} b{batch} threads={threads}"

        def ours(reps: int, t: int = threads) -> None:
            kernel(a, b, c, reps, group_size=t, num_threads=t)

        def ours32(reps: int, t: int = threads) -> None:
            kernel32(a32, b32, c, reps, group_size=t, num_threads=t)

        contenders = [from_initial("nanotc", ours), from_initial("f32", ours32)]
        if peers.torch is not None and batches.inputs == "bf16":
            contenders.append(_torch_baddbmm(peers.torch, a, b, initial, check, threads))
        timings, peak = harness.compare_with_peak(
            f"{batches.inputs} {label}", contenders, checked, settings, unit(source),
            CALL_SECONDS, threads,
        )  # fmt: skip
        rows.append(_row("batched", f"{m}x{n}x{k} b{batch}", threads, 2.0 * m * n * k * batch,
                         timings, peak, f"batch={batch}", batches.inputs))  # fmt: skip
    return rows


def _memory(settings: Settings, rng: np.random.Generator, batches: Batches) -> list[Row]:
    shapes = batches.shapes or (((16, 16, 16),) if settings.quick else BATCHED_SHAPES)
    working_set = 4 * 10**6 if settings.quick else batches.working_set
    return [row for shape in shapes for row in _memory_shape(settings, rng, shape, working_set)]


def _memory_shape(settings: Settings, rng: np.random.Generator, shape: tuple[int, int, int],
                  working_set: int) -> list[Row]:  # fmt: skip
    m, n, k = shape
    per_member = (m * k + k * n) * 2 + m * n * 4
    batch = max(2, working_set // per_member)
    c = np.zeros((m, n, batch), np.float32, order="F")
    a, b, check = _members(rng, shape, c)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    source = kernels.batched("f32", m, n, k, inputs="bf16")
    kernel = kernels.compiled(source)
    kernel32 = kernels.compiled(kernels.batched("f32", m, n, k))

    def checked(what: str) -> None:
        check(c, np.float32, what)

    def from_zero(name: str, run: Callable[[], None]) -> Contender:
        validated = False

        def call(reps: int) -> None:
            nonlocal validated
            if not validated:  # the validating call, the first: one sweep onto zeros
                c.fill(0)
                validated = True
            for _ in range(reps):
                run()

        return Contender(name, call)

    rows = []
    for threads in settings.threads:
        contenders = [
            from_zero("nanotc", lambda t=threads: kernel(a, b, c, group_size=batch, num_threads=t)),
            from_zero("f32", lambda t=threads: kernel32(a32, b32, c, group_size=batch,
                                                         num_threads=t)),
        ]  # fmt: skip
        label = f"{m}x{n}x{k} b{batch} threads={threads} (memory)"
        timings, peak = harness.compare_with_peak(
            f"bf16 {label}", contenders, checked, settings, unit(source), None, threads
        )
        row = _row("memory", f"{m}x{n}x{k} b{batch}", threads, 2.0 * m * n * k * batch,
                   timings, peak, f"batch={batch}, {batch * per_member} bytes")  # fmt: skip
        rows.append(replace(row, bytes=float((m * k + k * n) * 2 + 2 * m * n * 4) * batch))
    return rows


def _torch_baddbmm(
    torch, a: np.ndarray, b: np.ndarray, initial: np.ndarray, check: Check, threads: int
) -> Contender:
    """C_i^T += B_i^T A_i^T on bf16 tensors (torch has no bf16-in, f32-out batched gemm)."""
    at, bt = (x.transpose(2, 1, 0) for x in (a, b))
    tat, tbt = (torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16)
                for x in (at, bt))  # fmt: skip
    start = torch.from_numpy(np.ascontiguousarray(initial.transpose(2, 1, 0))).to(torch.bfloat16)
    tct = start.clone()

    def call(reps: int) -> None:
        if reps == 1:
            tct.copy_(start)
        for _ in range(reps):
            tct.baddbmm_(tbt, tat)

    def checked(what: str) -> None:
        check(tct.float().numpy().transpose(2, 1, 0), BF16, what)

    return Contender("torch", call, torch_peer.threads(torch, threads), checked)


def _row(part: str, shape: str, threads: int, flops: float, timings: dict[str, Timing],
         peak: harness.Peak, params: str, inputs: str = "bf16") -> Row:  # fmt: skip
    return Row(workload="w4", variant=part, shape=shape, dtype=inputs, threads=threads,
               flops=flops, nanotc=timings.pop("nanotc"), peers=timings, peak=peak.gflops,
               peak_in_rounds=peak.in_rounds, peak_loop=peak.timing, params=params)  # fmt: skip


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--parts", type=harness.parse_list(harness.choice(PARTS, "part")),
        help=f"of {','.join(PARTS)} (default: all)",
    )  # fmt: skip
    add_shape_option(parser)  # the batched part's
    parser.add_argument(
        "--cache-kb", dest="cache_bytes", type=harness.amount(10**3, "kB"),
        default=CACHE_BYTES, help="batched part's batch size (default 256)",
    )  # fmt: skip
    parser.add_argument(
        "--inputs", choices=tuple(SIXTEEN_BIT), default="bf16", help="batched part's A and B"
    )
    parser.add_argument(
        "--working-set-mb", dest="working_set", type=harness.amount(10**6, "MB"),
        default=WORKING_SET_BYTES, help="memory part's batch size (default 200)",
    )  # fmt: skip
    parser.add_argument(
        "--offset", type=harness.line_offset(4), default=0,  # f32 C: whole elements
        help="bytes past a cache line where the batched part's A, B and C start (default 0)",
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_common_options(parser)
    add_options(parser)
    args = parser.parse_args(argv)
    settings = harness.settings_from(args, threads=(1, 2), dtypes=("f32",))
    try:
        check_threads(args.parts or PARTS, settings.threads, settings.quick)
    except ValueError as error:
        parser.error(f"argument --threads: {error}")
    harness.preamble(settings)
    peers = discover(settings.peers)
    batches = Batches(
        args.shapes,
        args.cache_bytes,
        args.working_set,
        args.inputs,
        args.offset,
    )
    rows = run(settings, peers, tuple(args.parts or PARTS), batches)
    csv = None if args.no_csv else "w4_bf16"
    notes = [*peers.notes, "column f32: nanotc's fp32 kernel on the same shape"]
    if "batched" in (args.parts or PARTS):
        notes.append(f"batched part: A, B and C start {args.offset} bytes past a cache line")
    harness.report(
        rows,
        f"W4 {args.inputs} gemm ({args.inputs} A, B; f32 C)",
        notes,
        csv,
        spread=settings.spread,
    )


if __name__ == "__main__":
    main()
