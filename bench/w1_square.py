"""W1: square GEMM C = A B for n = 256, 512, 1024, 2048; fp32 and fp64; 1 and 2 threads.

nanotc: `kernels.column_blocks` — work-group g computes the column block C[:, g*nb:(g+1)*nb]
with one `gemm.n.n 1.0, %A, %b, 0.0, %c`, launched with group_size = n/nb. The default is one
block per thread (nb = n/threads): every work-group packs all of A, so narrower blocks repeat
that packing (nb = n/8 ran 10-15% slower); `--nb` overrides. Peers on the same column-major arrays:
numpy (np.matmul into C^T = B^T A^T, i.e. in place; BLAS threads set to match), torch.mm
(same trick, torch threads set to match), BLIS (bli_?gemm with explicit strides). FLOPs: 2n^3.

    python -m bench.w1_square [--sizes 256,512] [--nb 128] [--threads 1,2] [--dtypes f32]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from bench import harness, kernels
from bench.harness import Contender, Row, Settings
from bench.peers import Peers, discover, torch_peer
from bench.peers.threads import blas_threads, blas_threads_note
from nanotc.cli.options import positive

SIZES = (256, 512, 1024, 2048)
QUICK_SIZES = (64, 128)
ARRAYS = 9  # n x n arrays at once per size, of up to 8 bytes an element (`size`)


def block_size(n: int, nb: int | None, threads: int) -> int:
    """Columns per work-group: `nb`, else n/threads; either must divide n."""
    block = nb or max(1, n // threads)
    if n % block:
        given = f"nb={nb}" if nb else f"the default nb = n/threads = {block} ({threads} threads)"
        raise ValueError(f"{given} does not divide n={n}")
    return block


def check_blocks(sizes: Sequence[int], nb: int | None, threads: Sequence[int]) -> None:
    """Raise ValueError unless `block_size` divides every n on every thread count."""
    for n in sizes:
        for count in threads:
            block_size(n, nb, count)


def run(
    settings: Settings,
    peers: Peers | None = None,
    sizes: Sequence[int] | None = None,
    nb: int | None = None,
) -> list[Row]:
    """One row per (dtype, n, threads): nanotc and every available peer, validated then timed."""
    peers = peers if peers is not None else discover(settings.peers)
    sizes = tuple(sizes or (QUICK_SIZES if settings.quick else SIZES))
    check_blocks(sizes, nb, settings.threads)  # before any row is timed
    rng = np.random.default_rng(settings.seed)
    rows = []
    for dtype in settings.dtypes:
        for n in sizes:
            rows += _size(settings, peers, rng, dtype, n, nb)
    return rows


def _size(
    settings: Settings, peers: Peers, rng: np.random.Generator, dtype: str, n: int, nb: int | None
) -> list[Row]:
    np_dtype = harness.DTYPES[dtype]
    a = np.asfortranarray(rng.uniform(-1, 1, (n, n)).astype(np_dtype))
    b = np.asfortranarray(rng.uniform(-1, 1, (n, n)).astype(np_dtype))
    c = np.full((n, n), np.nan, np_dtype, order="F")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    expected, bound = a64 @ b64, np.abs(a64) @ np.abs(b64)

    def check(what: str) -> None:
        harness.check_gemm(what, c, expected, bound, n, np_dtype)
        c.fill(np.nan)  # the next implementation must write every element (beta = 0)

    rows = []
    for threads in settings.threads:
        block = block_size(n, nb, threads)
        kernel = kernels.compiled(kernels.column_blocks(dtype, block))

        def nanotc_call(
            threads: int = threads, kernel: kernels.Kernel = kernel, block: int = block
        ) -> None:
            kernel(a, b, c, group_size=n // block, num_threads=threads)

        contenders = [Contender("nanotc", harness.repeat(nanotc_call))]
        contenders += gemm_peers(peers, a, b, c, threads)
        timings, peak = harness.compare_with_peak(
            f"n={n} {dtype} threads={threads}", contenders, check, settings,
            harness.PEAK_KEYS[dtype], threads=threads,
        )  # fmt: skip
        rows.append(
            Row(
                workload="w1",
                shape=f"{n}x{n}x{n}",
                dtype=dtype,
                threads=threads,
                flops=2.0 * n**3,
                nanotc=timings.pop("nanotc"),
                peers=timings,
                peak=peak.gflops,
                peak_in_rounds=peak.in_rounds,
                peak_loop=peak.timing,
                params=f"nb={block}, group_size={n // block}",
                note=blas_threads_note(threads),
            )
        )
    return rows


def gemm_peers(
    peers: Peers, a: np.ndarray, b: np.ndarray, c: np.ndarray, threads: int
) -> list[Contender]:
    """The available peers computing C = A B on the same column-major arrays (W1 and W3), each
    on `threads` threads."""
    numpy_call = harness.repeat(lambda: np.matmul(b.T, a.T, out=c.T))
    contenders = [Contender("numpy", numpy_call, blas_threads(threads))]
    if peers.torch is not None:
        torch = peers.torch
        ta, tb, tc = (torch.from_numpy(x) for x in (a, b, c))
        torch_call = harness.repeat(lambda: torch.mm(tb.T, ta.T, out=tc.T))
        contenders.append(Contender("torch", torch_call, torch_peer.threads(torch, threads)))
    if peers.blis is not None:
        blis = peers.blis
        blis_call = harness.repeat(lambda: blis.gemm(a, b, c))
        contenders.append(Contender("blis", blis_call, blis.threads(threads)))
    return contenders


def size(text: str) -> int:
    """An n of at least 1 whose arrays fit in memory: ARRAYS n x n arrays of up to 8 bytes
    an element (A, B and C; the check's float64 A, B, product, bound and absolute values)."""
    n = positive(text)
    harness.check_memory(ARRAYS * 8 * n * n, f"n={n}")
    return n


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes", type=harness.parse_list(size), help="n values (default 256..2048)"
    )
    parser.add_argument("--nb", type=positive, help="columns per work-group (default n/threads)")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_common_options(parser)
    add_options(parser)
    args = parser.parse_args(argv)
    settings = harness.settings_from(args, threads=(1, 2), dtypes=("f32", "f64"))
    try:
        check_blocks(args.sizes or (QUICK_SIZES if settings.quick else SIZES), args.nb,
                     settings.threads)  # fmt: skip
    except ValueError as error:
        parser.error(f"argument --sizes/--nb: {error}")
    harness.preamble(settings)
    peers = discover(settings.peers)
    rows = run(settings, peers, sizes=args.sizes, nb=args.nb)
    csv = None if args.no_csv else "w1_square"
    harness.report(
        rows, "W1 square GEMM C = A B (column-major)", peers.notes, csv, spread=settings.spread
    )


if __name__ == "__main__":
    main()
