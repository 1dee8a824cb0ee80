"""Batch-reduce loops of small bf16 gemms on AMX (`tile.amx_batch_gemm`): C += alpha * sum of
op(A_b) op(B_b) with every accumulator of C in a tile register across the loop; the loops
that keep one gemm per iteration instead; the same loops on vdpbf16ps (`tile.batch_gemm`);
results against float64 products.

What the compiler emits is checked on every host (compiling for AMX or AVX-512 needs
neither); the results only where the host runs that code."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nanotc
from nanotc import targets
from nanotc.codegen import asm

from .helpers import compiled, needs_host

AMX_HOST = targets.host().amx
BF16 = ml_dtypes.bfloat16


def batch_reduce(m: int, n: int, k: int, ta: str = "n", tb: str = "n", extra: str = "") -> str:
    """for b: C += alpha op(A_b) op(B_b) over the last mode of A and B (`extra`: more of the
    kernel, after the loop)."""
    a_shape = (k, m) if ta == "t" else (m, k)
    b_shape = (n, k) if tb == "t" else (k, n)
    a, b = (f"memref<bf16x{s[0]}x{s[1]}x?>" for s in (a_shape, b_shape))
    am, bm, c = a.replace("x?>", ">"), b.replace("x?>", ">"), f"memref<f32x{m}x{n}>"
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}, %alpha: f32) {{
  %count = size %A[2] : {a}
  for %i = 0, %count {{
    %a = subview %A[:,:,%i] : {a}
    %b = subview %B[:,:,%i] : {b}
    gemm.{ta}.{tb} %alpha, %a, %b, 1.0, %C : f32, {am}, {bm}, f32, {c}
  }}{extra}
}}"""


CASES = [  # shape, transposes, alpha
    ((32, 32, 32), "nn", 1.0),
    ((20, 9, 20), "nn", 1.0),  # overlapping accumulators, a 9-column block
    ((16, 16, 16), "tn", 1.0),  # A^T packed by the in-register transpose
    ((8, 8, 8), "nn", 0.5),  # alpha through the vector epilogue
    ((17, 30, 30), "tn", -2.0),
    ((32, 32, 96), "nn", 1.0),  # three chunks of K
    ((48, 32, 32), "nn", 1.0),  # six accumulators: all eight tile registers
]


@pytest.mark.parametrize(("shape", "trans", "alpha"), CASES, ids=str)
def test_batch_reduce_keeps_c_in_tiles(shape: tuple[int, int, int], trans: str, alpha: float,
                                       rng) -> None:  # fmt: skip
    text = batch_reduce(*shape, *trans)
    compilation = nanotc.compile(text, target="amx")
    assert "tile.amx_batch_gemm" in compilation.tiled()
    loops = asm.hot_loops(compilation.assembly(), "k", "tdpbf16ps")
    batch = min(loops, key=lambda loop: len(loop.instructions))  # (the work-group loop too)
    # C is loaded before the loop and stored after it; no tile goes through the stack
    assert not any(i.startswith("tilestored") for i in batch.instructions)
    assert batch.count("ldtilecfg") == 0
    if AMX_HOST:
        check_batch_reduce(nanotc.compile(text), shape, trans, alpha, rng)


@pytest.mark.parametrize(("shape", "trans", "alpha"), CASES, ids=str)
def test_batch_reduce_on_vdpbf16ps(shape: tuple[int, int, int], trans: str, alpha: float) -> None:
    """Without AMX (AVX512-BF16), the same loops keep C in vector registers across the batch
    (`tile.batch_gemm`, vdpbf16ps nanokernels); compiled on any host."""
    assert "tile.batch_gemm" in compiled(batch_reduce(*shape, *trans), "avx512").tiled()


@pytest.mark.parametrize(("shape", "trans", "alpha"), CASES, ids=str)
@needs_host("avx512")
def test_batch_reduce_on_vdpbf16ps_matches_float64(shape: tuple[int, int, int], trans: str,
                                                   alpha: float, rng) -> None:  # fmt: skip
    """The loops of `test_batch_reduce_on_vdpbf16ps`, run (`check_batch_reduce`)."""
    compilation = compiled(batch_reduce(*shape, *trans), "avx512")
    check_batch_reduce(compilation, shape, trans, alpha, rng)


UNPACKING_SHAPES = [(64, 64, 40), (48, 20, 17)]


@pytest.mark.parametrize("shape", UNPACKING_SHAPES, ids=str)
def test_bf16_batch_tiles_unpack_a_within_lanes(shape: tuple[int, int, int]) -> None:
    """A 64 x 64 C takes eleven columns of tiles, each interleaving every A_k's K pairs
    again: the K loop does it with in-lane unpacks, two rows of tiles at a time, and no
    cross-lane word permute (vpermt2w); nothing spilled. 48 rows: one pair of vectors
    unpacked and one interleaved alone; odd K. (Compiled on any host.)"""
    compilation = compiled(batch_reduce(*shape), "avx512")
    assert "tile.batch_gemm" in compilation.tiled() and "pack" not in compilation.tiled()
    loops = asm.hot_loops(compilation.assembly(), "k", "vdpbf16ps")
    assert loops
    for loop in loops:
        unpacks = [i for i in loop.instructions if i.startswith("vpunpck")]
        words = [i for i in loop.instructions if i.startswith("vpermt2w")]
        assert unpacks and all("%zmm" in i for i in unpacks)
        # per K pair: two unpacks for the pair of vectors, one vpermt2w for a third
        assert len(words) == (len(unpacks) // 2 if shape[0] // 16 == 3 else 0)
        assert loop.stack_accesses() == []


@pytest.mark.parametrize("shape", UNPACKING_SHAPES, ids=str)
@needs_host("avx512")
def test_bf16_batch_tiles_unpacking_a_match_float64(shape: tuple[int, int, int], rng) -> None:
    """The tiles of `test_bf16_batch_tiles_unpack_a_within_lanes`, run."""
    check_batch_reduce(compiled(batch_reduce(*shape), "avx512"), shape, "nn", 1.0, rng)


def dynamic_batch_reduce() -> str:
    """The batch reduction of `batch_reduce` with every size known only at run time."""
    a, c = "memref<bf16x?x?x?>", "memref<f32x?x?>"
    return f"""func @k(%A: {a}, %B: {a}, %C: {c}, %alpha: f32) {{
  %count = size %A[2] : {a}
  for %i = 0, %count {{
    %a = subview %A[:,:,%i] : {a}
    %b = subview %B[:,:,%i] : {a}
    gemm.n.n %alpha, %a, %b, 1.0, %C : f32, memref<bf16x?x?>, memref<bf16x?x?>, f32, {c}
  }}
}}"""


def test_dynamic_bf16_batch_reduce_keeps_c_in_vectors() -> None:
    """Sizes known only at run time still take `tile.batch_gemm` (compiled on any host)."""
    assert "tile.batch_gemm" in compiled(dynamic_batch_reduce(), "avx512").tiled()


@needs_host("avx512")
def test_dynamic_bf16_batch_tiles_mask_unpacked_pairs(rng) -> None:
    """Sizes known only at run time: each unpacked pair of vectors loads A's rows under
    one run-time mask of 32 lanes (rows past M load as zeros and are never stored)."""
    compilation = compiled(dynamic_batch_reduce(), "avx512")
    for shape in [(40, 7, 9), (64, 13, 16), (17, 3, 1)]:
        check_batch_reduce(compilation, shape, "nn", -0.5, rng)


def check_batch_reduce(compilation: nanotc.Compilation, shape: tuple[int, int, int],
                       trans: str, alpha: float, rng) -> None:  # fmt: skip
    """Results against float64 for batches of 0, 1, 2 and 9 members; an empty batch with
    alpha = inf leaves every bit of C (-0.0 included)."""
    m, n, k = shape
    for count in (0, 1, 2, 9):
        a_shape = ((k, m) if trans[0] == "t" else (m, k)) + (count,)
        b_shape = ((n, k) if trans[1] == "t" else (k, n)) + (count,)
        a = np.asfortranarray(rng.standard_normal(a_shape)).astype(BF16)
        b = np.asfortranarray(rng.standard_normal(b_shape)).astype(BF16)
        c = np.asfortranarray(rng.standard_normal((m, n))).astype(np.float32)
        x, y = a.astype(np.float64), b.astype(np.float64)
        x = x.transpose(1, 0, 2) if trans[0] == "t" else x
        y = y.transpose(1, 0, 2) if trans[1] == "t" else y
        want = c + alpha * np.einsum("mki,kni->mn", x, y)
        bound = np.abs(c) + abs(alpha) * np.einsum("mki,kni->mn", np.abs(x), np.abs(y))
        compilation["k"](a, b, c, np.float32(alpha), group_size=1)
        assert np.all(np.abs(c - want) <= 4e-7 * (np.sqrt(k * max(count, 1)) + 4) * bound + 1e-30)
    a, b = (np.zeros(s[:2] + (0,), BF16, order="F") for s in (a_shape, b_shape))
    c = np.asfortranarray(rng.standard_normal((m, n))).astype(np.float32)
    c[0, 0] = -0.0
    before = c.copy()
    compilation["k"](a, b, c, np.float32(np.inf), group_size=1)
    assert c.tobytes() == before.tobytes()  # no member: C as it was, not C + inf * 0


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (batch_reduce(64, 32, 32), "eight accumulators and their operands need ten registers"),
        (batch_reduce(32, 32, 32, tb="t"), "B's K values are not contiguous"),
        (
            batch_reduce(
                16,
                16,
                16,
                extra="""
  %X = alloca -> memref<bf16x32x32>
  %Y = alloca -> memref<f32x32x32>
  gemm.n.n 1.0, %X, %X, 0.0, %Y : f32, memref<bf16x32x32>, memref<bf16x32x32>, f32, memref<f32x32x32>""",
            ),
            "another AMX gemm shares the tile registers",
        ),
    ],
    ids=lambda x: x if len(x) < 80 else "",
)
def test_loops_left_to_one_gemm_per_iteration(text: str, why: str) -> None:
    tiled = nanotc.compile(text, target="amx").tiled()
    assert "tile.amx_batch_gemm" not in tiled and "tile.amx_small_gemm" in tiled, why
