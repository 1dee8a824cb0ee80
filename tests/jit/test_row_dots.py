"""The last few rows of C as dot products along K (`tile.row_dots`): when the direct path takes
them, its results against numpy for every remainder of 1 to 4 rows, f32 and f64, K with a
vector remainder, alpha and beta (beta 0 never using C, as a literal or at run time), on
every target; and its machine code."""

from __future__ import annotations

import re

import numpy as np
import pytest

from nanotc.codegen import asm

from .helpers import compiled
from .test_gemm_blocked import DTYPES, check

LANES = {"f32": 16, "f64": 8}  # AVX-512


def gemm_text(ty: str, m: int, n: int, k: int) -> str:
    """C = alpha A B + beta C with static shapes."""
    a, b, c = f"memref<{ty}x{m}x{k}>", f"memref<{ty}x{k}x{n}>", f"memref<{ty}x{m}x{n}>"
    return f"""func @k(%alpha: {ty}, %A: {a}, %B: {b}, %beta: {ty}, %C: {c}) {{
  gemm.n.n %alpha, %A, %B, %beta, %C : {ty}, {a}, {b}, {ty}, {c}
}}"""


def dot_rows(tiled: str) -> set[int]:
    return {int(r) for r in re.findall(r"tile\.row_dots\S* .* rows (\d+) cols", tiled)}


def run(ty: str, m: int, n: int, k: int, alpha: float, beta: float, rng,
        target: str = "host") -> None:  # fmt: skip
    compilation = compiled(gemm_text(ty, m, n, k), target)
    dt = DTYPES[ty]
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k)).astype(dt))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n)).astype(dt))
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n)).astype(dt))
    if beta == 0:
        c[...] = np.nan
    want = alpha * (a.astype(np.float64) @ b.astype(np.float64))
    if beta != 0:
        want = want + beta * c
    compilation["k"](dt(alpha), a, b, dt(beta), c, group_size=1)
    check(c, want, ty, k)


@pytest.mark.parametrize("ty", ["f32", "f64"])
@pytest.mark.parametrize("rows", [1, 2, 3, 4])
def test_remainders_of_one_to_four_rows(ty: str, rows: int, rng) -> None:
    m, n, k = 2 * LANES[ty] + rows, 37, 100  # K: 6 vectors of f32 and a remainder of 4
    assert dot_rows(compiled(gemm_text(ty, m, n, k)).tiled()) == {rows}
    for alpha, beta in [(1.0, 0.0), (1.0, 1.0), (-1.5, 0.5)]:
        run(ty, m, n, k, alpha, beta, rng)


def test_a_run_time_beta_of_zero_does_not_use_c(rng) -> None:
    """beta is an argument here: 0 at run time must still leave C's NaNs out."""
    run("f32", 49, 30, 96, 1.0, 0.0, rng)


@pytest.mark.parametrize("target", ["avx2", "generic"])
def test_narrower_targets(target: str, rng) -> None:
    """Their vectors hold 8 and 4 f32: 35 rows leave 3 and 3."""
    compilation = compiled(gemm_text("f32", 35, 24, 70), target)
    assert dot_rows(compilation.tiled()) == {3}
    run("f32", 35, 24, 70, 1.0, 1.0, rng, target)


@pytest.mark.parametrize(
    ("shape", "why"),
    [
        ((40, 30, 100), "8 rows left: a masked tile costs no more than 8 rows of dots"),
        ((49, 30, 48), "K below 64: the sums across lanes would weigh"),
        ((48, 30, 100), "no rows left"),
    ],
)
def test_where_register_tiles_keep_the_rows(shape: tuple[int, int, int], why: str) -> None:
    assert dot_rows(compiled(gemm_text("f32", *shape)).tiled()) == set(), why


def test_transposed_b_keeps_register_tiles() -> None:
    """op(B)'s columns are B's rows, not contiguous along K: no vector of them to load."""
    a, b, c = "memref<f32x49x100>", "memref<f32x30x100>", "memref<f32x49x30>"
    text = f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.t 1.0, %A, %B, 0.0, %C : f32, {a}, {b}, f32, {c}
}}"""
    assert dot_rows(compiled(text).tiled()) == set()


def test_dot_loop_is_full_width_fmas_without_spills() -> None:
    """The dot products' K loop (the only hot loop loading op(B) without broadcasts): zmm
    FMAs, one per row and column of the group, and nothing through the stack."""
    code = compiled(gemm_text("f32", 52, 30, 512), "avx512").assembly()
    dot_loops = [
        loop
        for loop in asm.hot_loops(code, "k", "vfmadd")
        if not any("{1to16}" in i or "vbroadcast" in i for i in loop.instructions)
    ]
    assert dot_loops
    for loop in dot_loops:
        fmas = [i for i in loop.instructions if i.startswith("vfmadd")]
        assert fmas and all("%zmm" in i for i in fmas)
        assert loop.stack_accesses() == []


@pytest.mark.parametrize(("alpha", "beta"), [("1.0", "0.0"), ("2.0", "1.0")])
def test_literal_alpha_and_beta(alpha: str, beta: str, rng) -> None:
    a, b, c = "memref<f32x50x100>", "memref<f32x100x30>", "memref<f32x50x30>"
    compilation = compiled(f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n {alpha}, %A, %B, {beta}, %C : f32, {a}, {b}, f32, {c}
}}""")
    assert dot_rows(compilation.tiled()) == {2}
    x = np.asfortranarray(rng.uniform(-1, 1, (50, 100)).astype(np.float32))
    y = np.asfortranarray(rng.uniform(-1, 1, (100, 30)).astype(np.float32))
    z = np.full((50, 30), np.nan if beta == "0.0" else 0.5, np.float32, order="F")
    want = float(alpha) * (x.astype(np.float64) @ y) + (0.5 if beta == "1.0" else 0.0)
    compilation["k"](x, y, z, group_size=1)
    check(z, want, "f32", 100)


@pytest.mark.parametrize("k", [1040, 1000])
def test_k_blocks_path(k: int, rng) -> None:
    """The K-blocks path packs the rows per K block and takes each block's beta; K = 1000 in
    two blocks of 500 values: lengths known at run time, not whole vectors. (K = 1024 would
    put B's columns a whole L1 way apart, and B would be packed.)"""
    m, n = 196, 256
    tiled = compiled(gemm_text("f32", m, n, k)).tiled()
    assert f"subview %A[0:{m}," in tiled and dot_rows(tiled) == {4}
    for alpha, beta in [(1.0, 0.0), (-1.5, 0.5)]:
        run("f32", m, n, k, alpha, beta, rng)
