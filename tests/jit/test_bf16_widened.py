"""bf16 gemms widened to f32 FMAs (targets without a fast vdpbf16ps): which tiles split A's
rows into even and odd ones (`lowering.nanokernel.split_pairs`), and the results of split and
unsplit tiles, B's widened broadcasts and mixed bf16/f32 operands against float64 products
of the same values (f32 accumulation), for transposes, M tails, alpha and beta, and
batch-reduce loops. The plans are checked on every host; the results on the AVX2 targets
this machine runs (`runnable`)."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from nanotc.codegen.asm import hot_loops
from nanotc.targets import Target

from .helpers import ZEN3, compiled, runnable

BF16 = ml_dtypes.bfloat16
WIDENING: tuple[str | Target, ...] = ("avx2", ZEN3)
"""FMAs on widened bf16: a generic AVX2 target, and Zen 3's (two k steps an iteration)."""


def literal_text(m: int, n: int | str, k: int, alpha: float | str, beta: float | str,
                 trans: str = "nn", types: tuple[str, str] = ("bf16", "bf16")) -> str:  # fmt: skip
    """alpha and beta as literals: alpha 1 and beta 1 keep no epilogue registers (the tiles
    are widest) and start the tiles from C itself. A and B of `types`, C f32 (`n`, alpha and
    beta may also be `?` and parameters `%alpha`, `%beta`)."""
    ta, tb = trans
    a = f"memref<{types[0]}x{k}x{m}>" if ta == "t" else f"memref<{types[0]}x{m}x{k}>"
    b = f"memref<{types[1]}x{n}x{k}>" if tb == "t" else f"memref<{types[1]}x{k}x{n}>"
    c = f"memref<f32x{m}x{n}>"
    return f"""func @k(%alpha: f32, %A: {a}, %B: {b}, %beta: f32, %C: {c}) {{
  gemm.{ta}.{tb} {alpha}, %A, %B, {beta}, %C : f32, {a}, {b}, f32, {c}
}}"""


def batch_reduce_text(m: int, n: int, k: int, members: int) -> str:
    """C += sum_i A_i B_i: a batch-reduce loop, whose tiles always split A."""
    a, b = f"memref<bf16x{m}x{k}x{members}>", f"memref<bf16x{k}x{n}x{members}>"
    am, bm, c = f"memref<bf16x{m}x{k}>", f"memref<bf16x{k}x{n}>", f"memref<f32x{m}x{n}>"
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  for %i = 0, {members} {{
    %a = subview %A[:, :, %i] : {a}
    %b = subview %B[:, :, %i] : {b}
    gemm.n.n 1.0, %a, %b, 1.0, %C : f32, {am}, {bm}, f32, {c}
  }}
}}"""


def check(got: np.ndarray, want: np.ndarray, bound: np.ndarray, k: int) -> None:
    eps = float(np.finfo(np.float32).eps)
    assert np.all(np.abs(got - want) <= 4 * eps * (np.sqrt(k) + 4) * bound + 1e-30)


def operand(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    return np.asfortranarray(rng.uniform(-1, 1, shape)).astype(dtype)


def split_pair_lines(text: str, target: str | Target) -> list[str]:
    plans = compiled(text, target).nanokernels()
    return [line for line in plans.splitlines() if "even/odd order" in line]


@pytest.mark.parametrize("target", WIDENING, ids=["avx2", "zen3"])
@pytest.mark.parametrize(("shape", "split"), [
    ((64, 64, 256), True),  # 16 x 5 tiles (and 16 x 4): 256 k steps for 5 columns
    ((64, 60, 25), True),  # 5 steps a column
    ((64, 60, 24), False),  # fewer: reordering C would cost more than the split saves
    ((8, 8, 64), False),  # one vector: nothing to pair
], ids=str)  # fmt: skip
def test_long_k_tiles_split_a_into_even_and_odd_rows(
    shape: tuple[int, int, int], split: bool, target: str | Target
) -> None:
    assert bool(split_pair_lines(literal_text(*shape, 1.0, 1.0), target)) is split


def test_batch_reduce_tiles_split_a_and_dynamic_rows_do_not() -> None:
    assert split_pair_lines(batch_reduce_text(32, 6, 8, 4), "avx2")
    a, b, c = "memref<bf16x?x64>", "memref<bf16x64x6>", "memref<f32x?x6>"
    dynamic = f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 1.0, %C : f32, {a}, {b}, f32, {c}
}}"""
    assert not split_pair_lines(dynamic, "avx2")


TRANSPOSED_CASES = [
    ((64, 12, 64), "nn", True),  # 16 x 4 tiles, one split pair each
    ((35, 9, 70), "nn", True),  # 40 x 2: two split pairs, then a masked vector of three rows
    ((36, 4, 41), "nt", True),  # two split pairs and four rows masked; B along N
    ((40, 5, 41), "nt", True),  # 16 x 5 tiles split, then an 8-row one
    ((48, 7, 33), "tn", False),  # A^T: its rows are not adjacent
    ((21, 3, 5), "tt", False),
]


@pytest.mark.parametrize("target", WIDENING, ids=["avx2", "zen3"])
@pytest.mark.parametrize(("shape", "trans", "split"), TRANSPOSED_CASES, ids=str)
def test_the_checked_gemms_split_where_a_is_along_m(shape: tuple[int, int, int], trans: str,
                                                    split: bool, target: str | Target) -> None:  # fmt: skip
    assert bool(split_pair_lines(literal_text(*shape, 1.0, 1.0, trans), target)) is split


@pytest.mark.parametrize("target", runnable(*WIDENING))
@pytest.mark.parametrize(("shape", "trans", "split"), TRANSPOSED_CASES, ids=str)
def test_widened_gemms_match_float64(shape: tuple[int, int, int], trans: str, split: bool,
                                     target: str | Target, rng) -> None:  # fmt: skip
    m, n, k = shape
    ta, tb = trans
    a = operand(rng, (k, m) if ta == "t" else (m, k), BF16)
    b = operand(rng, (n, k) if tb == "t" else (k, n), BF16)
    c = operand(rng, (m, n), np.float32)
    x = a.astype(np.float64).T if ta == "t" else a.astype(np.float64)
    y = b.astype(np.float64).T if tb == "t" else b.astype(np.float64)
    want = c + x @ y
    bound = np.abs(c) + np.abs(x) @ np.abs(y)
    text = literal_text(m, n, k, 1.0, 1.0, trans)
    compiled(text, target)["k"](0.0, a, b, 0.0, c, group_size=1)
    check(c, want, bound, k)


@pytest.mark.parametrize("element", ["bf16", "f16"])
def test_a_transposed_16_bit_a_is_packed_into_f32_where_it_is_widened(element: str) -> None:
    """A static A^T of 16-bit floats is transposed and widened into an f32 scratch once, as
    f32's is packed, instead of gathered element by element in every K loop (bf16 .t.n
    batches in L2 on a Zen 3: 2.5-4x at 16^3-64^3, 1.06x at 8^3); not on a target whose
    bf16 tiles use dot products (they pack VNNI pairs or gather)."""
    text = literal_text(64, 64, 64, 1.0, 1.0, "tn", (element, element))
    for target in WIDENING:
        compilation = compiled(text, target)
        pack = rf"tile.pack.t %A\[0, 0\] rows 64 cols 64 panel 64 into %\d+ : memref<{element}"
        assert re.search(pack, compilation.tiled())  # (an f16 B's f32 copy comes first)
        assert "memref<f32x64x64>" in compilation.tiled().split("tile.pack.t")[1].split("\n")[0]
        loops = hot_loops(compilation.assembly(), "k")
        assert loops and all(not loop.stack_accesses() for loop in loops)
        # a gather takes each lane's address out of a vector of pointers
        assert all("vpextrq" not in i for loop in loops for i in loop.instructions)
    if element == "bf16":
        assert "tile.pack.t.pairs %A" in compiled(text, "avx512").tiled()


@pytest.mark.parametrize("target", runnable(*WIDENING))
@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 1.0), (1.0, 0.0), (2.0, 1.0), (1.0, -3.0)])
def test_split_tiles_put_c_back_in_order(alpha: float, beta: float, target: str | Target,
                                         rng) -> None:  # fmt: skip
    """Tiles starting from C (alpha 1, beta 1) reorder it into even and odd rows and back;
    the others reorder their sums before the epilogue."""
    m, n, k = 32, 6, 48
    text = literal_text(m, n, k, alpha, beta)
    assert split_pair_lines(text, target)
    a, b, c = (
        operand(rng, (m, k), BF16),
        operand(rng, (k, n), BF16),
        operand(rng, (m, n), np.float32),
    )
    x, y = a.astype(np.float64), b.astype(np.float64)
    want = beta * c + alpha * (x @ y)
    bound = abs(beta) * np.abs(c) + abs(alpha) * (np.abs(x) @ np.abs(y))
    compiled(text, target)["k"](0.0, a, b, 0.0, c, group_size=1)
    check(c, want, bound, k)


@pytest.mark.parametrize("target", runnable(*WIDENING))
@pytest.mark.parametrize("types", [("bf16", "f32"), ("f32", "bf16")], ids="-".join)
def test_one_bf16_operand_beside_an_f32_one(types: tuple[str, str], target: str | Target,
                                            rng) -> None:  # fmt: skip
    """Only A bf16: A's pairs split, B's f32 broadcasts as they are; only B bf16: B's
    broadcasts widen, A's f32 vectors load as they are."""
    m, n, k = 48, 10, 64
    dtypes = [BF16 if t == "bf16" else np.float32 for t in types]
    a, b = operand(rng, (m, k), dtypes[0]), operand(rng, (k, n), dtypes[1])
    c = operand(rng, (m, n), np.float32)
    x, y = a.astype(np.float64), b.astype(np.float64)
    want = c + 0.5 * (x @ y)
    bound = np.abs(c) + 0.5 * (np.abs(x) @ np.abs(y))
    text = literal_text(m, n, k, 0.5, 1.0, types=types)
    compiled(text, target)["k"](0.0, a, b, 0.0, c, group_size=1)
    check(c, want, bound, k)


@pytest.mark.parametrize("target", runnable(*WIDENING))
@pytest.mark.parametrize("shape", [(64, 12, 64), (35, 9, 70), (8, 8, 8)], ids=str)
def test_f16_operands_match_float64(shape: tuple[int, int, int], target: str | Target,
                                    rng) -> None:  # fmt: skip
    """f16 A and B into f32 C: B's broadcasts converted from a word broadcast in K loops
    (`vec.splat_f16`), element by element where K is unrolled (8^3)."""
    m, n, k = shape
    a, b = operand(rng, (m, k), np.float16), operand(rng, (k, n), np.float16)
    c = operand(rng, (m, n), np.float32)
    x, y = a.astype(np.float64), b.astype(np.float64)
    want, bound = c + x @ y, np.abs(c) + np.abs(x) @ np.abs(y)
    text = literal_text(m, n, k, 1.0, 1.0, types=("f16", "f16"))
    compiled(text, target)["k"](0.0, a, b, 0.0, c, group_size=1)
    check(c, want, bound, k)


@pytest.mark.parametrize("target", runnable(*WIDENING))
def test_batch_reduce_tiles_match_float64(target: str | Target, rng) -> None:
    m, n, k, members = 40, 7, 9, 5
    a, b = operand(rng, (m, k, members), BF16), operand(rng, (k, n, members), BF16)
    c = operand(rng, (m, n), np.float32)
    x, y = a.astype(np.float64), b.astype(np.float64)
    want = c + np.einsum("mki,kni->mn", x, y)
    bound = np.abs(c) + np.einsum("mki,kni->mn", np.abs(x), np.abs(y))
    compiled(batch_reduce_text(m, n, k, members), target)["k"](a, b, c, group_size=1)
    check(c, want, bound, k * members)
