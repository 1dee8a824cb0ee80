"""gemms of run-time sizes whose C has 1 to 4 rows (`lowering.gemm_few_rows`): a run-time test
sends them to dot products along K (`tile.row_dots` with run-time row and column counts);
their results against numpy for every row count, column counts around the nanokernels'
widths, K over several blocks, both transposes of A, f32 and f64, alpha and beta; the gemms
the test turns away; a 1-row A whose leading dimension is 1 or more; and the machine code.
Also the static paths' reading of op(A)'s rows in place and their chained accumulators."""

from __future__ import annotations

import re

import numpy as np
import pytest

from nanotc.codegen import asm
from nanotc.codegen.llvm.row_dots import INDEPENDENT_FMAS
from nanotc.lowering.gemm_few_rows import DOT_PACK_BYTES, FEW_ROWS_COLUMNS

from .helpers import compiled
from .test_gemm_blocked import DTYPES, check


def dynamic_text(ty: str, ta: str) -> str:
    d = f"memref<{ty}x?x?>"
    return f"""func @k(%alpha: {ty}, %A: {d}, %B: {d}, %beta: {ty}, %C: {d}) {{
  gemm.{ta}.n %alpha, %A, %B, %beta, %C : {ty}, {d}, {d}, {ty}, {d}
}}"""


def run(compilation, ty: str, ta: str, shape: tuple[int, int, int], scalars: tuple[float, float],
        rng, a: np.ndarray | None = None) -> None:  # fmt: skip
    m, n, k = shape
    alpha, beta = scalars
    dt = DTYPES[ty]
    if a is None:
        a = np.asfortranarray(rng.uniform(-1, 1, (k, m) if ta == "t" else (m, k)).astype(dt))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n)).astype(dt))
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n)).astype(dt))
    want = alpha * ((a.T if ta == "t" else a).astype(np.float64) @ b) + beta * c
    if beta == 0:
        c[...] = np.nan  # beta 0 never reads C
    compilation["k"](dt(alpha), a, b, dt(beta), c, group_size=1)
    check(c, want, ty, k)


def k_blocks(ty: str) -> int:
    """A K past two blocks of the 4-row nanokernels' packed rows, with a vector remainder."""
    return 2 * DOT_PACK_BYTES // DTYPES[ty]().itemsize // 4 + 21


@pytest.mark.parametrize("ty", ["f32", "f64"])
@pytest.mark.parametrize("ta", ["t", "n"])
def test_run_time_few_rows(ty: str, ta: str, rng) -> None:
    """Every row count, columns below, at and past the nanokernels' widths, K of one and of
    several blocks; beta 0 (C not read), 1 and other."""
    compilation = compiled(dynamic_text(ty, ta))
    for m in range(1, 5):
        for n in (1, 3, 8, 9, 33):
            run(compilation, ty, ta, (m, n, 100), (1.5, 0.0), rng)
        for k in (64, 1000, k_blocks(ty)):
            run(compilation, ty, ta, (m, 5, k), (-0.5, 2.0), rng)
            run(compilation, ty, ta, (m, 2, k), (1.0, 1.0), rng)


@pytest.mark.parametrize("target", ["avx2", "generic"])
@pytest.mark.parametrize("ta", ["t", "n"])
def test_run_time_few_rows_on_narrower_targets(target: str, ta: str, rng) -> None:
    """256-bit vectors with AVX2's masked loads, and the generic target's."""
    compilation = compiled(dynamic_text("f32", ta), target)
    for m in range(1, 5):
        for n, k in ((1, 64), (9, 300), (3, k_blocks("f32"))):
            run(compilation, "f32", ta, (m, n, k), (1.5, 0.0), rng)
            run(compilation, "f32", ta, (m, n, k), (-1.0, 0.5), rng)


@pytest.mark.parametrize("ta", ["t", "n"])
def test_gemms_the_test_turns_away(ta: str, rng) -> None:
    """M past 4, and K below 64, take the register tiles: results as before."""
    compilation = compiled(dynamic_text("f32", ta))
    for shape in ((5, 7, 300), (17, 3, 200), (3, 7, 63), (1, 1, 10)):
        run(compilation, "f32", ta, shape, (2.0, 0.5), rng)


def test_the_run_time_test_and_its_nanokernels() -> None:
    """One nanokernel of one row (M = 1) and one of four rows whose rows past M repeat the
    last, each over run-time column counts; the register tiles stay for other sizes."""
    tiled = compiled(dynamic_text("f32", "t")).tiled()
    kernels = re.findall(r"tile\.row_dots\S* .* rows (\d+)( valid \S+)? cols (\d+) valid", tiled)
    assert sorted((int(r), bool(v), int(c)) for r, v, c in kernels) == [
        (1, False, FEW_ROWS_COLUMNS),
        (4, True, FEW_ROWS_COLUMNS),
    ]
    assert "tile.gemm" in tiled


def test_transposes_of_b_keep_register_tiles() -> None:
    """op(B)'s columns lie ldb apart: no dot products along K."""
    d = "memref<f32x?x?>"
    text = f"""func @k(%A: {d}, %B: {d}, %C: {d}) {{
  gemm.t.t 1.0, %A, %B, 0.0, %C : f32, {d}, {d}, f32, {d}
}}"""
    assert "tile.row_dots" not in compiled(text).tiled()


@pytest.mark.parametrize("lda", [1, 3])
def test_a_row_of_run_time_leading_dimension(lda: int, rng) -> None:
    """A 1-row A of run-time leading dimension (1, or 3: a row of a larger matrix) is packed
    before its dot products: both give A B."""
    compilation = compiled(dynamic_text("f32", "n"))
    k = 3000
    whole = np.asfortranarray(rng.uniform(-1, 1, (lda, k)).astype(np.float32))
    run(compilation, "f32", "n", (1, 6, k), (1.0, 0.0), rng, a=whole[lda - 1 : lda])


@pytest.mark.parametrize("ta", ["t", "n"])
def test_few_rows_loops_are_full_width_fmas_without_spills(ta: str) -> None:
    """The K loops of both nanokernels: 8 zmm FMAs (1 row by 2 columns in 4 chains of K, 4
    rows by 2 columns), nothing through the stack."""
    code = compiled(dynamic_text("f32", ta), "avx512").assembly()
    loops = [
        loop
        for loop in asm.hot_loops(code, "k", "vfmadd")
        if loop.count("vfmadd") == INDEPENDENT_FMAS
        and not any("{1to16}" in i or "vbroadcast" in i for i in loop.instructions)
    ]
    assert len(loops) >= 2
    for loop in loops:
        fmas = [i for i in loop.instructions if i.startswith("vfmadd")]
        assert all("%zmm" in i for i in fmas) and loop.stack_accesses() == []


def static_text(m: int, n: int, k: int) -> str:
    a, b, c = f"memref<f32x{k}x{m}>", f"memref<f32x{k}x{n}>", f"memref<f32x{m}x{n}>"
    return f"""func @k(%alpha: f32, %A: {a}, %B: {b}, %beta: f32, %C: {c}) {{
  gemm.t.n %alpha, %A, %B, %beta, %C : f32, {a}, {b}, f32, {c}
}}"""


def test_static_transposed_rows_are_read_in_place(rng) -> None:
    """op(A)'s rows are A's columns, along K: no pack, no scratch."""
    compilation = compiled(static_text(3, 40, 700))
    tiled = compilation.tiled()
    assert "tile.row_dots" in tiled and "tile.pack" not in tiled and "alloca" not in tiled
    run(compilation, "f32", "t", (3, 40, 700), (0.5, -1.0), rng)


def test_few_sums_split_k_among_chains(rng) -> None:
    """One dot product (1 x 1) sums K in eight chains, the FMAs' latency covered."""
    compilation = compiled(static_text(1, 1, 5000), "avx512")
    loops = asm.hot_loops(compilation.assembly(), "k", "vfmadd")
    assert 8 in {loop.count("vfmadd") for loop in loops}
    run(compiled(static_text(1, 1, 5000)), "f32", "t", (1, 1, 5000), (1.0, 0.0), rng)
