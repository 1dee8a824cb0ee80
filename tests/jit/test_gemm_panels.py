"""The row-panel path (a large A read in place panel by panel, B within L2): when it is
taken, its tile and K blocks, and its results against numpy for f32 and f64, transposed B,
alpha and beta (beta 0 never reading C), M and N tails and unequal K blocks, on every
target."""

from __future__ import annotations

import numpy as np
import pytest

from nanotc.ir.types import ScalarType
from nanotc.lowering.gemm_panels import panel_depth
from nanotc.lowering.register_tile import (
    RegisterTile,
    a_vector_cycles,
    choose,
    choose_tall,
    estimate,
)
from nanotc.targets import get

from .helpers import compiled
from .test_gemm_blocked import check, expected, gemm_text, operands, path_of

SHAPE = (611, 45, 467)  # M, N, K: A over 1 MiB in f32, B 84 KiB; no extent a whole tile


def shapes_of(ta: str, tb: str, m: int, n: int, k: int) -> tuple[str, str, str]:
    return (f"{k}x{m}" if ta == "t" else f"{m}x{k}", f"{n}x{k}" if tb == "t" else f"{k}x{n}",
            f"{m}x{n}")  # fmt: skip


def takes_row_panels(tiled: str) -> bool:
    return path_of(tiled) == "panels"


@pytest.mark.parametrize("tb", ["n", "t"])
@pytest.mark.parametrize("ty", ["f32", "f64"])
@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 0.0), (1.0, 1.0), (-1.5, 0.5)], ids=str)
def test_row_panels_match_numpy(ty: str, tb: str, alpha: float, beta: float, rng) -> None:
    m, n, k = SHAPE
    compilation = compiled(gemm_text(ty, "n", tb, shapes_of("n", tb, m, n, k)))
    assert takes_row_panels(compilation.tiled())
    a, b, c = operands(rng, ty, "n", tb, m, n, k)
    want = expected(a, b, c, "n", tb, alpha, beta)
    compilation["k"](alpha, a, b, beta, c, group_size=1)
    check(c, want, ty, k)


@pytest.mark.parametrize(("ty", "target"), [("f32", "avx2"), ("f64", "generic")])
def test_row_panels_on_narrower_targets(ty: str, target: str, rng) -> None:
    m, n, k = SHAPE
    compilation = compiled(gemm_text(ty, "n", "n", shapes_of("n", "n", m, n, k)), target)
    assert takes_row_panels(compilation.tiled())
    a, b, c = operands(rng, ty, "n", "n", m, n, k)
    want = expected(a, b, c, "n", "n", 2.0, -1.0)
    compilation["k"](2.0, a, b, -1.0, c, group_size=1)
    check(c, want, ty, k)


def test_beta_zero_never_reads_c(rng) -> None:
    """The first K block writes C: no pass over C before it, and a C of NaNs does not leak."""
    m, n, k = SHAPE
    a_t, b_t, c_t = (f"memref<f32x{s}>" for s in shapes_of("n", "n", m, n, k))
    compilation = compiled(f"""func @k(%A: {a_t}, %B: {b_t}, %C: {c_t}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a_t}, {b_t}, f32, {c_t}
}}""")
    tiled = compilation.tiled()
    assert takes_row_panels(tiled) and "tile.scale" not in tiled
    a, b, _ = operands(rng, "f32", "n", "n", m, n, k)
    c = np.full((m, n), np.nan, np.float32, order="F")
    compilation["k"](a, b, c, group_size=1)
    check(c, a.astype(np.float64) @ b.astype(np.float64), "f32", k)


@pytest.mark.parametrize(
    ("ta", "shape", "panels"),
    [
        ("n", (3136, 64, 576), True),  # W3: A 7 MiB, B 144 KiB
        ("n", (784, 256, 512), True),  # B 512 KiB: half of L2 is 1 MiB
        ("t", (3136, 64, 576), False),  # op(A)'s rows are not adjacent: packed blocks
    ],
    ids=str,
)
def test_path_taken(ta: str, shape: tuple[int, int, int], panels: bool) -> None:
    text = gemm_text("f32", ta, "n", shapes_of(ta, "n", *shape))
    assert takes_row_panels(compiled(text, "avx512").tiled()) is panels


def test_dynamic_sizes_never_take_row_panels() -> None:
    tiled = compiled(gemm_text("f32", "n", "n", ("?x?",) * 3)).tiled()
    assert "subview %A[" not in tiled


def test_tile_is_the_tallest_the_model_ties() -> None:
    """On AVX-512 the model ties 2 x 13 and 3 x 8 for W3's N = 64; the row panels take 3 x 8,
    and K = 576 splits into equal blocks whose A block fills at most half of L1."""
    target = get("avx512")
    m, n, k = 3136, 64, 576
    tall = choose_tall(target, ScalarType.F32, m, n, k)
    usual = choose(target, ScalarType.F32, m, n, k)
    assert (tall.mv, tall.nr) == (3, 8) and tall.mv > usual.mv
    from_l2 = a_vector_cycles(target, ScalarType.F32, m, k)
    assert estimate(tall, m, n, k, from_l2) <= 1.01 * estimate(usual, m, n, k, from_l2)
    depth = panel_depth(target, tall, 4, k)
    blocks = -(-k // depth)
    assert tall.mr * depth * 4 <= target.l1_bytes // 2 and blocks * depth - k < blocks
    tiled = compiled(gemm_text("f32", "n", "n", shapes_of("n", "n", m, n, k)), "avx512").tiled()
    assert f"tile {tall.mr} x {tall.nr}" in tiled


def test_k_within_one_block_stays_whole() -> None:
    tile = RegisterTile(3, 8, 16)
    assert panel_depth(get("avx512"), tile, 4, 100) == 100
