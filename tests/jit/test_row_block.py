"""A C of 1 to 4 rows under an op(B) whose rows run along N (`gemm.?.t`, whose columns
lie ldb apart): its transpose in register tiles along N (`lowering.gemm_few_rows`,
`tile_row_block`), stored as a row-major block (`nanokernel.RowBlock`; 3 rows scattered; a
run-time M of 3 or 4 in one counted tile). Results against numpy for static and run-time
sizes, every row count (a C whose columns are not adjacent keeps the register tiles of C),
N around a vector, K short and long, alpha and beta, f32 and f64, on every target; the
tiled IR and the nanokernels' machine code; and the run-time test of a row stride in a
batch-reduce tile's epilogue."""

from __future__ import annotations

import re

import numpy as np
import pytest

from nanotc.codegen import asm
from nanotc.ir.types import MemRefType, ScalarType
from nanotc.lowering.gemm_few_rows import COUNTED_ROWS, ROW_BLOCK_ROWS
from nanotc.lowering.nanokernel import RowBlock, c_row_block

from .helpers import compiled
from .test_gemm_blocked import DTYPES, check


def gemm_text(ty: str, ta: str, shapes: tuple[str, str, str] | None = None) -> str:
    a, b, c = shapes or (f"memref<{ty}x?x?>",) * 3
    return f"""func @k(%alpha: {ty}, %A: {a}, %B: {b}, %beta: {ty}, %C: {c}) {{
  gemm.{ta}.t %alpha, %A, %B, %beta, %C : {ty}, {a}, {b}, {ty}, {c}
}}"""


def run(compilation, ty: str, ta: str, shape: tuple[int, int, int], scalars: tuple[float, float],
        rng, c_rows: int | None = None) -> None:  # fmt: skip
    """C := alpha op(A) B^T + beta C against numpy; `c_rows`: C the first M rows of a
    matrix of that many (columns c_rows apart)."""
    m, n, k = shape
    alpha, beta = scalars
    dt = DTYPES[ty]
    a = np.asfortranarray(rng.uniform(-1, 1, (k, m) if ta == "t" else (m, k)).astype(dt))
    b = np.asfortranarray(rng.uniform(-1, 1, (n, k)).astype(dt))
    whole = np.asfortranarray(rng.uniform(-1, 1, (c_rows or m, n)).astype(dt))
    c = whole[:m]
    want = alpha * ((a.T if ta == "t" else a).astype(np.float64) @ b.T) + beta * c
    below = whole[m:].copy()
    if beta == 0:
        c[...] = np.nan  # beta 0 never reads C
    compilation["k"](dt(alpha), a, b, dt(beta), c, group_size=1)
    check(c, want, ty, k)
    np.testing.assert_array_equal(whole[m:], below)  # the rows under C are not written


@pytest.mark.parametrize("ty", ["f32", "f64"])
@pytest.mark.parametrize("ta", ["n", "t"])
def test_run_time_sizes(ty: str, ta: str, rng) -> None:
    """Every row count to 5, N below, at and past a vector and the tiles' rows, K of 1 and
    more; beta 0 (C not read), 1 and other."""
    compilation = compiled(gemm_text(ty, ta))
    for m in range(1, 6):
        for n in (7, 8, 16, 17, 100):
            run(compilation, ty, ta, (m, n, 9), (1.5, 0.0), rng)
        for k in (1, 4, 300):
            run(compilation, ty, ta, (m, 70, k), (-0.5, 2.0), rng)
            run(compilation, ty, ta, (m, 33, k), (1.0, 1.0), rng)


@pytest.mark.parametrize("ta", ["n", "t"])
def test_columns_not_adjacent_keep_the_tiles_of_c(ta: str, rng) -> None:
    """A C of the first rows of a taller matrix is no block of memory: the register tiles of
    C compute it, and the rows under it stay as they were."""
    compilation = compiled(gemm_text("f32", ta))
    for m in ROW_BLOCK_ROWS:
        run(compilation, "f32", ta, (m, 40, 50), (2.0, 0.5), rng, c_rows=m + 2)


@pytest.mark.parametrize("ty", ["f32", "f64"])
@pytest.mark.parametrize(
    ("m", "n", "k"), [(1, 256, 64), (2, 40, 9), (3, 50, 20), (4, 37, 300), (4, 16, 1)]
)
def test_static_sizes(ty: str, m: int, n: int, k: int, rng) -> None:
    """A static C of 1 to 4 rows: its transpose's tiles are as wide as C is tall (3 rows
    scattered)."""
    shapes = (f"memref<{ty}x{m}x{k}>", f"memref<{ty}x{n}x{k}>", f"memref<{ty}x{m}x{n}>")
    compilation = compiled(gemm_text(ty, "n", shapes))
    assert re.search(rf"tile\.gemm\.n\.t .* tile \d+ x {m} :", compilation.tiled())
    run(compilation, ty, "n", (m, n, k), (0.5, -1.0), rng)


@pytest.mark.parametrize("target", ["avx2", "generic"])
def test_narrower_targets(target: str, rng) -> None:
    """256-bit vectors with AVX2's masked stores, and the generic target's."""
    compilation = compiled(gemm_text("f32", "n"), target)
    for m in range(1, 5):
        for n, k in ((8, 3), (31, 70), (100, 5)):
            run(compilation, "f32", "n", (m, n, k), (1.5, 0.0), rng)
            run(compilation, "f32", "n", (m, n, k), (-1.0, 0.5), rng)


def test_the_run_time_test_and_its_tiles() -> None:
    """A tile of C's transpose for 1 and 2 rows, a row-major block of that many columns (a
    column vector for one row), and a counted one of 4 columns for 3 and 4 rows, C's row
    count its count and C^T's row stride; the tiles of C remain for other sizes."""
    compilation = compiled(gemm_text("f32", "n"))
    tiled = compilation.tiled()
    assert "tile.stride %C[1]" in tiled
    widths = re.findall(r"tile\.gemm\.n\.t .* tile \d+ x (\d+) : .*strided<(\d+),1>>", tiled)
    assert sorted(widths) == [("1", "1"), ("2", "2")]
    counted = re.findall(r"tile\.gemm\.n\.t .* tile \d+ x (\d+) valid .*strided<\?,1>>", tiled)
    assert counted == [str(COUNTED_ROWS[-1])] and ROW_BLOCK_ROWS[-2:] == COUNTED_ROWS
    assert re.search(r"tile\.gemm\.n\.t %alpha, %A, %B, .* tile 32 x \d+", tiled)
    listing = "interleaved if C's row stride is 4 and the count 4, else vscatter"
    assert listing in compilation.nanokernels()


def test_block_tiles_store_whole_vectors_without_spills() -> None:
    """The 4-column tile of C^T: its K loop 16 zmm FMAs (4 vectors by 4 columns) with
    nothing through the stack, its columns interleaved by two-source permutes and stored
    as vectors, no scatter."""
    text = gemm_text("f32", "n", ("memref<f32x4x?>", "memref<f32x?x?>", "memref<f32x4x?>"))
    code = compiled(text, "avx512").assembly()
    (loop,) = [loop for loop in asm.hot_loops(code, "k") if loop.count("vfmadd") == 16]
    fmas = [i for i in loop.instructions if i.startswith("vfmadd")]
    assert all("%zmm" in i for i in fmas) and loop.stack_accesses() == []
    assert "vpermt2ps" in code and "vscatter" not in code


@pytest.mark.parametrize("ta", ["n", "t"])
def test_tiles_of_c_transposed_fit_sixteen_registers(ta: str) -> None:
    """On AVX2 a tile of C^T has as many vectors along N as fit beside its columns (a 4 x 4
    tile spilled every k step): the K loops of every row count at run-time sizes, the
    counted one included, go through no stack."""
    code = compiled(gemm_text("f32", ta), "avx2").assembly()
    loops = asm.hot_loops(code, "k")
    assert loops and all(loop.stack_accesses() == [] for loop in loops)
    assert re.search(r"tile 16 x 4 valid", compiled(gemm_text("f32", ta), "avx2").tiled())


@pytest.mark.parametrize("ldc", [4, 6])
def test_a_row_stride_tested_at_run_time(ldc: int, rng) -> None:
    """A batch-reduce loop into a row-major C of 4 columns whose row stride is known at run
    time only: its tiles store rows 4 apart as one block, others by scatter."""
    a_t, one = "memref<f32x?x?x?>", "memref<f32x?x?>"
    b_t, b_one, c_t = "memref<f32x?x4x?>", "memref<f32x?x4>", "memref<f32x?x4,strided<?,1>>"
    text = f"""func @k(%A: {a_t}, %B: {b_t}, %C: {c_t}, %n: index) {{
  for %i = 0, %n {{
    %a = subview %A[:, :, %i] : {a_t}
    %b = subview %B[:, :, %i] : {b_t}
    gemm.n.n 1.0, %a, %b, 1.0, %C : f32, {one}, {b_one}, f32, {c_t}
  }}
}}"""
    compilation = compiled(text)
    assert "vstore of the columns interleaved if C's row stride is 4" in compilation.nanokernels()
    m, k, steps = 37, 5, 3
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k, steps)).astype(np.float32))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, 4, steps)).astype(np.float32))
    whole = rng.uniform(-1, 1, (m, ldc)).astype(np.float32)  # C order: rows ldc apart
    c = whole[:, :4]
    want = c + np.einsum("mks,kns->mn", a.astype(np.float64), b)
    beside = whole[:, 4:].copy()
    compilation["k"](a, b, c, np.intp(steps), group_size=1)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(whole[:, 4:], beside)


@pytest.mark.parametrize(("n", "ldc"), [(3, 4), (4, 4), (3, 3), (2, 4)])
def test_a_counted_tile_stores_a_block_only_where_its_count_fills_it(n: int, ldc: int,
                                                                     rng) -> None:  # fmt: skip
    """A row-major C of run-time sizes and 2 to 4 columns, its C^T a C of that many rows:
    where its rows are ldc = N elements apart, one counted tile of 4 columns on C stores a
    block (N = 4) or scatters (N = 3); where they are further apart, the tiles of C^T leave
    the elements beside C as they were."""
    c_t = "memref<f32x?x?,strided<?,1>>"
    text = f"""func @k(%A: memref<f32x?x?>, %B: memref<f32x?x?>, %C: {c_t}) {{
  gemm.n.n 1.0, %A, %B, 1.0, %C : f32, memref<f32x?x?>, memref<f32x?x?>, f32, {c_t}
}}"""
    m, k = 37, 5
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k)).astype(np.float32))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n)).astype(np.float32))
    whole = rng.uniform(-1, 1, (m, ldc)).astype(np.float32)  # C order: rows ldc apart
    c = whole[:, :n]
    want = c + a.astype(np.float64) @ b
    beside = whole[:, n:].copy()
    compiled(text)["k"](a, b, c, group_size=1)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(whole[:, n:], beside)


def test_which_tiles_store_row_blocks() -> None:
    """Static row strides equal to the tile's columns, or run-time ones; not 3 columns,
    adjacent rows, apart columns, or tiles the caller excludes. A counted tile's block is
    always tested (whether the count fills it)."""
    f32 = ScalarType.F32

    def block(stride: tuple[int | None, int | None], columns: int, excluded: bool = False,
              counted: bool = False):  # fmt: skip
        return c_row_block(MemRefType(f32, (None, columns), stride), columns, excluded, counted)

    assert block((4, 1), 4, counted=True) is RowBlock.TESTED
    assert block((None, 1), 4, counted=True) is RowBlock.TESTED
    assert block((8, 1), 4, counted=True) is RowBlock.NO
    assert block((4, 1), 4) is RowBlock.YES
    assert block((2, 1), 2) is RowBlock.YES
    assert block((None, 1), 1) is RowBlock.TESTED
    assert block((None, 1), 4, excluded=True) is RowBlock.NO
    assert block((3, 1), 3) is RowBlock.NO
    assert block((None, 1), 3) is RowBlock.NO
    assert block((8, 1), 4) is RowBlock.NO
    assert block((1, None), 4) is RowBlock.NO
    assert block((None, 2), 2) is RowBlock.NO
