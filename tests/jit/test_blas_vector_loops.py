"""The vector loops of the memory-bound instructions at the sizes where their structure
changes: sum and gemv.t keep several partial sums per output (CHAINS) over an unrolled main
loop, then whole vectors, then one masked vector; gemv.t takes GEMV_COLUMNS columns at a time,
then single columns; gemv.n scales c by beta, then adds GEMV_N_COLUMNS columns of A to it
per pass, then single columns. Sizes around every one of those boundaries, on every target, against
float64 numpy with the tolerance of a reordered sum."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from llvmlite import ir

import nanotc
from nanotc.codegen import asm
from nanotc.codegen.llvm.blas import SCALAR_CHAINS
from nanotc.codegen.llvm.blas_vector import (
    CHAINS,
    FROM_MEMORY_L3_SHARE,
    GEMV_COLUMNS,
    GEMV_N_COLUMNS,
    PAST_L3_SHARE,
    SHORT_COLUMNS,
    SHORT_COLUMNS_BY_VECTORS,
)
from nanotc.codegen.llvm.helpers import compare_extent
from nanotc.ir.types import ScalarType
from nanotc.targets import Target, get

from .helpers import DTYPES as ELEMENT_DTYPES
from .helpers import TARGETS, compiled, kernel_name

# Around 1, 2, CHAINS and CHAINS / GEMV_COLUMNS times the vector lanes of every target.
LENGTHS = (0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 300)
COLUMNS = (1, 2, GEMV_COLUMNS - 1, GEMV_COLUMNS, GEMV_COLUMNS + 1, 2 * GEMV_COLUMNS + 3)
COLUMNS_N = (0, 1, GEMV_N_COLUMNS - 1, GEMV_N_COLUMNS, GEMV_N_COLUMNS + 1, 2 * GEMV_N_COLUMNS + 5)
DTYPES = {"f32": np.float32, "f64": np.float64}


def _tolerance(dtype: type, magnitude: np.ndarray, length: int) -> np.ndarray:
    return 4 * np.finfo(dtype).eps * (length + 1) * magnitude + np.finfo(dtype).tiny


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", DTYPES)
def test_sum_of_a_vector_at_every_boundary(ty: str, target: str, rng) -> None:
    v = f"memref<{ty}x?>"
    text = f"func @s(%x: {v}, %s: memref<{ty}>) {{\n  sum.n 1.5, %x, 0.0, %s : {ty}, {v}, {ty}, memref<{ty}>\n}}"
    kernel = compiled(text, target)[kernel_name(text)]
    assert max(LENGTHS) > 2 * CHAINS * 16  # the unrolled loop runs on 16-lane vectors too
    for n in LENGTHS:
        x = rng.uniform(-1, 1, n).astype(DTYPES[ty])
        out = np.full((), np.nan, DTYPES[ty])
        kernel(x, out, group_size=1)
        expected = 1.5 * x.astype(np.float64).sum()
        assert abs(out - expected) <= _tolerance(DTYPES[ty], 1.5 * np.abs(x).sum(), n), n


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", DTYPES)
def test_gemv_t_at_every_boundary(ty: str, target: str, rng) -> None:
    m, v = f"memref<{ty}x?x?>", f"memref<{ty}x?>"
    text = (
        f"func @g(%a: {m}, %x: {v}, %y: {v}, %beta: {ty}) {{\n"
        f"  gemv.t 2.0, %a, %x, %beta, %y : {ty}, {m}, {v}, {ty}, {v}\n}}"
    )
    kernel = compiled(text, target)[kernel_name(text)]
    dtype = DTYPES[ty]
    for k in LENGTHS[1::3]:
        for n in COLUMNS:
            a = np.asfortranarray(rng.uniform(-1, 1, (k, n)).astype(dtype))
            x = rng.uniform(-1, 1, k).astype(dtype)
            for beta in (0.0, 0.5):
                y = rng.uniform(-1, 1, n).astype(dtype) if beta else np.full(n, np.nan, dtype)
                expected = 2.0 * a.T.astype(np.float64) @ x + (beta * y if beta else 0)
                bound = 2.0 * np.abs(a.T) @ np.abs(x) + abs(beta * y if beta else 0)
                kernel(a, x, y, dtype(beta), group_size=1)
                assert np.all(np.abs(y - expected) <= _tolerance(dtype, bound, k)), (k, n, beta)


SHORT_OPS = {
    "gemv.t": "gemv.t 2.0, %a, %x, %beta, %y : {t}, {m}, {v}, {t}, {v}",
    "gemv.n": "gemv.n 2.0, %a, %x, %beta, %y : {t}, {m}, {v}, {t}, {v}",
    "ger": "ger 2.0, %x, %y, %beta, %a : {t}, {v}, {v}, {t}, {m}",
}


def _short_op_expected(op: str, a: np.ndarray, x: np.ndarray, y: np.ndarray,
                       beta: float) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The result of `op` in float64 (the output: y, or A for ger) and its magnitude."""
    old = (beta * (a if op == "ger" else y)) if beta else 0
    if op == "ger":
        product, size = np.outer(x, y), np.abs(np.outer(x, y))
    else:
        op_a = a.T if op == "gemv.t" else a
        product, size = op_a.astype(np.float64) @ x, np.abs(op_a) @ np.abs(x)
    return 2.0 * product + old, 2.0 * size + np.abs(old)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", DTYPES)
@pytest.mark.parametrize("op", SHORT_OPS)
def test_short_columns_back_to_back(op: str, ty: str, target: str, rng) -> None:
    """A matrix whose columns are 1 to 4 elements long (8 too for gemv.n and ger) and lie
    back to back (a leading dimension equal to the rows, known at run time only) is read and
    written as whole vectors, a vector of columns at a time: every column count around the
    lanes, beta 0 (the output not read) and not; the same columns lying apart, and other
    row counts, take the other loops. Nothing past the matrix is written."""
    m, v = f"memref<{ty}x?x?>", f"memref<{ty}x?>"
    body = SHORT_OPS[op].format(t=ty, m=m, v=v)
    text = f"func @g(%a: {m}, %x: {v}, %y: {v}, %beta: {ty}) {{\n  {body}\n}}"
    kernel = compiled(text, target)[kernel_name(text)]
    dtype, lanes = DTYPES[ty], get(target).lanes(ScalarType(ty))
    short = SHORT_COLUMNS if op == "gemv.t" else SHORT_COLUMNS_BY_VECTORS
    for rows in (*short, 5, 8):
        for n in (1, lanes - 1, lanes, lanes + 1, 3 * lanes + 2, 1000):
            for lead in (rows, rows + 3):
                whole = np.asfortranarray(rng.uniform(-1, 1, (lead, n + 1)).astype(dtype))
                a = whole[:rows, :n]
                x = rng.uniform(-1, 1, n if op == "gemv.n" else rows).astype(dtype)
                y = rng.uniform(-1, 1, rows if op == "gemv.n" else n).astype(dtype)
                for beta in (0.0, 0.5):
                    out = a if op == "ger" else y
                    expected, size = _short_op_expected(op, a, x, y, beta)
                    if not beta:
                        out[...] = np.nan
                    before = whole.copy()
                    kernel(a, x, y, dtype(beta), group_size=1)
                    ok = np.abs(out - expected) <= _tolerance(dtype, size, max(rows, n))
                    assert np.all(ok), (rows, n, lead, beta)
                    outside = np.ones(whole.shape, bool)
                    outside[:rows, :n] = op != "ger"
                    assert np.array_equal(whole[outside], before[outside])


@pytest.mark.parametrize("op", SHORT_OPS)
def test_short_columns_of_static_rows_with_run_time_leading_dimension(op: str, rng) -> None:
    """1 or 2 static rows, the leading dimension known at run time: back to back only where
    it equals the rows; a leading dimension of 3 once sent a 1-row matrix to the 3-row loop,
    which wrote 2 rows past it."""
    for rows in (1, 2):
        m, v = f"memref<f32x{rows}x?,strided<1,?>>", "memref<f32x?>"
        body = SHORT_OPS[op].format(t="f32", m=m, v=v)
        text = f"func @g(%a: {m}, %x: {v}, %y: {v}, %beta: f32) {{\n  {body}\n}}"
        kernel = compiled(text)["g"]
        for lead in (rows, 3, 4):
            n = 37
            whole = np.asfortranarray(rng.uniform(-1, 1, (lead, n)).astype(np.float32))
            a = whole[:rows]
            x = rng.uniform(-1, 1, n if op == "gemv.n" else rows).astype(np.float32)
            y = rng.uniform(-1, 1, rows if op == "gemv.n" else n).astype(np.float32)
            expected, size = _short_op_expected(op, a, x, y, 0.5)
            before = whole.copy()
            kernel(a, x, y, np.float32(0.5), group_size=1)
            out = a if op == "ger" else y
            assert np.all(np.abs(out - expected) <= _tolerance(np.float32, size, n)), (rows, lead)
            np.testing.assert_array_equal(whole[rows:], before[rows:])


def test_short_columns_loop_shuffles_rows_out_of_whole_vectors() -> None:
    """3-row columns back to back (static): the loop loads whole zmm vectors of A, gathers
    each row by permutes, and keeps everything in registers."""
    m, v = "memref<f32x3x?>", "memref<f32x?>"
    text = f"""func @g(%a: {m}, %x: {v}, %y: {v}) {{
  gemv.t 1.0, %a, %x, 0.0, %y : f32, {m}, {v}, f32, {v}
}}"""
    code = compiled(text, "avx512").assembly()
    loops = [loop for loop in asm.hot_loops(code, "g", "vfmadd") if loop.count("vperm")]
    assert loops
    for loop in loops:
        assert loop.count("vfmadd") == 2 and loop.stack_accesses() == []
        assert all("%zmm" in i for i in loop.instructions if i.startswith("vfmadd"))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", DTYPES)
def test_gemv_t_on_columns_of_a_vector(ty: str, target: str, rng) -> None:
    """Columns of at most a vector's elements, at any leading dimension, run-time or static
    rows: one vector load a column and sums across lanes folded a vector of columns at a
    time; a column longer than a vector takes the column loops. Column counts around the
    lanes, beta 0 (y not read) and not; nothing past y or A's columns is written."""
    lanes = get(target).lanes(ScalarType(ty))
    dtype, v = DTYPES[ty], f"memref<{ty}x?>"
    for rows in (3, 5, lanes - 1, lanes, lanes + 1):
        for m in (f"memref<{ty}x?x?>", f"memref<{ty}x{rows}x?,strided<1,?>>"):
            body = SHORT_OPS["gemv.t"].format(t=ty, m=m, v=v)
            text = f"func @g(%a: {m}, %x: {v}, %y: {v}, %beta: {ty}) {{\n  {body}\n}}"
            kernel = compiled(text, target)["g"]
            for n in (1, lanes - 1, lanes + 1, 3 * lanes + 2):
                for lead in (rows, rows + 5):
                    whole = np.asfortranarray(rng.uniform(-1, 1, (lead, n)).astype(dtype))
                    a = whole[:rows]
                    x = rng.uniform(-1, 1, rows).astype(dtype)
                    y_whole = rng.uniform(-1, 1, n + 3).astype(dtype)
                    y = y_whole[:n]
                    for beta in (0.0, 0.5):
                        expected, size = _short_op_expected("gemv.t", a, x, y, beta)
                        if not beta:
                            y[...] = np.nan
                        before, y_before = whole.copy(), y_whole.copy()
                        kernel(a, x, y, dtype(beta), group_size=1)
                        ok = np.abs(y - expected) <= _tolerance(dtype, size, rows)
                        assert np.all(ok), (rows, m, n, lead, beta)
                        np.testing.assert_array_equal(whole, before)
                        np.testing.assert_array_equal(y_whole[n:], y_before[n:])


def test_gemv_t_columns_of_a_vector_fold_in_registers() -> None:
    """8-row columns 11 apart: the loop multiplies 16 zmm vectors of columns by x and folds
    their sums with permutes, all in registers."""
    m, v = "memref<f32x8x?,strided<1,11>>", "memref<f32x?>"
    text = f"""func @g(%a: {m}, %x: {v}, %y: {v}) {{
  gemv.t 1.0, %a, %x, 0.0, %y : f32, {m}, {v}, f32, {v}
}}"""
    code = compiled(text, "avx512").assembly()
    (loop,) = [loop for loop in asm.hot_loops(code, "g", "vmulps") if loop.count("vmulps") == 16]
    assert loop.count("vperm") + loop.count("vshuf") + loop.count("vunpck") >= 8
    assert loop.stack_accesses() == []
    assert all("%zmm" in i for i in loop.instructions if i.startswith("vmulps"))


def _gemv_n(ty: str, target: str, x_stride: str = "") -> nanotc.api.Compilation:
    m, v = f"memref<{ty}x?x?>", f"memref<{ty}x?>"
    xv = f"memref<{ty}x?,strided<?>>" if x_stride else v
    text = (
        f"func @g(%a: {m}, %x: {xv}, %y: {v}, %beta: {ty}) {{\n"
        f"  gemv.n 2.0, %a, %x, %beta, %y : {ty}, {m}, {xv}, {ty}, {v}\n}}"
    )
    return compiled(text, target)["g"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", DTYPES)
def test_gemv_n_at_every_boundary(ty: str, target: str, rng) -> None:
    """Rows around the vector lanes, columns around GEMV_N_COLUMNS (none at all too: c is
    then beta c), beta 0 (c is NaN and must not be read), 1 and other, x strided or not."""
    dtype = DTYPES[ty]
    for strided in (False, True):
        kernel = _gemv_n(ty, target, "strided" if strided else "")
        for m in LENGTHS[1::4]:
            for n in COLUMNS_N:
                a = np.asfortranarray(rng.uniform(-1, 1, (m, n)).astype(dtype))
                x = rng.uniform(-1, 1, 3 * n).astype(dtype)[:: 3 if strided else 1][:n]
                for beta in (0.0, 1.0, -0.5):
                    y = rng.uniform(-1, 1, m).astype(dtype) if beta else np.full(m, np.nan, dtype)
                    before = y.astype(np.float64) if beta else np.zeros(m)
                    expected = 2.0 * a.astype(np.float64) @ x + beta * before
                    bound = 2.0 * np.abs(a) @ np.abs(x) + abs(beta * before)
                    kernel(a, x, y, dtype(beta), group_size=1)
                    assert np.all(np.abs(y - expected) <= _tolerance(dtype, bound, n)), (m, n)


def _stores(loop: asm.Loop) -> list[str]:
    """The loop's moves to memory (AT&T: the destination, a memory operand, comes last)."""
    moves = [i for i in loop.instructions if i.split()[0].startswith(("mov", "vmov"))]
    return [i for i in moves if i.split("{")[0].rstrip().endswith(")")]


@pytest.mark.parametrize("ty", DTYPES)
@pytest.mark.parametrize("op", ["gemv.n", "sum.n"])
def test_c_of_one_vector_of_rows_sums_the_columns_in_registers(op: str, ty: str, rng) -> None:
    """Static rows of at most one vector: the columns' sum in GEMV_N_COLUMNS accumulators,
    c read and written once after the column loop (which stores nothing). (Run-time row
    counts: `test_gemv_n_at_every_boundary`.)"""
    lanes = get("host").lanes(ScalarType(ty))
    dtype = DTYPES[ty]
    for m, n in ((1, 2000), (3, 37), (lanes, 2 * GEMV_N_COLUMNS + 5), (lanes - 1, 1)):
        a_t, v_t, x_t = f"memref<{ty}x{m}x{n}>", f"memref<{ty}x{m}>", f"memref<{ty}x{n}>"
        if op == "gemv.n":
            params, body = (
                f"%a: {a_t}, %x: {x_t}, %y: {v_t}",
                f"gemv.n 2.0, %a, %x, 0.5, %y : {ty}, {a_t}, {x_t}, {ty}, {v_t}",
            )
        else:
            params, body = (
                f"%a: {a_t}, %y: {v_t}",
                f"sum.n 2.0, %a, 0.5, %y : {ty}, {a_t}, {ty}, {v_t}",
            )
        compilation = compiled(f"func @g({params}) {{\n  {body}\n}}", "host")
        if op == "gemv.n" and n > 2 * GEMV_N_COLUMNS:  # a column loop, innermost
            loops = asm.hot_loops(compilation.assembly(), "g", "vfmadd")
            inner = [x for x in loops if not any(x.contains(y) for y in loops)]
            assert inner and not any(_stores(loop) for loop in inner), m
        a = np.asfortranarray(rng.uniform(-1, 1, (m, n)).astype(dtype))
        x = rng.uniform(-1, 1, n).astype(dtype)
        y = rng.uniform(-1, 1, m).astype(dtype)
        product = a.astype(np.float64) @ (x if op == "gemv.n" else np.ones(n))
        expected = 2.0 * product + 0.5 * y
        compilation["g"](*((a, x, y) if op == "gemv.n" else (a, y)), group_size=1)
        bound = 2.0 * np.abs(a) @ (np.abs(x) if op == "gemv.n" else np.ones(n)) + abs(0.5 * y)
        assert np.all(np.abs(y - expected) <= _tolerance(dtype, bound, n)), (m, n)


@pytest.mark.parametrize("ty", DTYPES)
def test_ger_on_c_of_one_vector_of_rows(ty: str, rng) -> None:
    """Static rows of at most one vector: x loaded once, one masked update per column (run-time
    counts, and rows past C's left untouched: `test_ger_at_every_boundary`)."""
    lanes = get("host").lanes(ScalarType(ty))
    dtype = DTYPES[ty]
    for m, n in ((1, 2000), (3, 37), (lanes, 9)):
        v, x_t, c_t = f"memref<{ty}x{n}>", f"memref<{ty}x{m}>", f"memref<{ty}x{m}x{n}>"
        text = f"func @g(%x: {x_t}, %y: {v}, %c: {c_t}) {{\n  ger 2.0, %x, %y, 0.5, %c : {ty}, {x_t}, {v}, {ty}, {c_t}\n}}"
        compilation = compiled(text, "host")
        x, y = rng.uniform(-1, 1, m).astype(dtype), rng.uniform(-1, 1, n).astype(dtype)
        c = np.asfortranarray(rng.uniform(-1, 1, (m, n)).astype(dtype))
        expected = 2.0 * np.outer(x, y) + 0.5 * c.astype(np.float64)
        compilation["g"](x, y, c, group_size=1)
        bound = 2.0 * np.abs(np.outer(x, y)) + abs(0.5 * c)
        assert np.all(np.abs(c - expected) <= _tolerance(dtype, bound, 1)), (m, n)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("alpha", [np.nan, np.inf])
def test_gemv_n_without_columns_still_multiplies_by_alpha(alpha: float, target: str) -> None:
    """alpha (A x) with A x = 0: NaN for an alpha of NaN or infinity, as the reference has it,
    although no column pass runs."""
    m, v = "memref<f32x?x?>", "memref<f32x?>"
    text = (
        f"func @g(%alpha: f32, %a: {m}, %x: {v}, %y: {v}, %beta: f32) {{\n"
        f"  gemv.n %alpha, %a, %x, %beta, %y : f32, {m}, {v}, f32, {v}\n}}"
    )
    kernel = compiled(text, target)["g"]
    for beta in (0.0, 1.0):
        y = np.ones(5, np.float32)
        kernel(np.float32(alpha), np.zeros((5, 0), np.float32, order="F"),
               np.zeros(0, np.float32), y, np.float32(beta), group_size=1)  # fmt: skip
        assert np.isnan(y).all()
        y.fill(3.0)
        kernel(np.float32(2.0), np.zeros((5, 0), np.float32, order="F"),
               np.zeros(0, np.float32), y, np.float32(beta), group_size=1)  # fmt: skip
        assert (y == 3 * beta).all()


def test_gemv_n_streams_columns_or_rows_where_they_are_contiguous() -> None:
    """gemv.n stays a gemv when A's columns are contiguous (axpys down them) or its rows
    (gemv.t's dot products along them); when neither are, or A is static and fits L1 with
    contiguous columns, it runs as a gemm on the nanokernels."""

    def tiled(a: str) -> str:
        v = "memref<f32x?>"
        text = f"func @g(%a: {a}, %x: {v}, %y: {v}) {{\n  gemv.n 1.0, %a, %x, 0.0, %y : f32, {a}, {v}, f32, {v}\n}}"
        return nanotc.compile(text, target="avx512").tiled()

    for a in ["memref<f32x?x?>", "memref<f32x?x?,strided<?,1>>", "memref<f32x56x9,strided<?,1>>"]:
        assert "gemv.n" in tiled(a) and "tile.gemm" not in tiled(a), a
    for a in ["memref<f32x?x?,strided<?,?>>", "memref<f32x56x9>"]:  # (the latter: c stays in
        assert "gemv.n" not in tiled(a) and "tile.gemm" in tiled(a), a  # registers for all K)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", DTYPES)
def test_gemv_n_on_rows_at_every_boundary(ty: str, target: str, rng) -> None:
    """gemv.n on a row-major A as dot products along its rows: rows around GEMV_COLUMNS, K
    around the vector lanes and CHAINS (none at all too: c is then beta c, and alpha 0 * NaN
    stays NaN), beta 0 (c NaN, never read) and other."""
    m, v = f"memref<{ty}x?x?,strided<?,1>>", f"memref<{ty}x?>"
    text = (
        f"func @g(%alpha: {ty}, %a: {m}, %x: {v}, %y: {v}, %beta: {ty}) {{\n"
        f"  gemv.n %alpha, %a, %x, %beta, %y : {ty}, {m}, {v}, {ty}, {v}\n}}"
    )
    kernel = compiled(text, target)["g"]
    dtype = DTYPES[ty]
    for k in (0, *LENGTHS[1::3]):
        for rows in COLUMNS:
            a = rng.uniform(-1, 1, (rows, k)).astype(dtype)  # C order: rows contiguous
            x = rng.uniform(-1, 1, k).astype(dtype)
            for alpha, beta in [(2.0, 0.0), (2.0, 0.5), (np.nan, 1.0)]:
                y = rng.uniform(-1, 1, rows).astype(dtype) if beta else np.full(rows, np.nan, dtype)
                before = y.astype(np.float64) if beta else np.zeros(rows)
                expected = alpha * (a.astype(np.float64) @ x) + beta * before
                kernel(dtype(alpha), a, x, y, dtype(beta), group_size=1)
                if np.isnan(alpha):
                    assert np.isnan(y).all(), (k, rows)
                    continue
                bound = 2.0 * np.abs(a) @ np.abs(x) + abs(beta * before)
                assert np.all(np.abs(y - expected) <= _tolerance(dtype, bound, k)), (k, rows, beta)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", DTYPES)
def test_ger_at_every_boundary(ty: str, target: str, rng) -> None:
    """ger as scaled copies of x down C's columns: rows around the vector lanes, no column at
    all too, beta 0 (C is NaN and must not be read), 1 and other, C a block of a larger
    matrix (its columns apart) and y strided."""
    dtype = DTYPES[ty]
    v, m_t = f"memref<{ty}x?>", f"memref<{ty}x?x?,strided<1,?>>"
    text = (f"func @g(%x: {v}, %y: memref<{ty}x?,strided<?>>, %c: {m_t}, %beta: {ty}) {{\n"
            f"  ger 2.0, %x, %y, %beta, %c : {ty}, {v}, memref<{ty}x?,strided<?>>, {ty}, {m_t}\n}}")  # fmt: skip
    compilation = compiled(text, target)
    assert "tile.gemm" not in compilation.tiled()
    for m in LENGTHS[1::4]:
        for n in (0, 1, 5):
            x = rng.uniform(-1, 1, m).astype(dtype)
            y = rng.uniform(-1, 1, 2 * n).astype(dtype)[::2]
            for beta in (0.0, 1.0, -0.5):
                big = np.asfortranarray(rng.uniform(-1, 1, (m + 3, n)).astype(dtype))
                c = big[1 : m + 1]
                if not beta:
                    c[...] = np.nan
                outside = big[[0, m + 1, m + 2]].copy()
                before = c.astype(np.float64) if beta else np.zeros((m, n))
                expected = 2.0 * np.outer(x, y) + beta * before
                compilation["g"](x, y, c, dtype(beta), group_size=1)
                bound = 2.0 * np.abs(np.outer(x, y)) + abs(beta * before)
                assert np.all(np.abs(c - expected) <= _tolerance(dtype, bound, 1)), (m, n)
                np.testing.assert_array_equal(big[[0, m + 1, m + 2]], outside)


def test_ger_streams_columns_unless_small_or_reduced() -> None:
    """A ger whose C does not fit L1 runs as one pass down each column of C; a small static
    one, and one that ends a batch-reduce loop (a rank-k update), run on the nanokernels."""

    def tiled(c: str, loop: bool = False) -> str:
        v = "memref<f32x?>"
        ger = f"ger 1.0, %x, %y, 1.0, %c : f32, {v}, {v}, f32, {c}"
        body = f"for %r = 0, %n {{\n    {ger}\n  }}" if loop else ger
        text = f"func @g(%x: {v}, %y: {v}, %c: {c}, %n: index) {{\n  {body}\n}}"
        return nanotc.compile(text, target="avx512").tiled()

    streamed = tiled("memref<f32x?x?>")
    assert "ger " in streamed and "tile.gemm" not in streamed
    small = tiled("memref<f32x32x32>")
    assert "ger " not in small and "tile.gemm" in small
    reduced = tiled("memref<f32x?x?>", loop=True)
    assert "ger " not in reduced and "tile.batch_gemm" in reduced


def _placed(values: np.ndarray, offset_bytes: int) -> np.ndarray:
    """A copy of a vector or column-major matrix whose data starts `offset_bytes` past a
    64-byte line (not a multiple of the element size when odd: an unaligned array)."""
    raw = np.zeros(values.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset_bytes
    placed = raw[start : start + values.nbytes].view(values.dtype)
    placed = placed.reshape(values.shape, order="F")
    placed[...] = values
    return placed


ELEMENTWISE = {
    "axpby": ("%a, %y", "axpby.n 2.0, %a, 0.5, %y : {t}, {v}, {t}, {v}"),
    "hadamard": ("%a, %x, %y", "hadamard 2.0, %a, %x, 0.5, %y : {t}, {v}, {v}, {t}, {v}"),
    "gemv.n": ("%a, %x, %y", "gemv.n 2.0, %a, %x, 0.5, %y : {t}, {m}, {v}, {t}, {v}"),
    "ger": ("%x, %y, %a", "ger 2.0, %x, %y, 0.5, %a : {t}, {v}, {v}, {t}, {m}"),
}


@pytest.mark.parametrize("target", ("host", "avx2"))
@pytest.mark.parametrize("ty", ("f32", "f64", "bf16"))
@pytest.mark.parametrize("op", ELEMENTWISE)
def test_elementwise_loops_give_the_same_bits_wherever_operands_lie(
    op: str, ty: str, target: str, rng
) -> None:
    """axpby, hadamard, gemv.n and ger peel the elements before their stream's first vector
    boundary: at every element offset in a cache line, and at an odd byte offset (no
    peel), the result is that of the operands at a line boundary, and matches numpy."""
    args, instruction = ELEMENTWISE[op]
    v, m = f"memref<{ty}x?>", f"memref<{ty}x?x?>"
    names = args.replace("%", "").split(", ")
    matrix = op in ("gemv.n", "ger")
    output = "a" if op == "ger" else "y"
    types = {"a": m if matrix else v, "x": v, "y": v}
    params = ", ".join(f"%{n}: {types[n]}" for n in names)
    text = f"func @k({params}) {{\n  {instruction.format(t=ty, v=v, m=m)}\n}}"
    kernel = compiled(text, target)["k"]
    dtype = ELEMENT_DTYPES[ty]
    size = np.dtype(dtype).itemsize
    for rows in (5, 67, 300):
        shapes = {"a": (rows, 9) if matrix else (rows,), "x": (rows,), "y": (rows,)}
        if op == "gemv.n":
            shapes["x"] = (9,)
        elif op == "ger":
            shapes["y"] = (9,)
        values = {n: rng.uniform(-1, 1, shapes[n]).astype(dtype) for n in names}
        offsets = [*range(0, 64, size), 1]
        results = []
        for offset in offsets:
            placed = {n: _placed(values[n], offset) for n in names}
            kernel(*placed.values(), group_size=1)
            results.append(placed[output].copy())
        for offset, result in zip(offsets, results):
            np.testing.assert_array_equal(result, results[0], err_msg=f"{rows} rows at +{offset}")
        wide = {n: values[n].astype(np.float64) for n in names}
        if op == "axpby":
            expected = 2.0 * wide["a"] + 0.5 * wide["y"]
        elif op == "hadamard":
            expected = 2.0 * wide["a"] * wide["x"] + 0.5 * wide["y"]
        elif op == "ger":
            expected = 2.0 * np.outer(wide["x"], wide["y"]) + 0.5 * wide["a"]
        else:
            expected = 2.0 * wide["a"] @ wide["x"] + 0.5 * wide["y"]
        tolerance = 1e-2 if ty == "bf16" else 1e-5
        actual = results[0].astype(np.float64)
        np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance)


# Element-wise instructions whose output %y is not read (beta 0): (arguments and their
# shapes, the instruction, its result in float64, the operands it streams: ger reads x from
# cache, the in-place scaling reads and writes one), on targets whose L3 is small enough that
# a few thousand elements pass PAST_L3_SHARE of it.
WRITE_ONLY = {
    "copy": ({"a": "v", "y": "v"}, "axpby.n 1.0, %a, 0.0, %y : {t}, {v}, {t}, {v}",
             lambda a, y: a, 2),
    "scaled columns": ({"a": "m", "y": "m"}, "axpby.n 2.0, %a, 0.0, %y : {t}, {m}, {t}, {m}",
                       lambda a, y: 2.0 * a, 2),
    "in place": ({"y": "v"}, "axpby.n 2.0, %y, 0.0, %y : {t}, {v}, {t}, {v}",
                 lambda y: 2.0 * y, 2),
    "hadamard": ({"a": "v", "x": "v", "y": "v"},
                 "hadamard 2.0, %a, %x, 0.0, %y : {t}, {v}, {v}, {t}, {v}",
                 lambda a, x, y: 2.0 * a * x, 3),
    "ger": ({"a": "v", "x": "c", "y": "m"}, "ger 2.0, %a, %x, 0.0, %y : {t}, {v}, {v}, {t}, {m}",
            lambda a, x, y: 2.0 * np.outer(a, x), 1),
}  # fmt: skip
SMALL_L3 = 64 * 1024
COLUMNS_WRITTEN = 7


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", ("f32", "f64", "bf16"))
@pytest.mark.parametrize("op", WRITE_ONLY)
def test_outputs_past_l3_are_written_around_the_caches(op: str, ty: str, target: str, rng
                                                       ) -> None:  # fmt: skip
    """Past PAST_L3_SHARE of L3, a beta-0 output's full vectors are stored
    non-temporally (aligned by the lead, then a store fence); below it, and at an odd byte
    offset (no lead), plainly. Every offset and size gives the same bits, and numpy's."""
    shapes, instruction, expect, streams = WRITE_ONLY[op]
    v, m = f"memref<{ty}x?>", f"memref<{ty}x?x?>"
    types = {"v": v, "c": v, "m": m}
    params = ", ".join(f"%{n}: {types[kind]}" for n, kind in shapes.items())
    text = f"func @k({params}) {{\n  {instruction.format(t=ty, v=v, m=m)}\n}}"
    compilation = nanotc.compile(text, target=replace(get(target), l3_bytes=SMALL_L3), cache=False)
    assert "!nontemporal" in compilation.optimized_ir()
    kernel = compilation["k"]
    dtype = ELEMENT_DTYPES[ty]
    size = np.dtype(dtype).itemsize
    threshold = int(SMALL_L3 * PAST_L3_SHARE / (size * streams))
    columns = COLUMNS_WRITTEN if shapes["y"] == "m" else 1
    for elements in (threshold - 3 * 64, threshold + 3 * 64 + 5):
        rows = elements // columns
        full = {"v": (rows,), "c": (columns,), "m": (rows, columns)}
        values = {n: rng.uniform(-1, 1, full[kind]).astype(dtype) for n, kind in shapes.items()}
        offsets = [*range(0, 64, size), 1]
        results = []
        for offset in offsets:
            placed = {n: _placed(values[n], offset) for n in shapes}
            kernel(*placed.values(), group_size=1)
            results.append(placed["y"].copy())
        for offset, result in zip(offsets, results):
            np.testing.assert_array_equal(result, results[0], err_msg=f"{rows} rows at +{offset}")
        expected = expect(**{n: x.astype(np.float64) for n, x in values.items()})
        tolerance = 1e-2 if ty == "bf16" else 1e-6
        actual = results[0].astype(np.float64)
        np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance)


REDUCTIONS = {
    "sum": ("%a, %y", "{v}", "{s}", "sum.n 2.0, %a, 0.5, %y : {t}, {v}, {t}, {s}"),
    "column sums": ("%a, %y", "{m}", "{v}", "sum.t 2.0, %a, 0.5, %y : {t}, {m}, {t}, {v}"),
    "gemv.t": ("%a, %x, %y", "{m}", "{v}", "gemv.t 2.0, %a, %x, 0.5, %y : {t}, {m}, {v}, {t}, {v}"),
}
# (A's offset, x's offset) in bytes past a line: apart, together, and odd (an unaligned array)
REDUCTION_OFFSETS = ((0, 0), (4, 0), (0, 8), (16, 36), (60, 4), (32, 32), (1, 0), (8, 1))


@pytest.mark.parametrize("target", ("host", "avx2"))
@pytest.mark.parametrize("ty", ("f32", "f64"))
@pytest.mark.parametrize("op", REDUCTIONS)
def test_reductions_give_the_same_bits_wherever_operands_lie(
    op: str, ty: str, target: str, rng
) -> None:
    """sum, column sums and gemv.t give the bits of the same data on a boundary wherever it
    lies: with split loads, and where a sum's stream is long enough to be realigned (4500
    rows: `realign`, aligned loads and a lane permute on AVX-512); columns of every
    alignment (67 rows)."""
    args, a_type, y_type, instruction = REDUCTIONS[op]
    v, m, s = f"memref<{ty}x?>", f"memref<{ty}x?x?>", f"memref<{ty}>"
    types = {"a": a_type.format(v=v, m=m), "x": v, "y": y_type.format(v=v, s=s)}
    names = args.replace("%", "").split(", ")
    params = ", ".join(f"%{n}: {types[n]}" for n in names)
    text = f"func @k({params}) {{\n  {instruction.format(t=ty, v=v, m=m, s=s)}\n}}"
    kernel = compiled(text, target)["k"]
    dtype = DTYPES[ty]
    for rows in (5, 67, 160, 300, 1000, 4500):
        matrix = op != "sum"
        columns = 6 if matrix else 1
        values = {
            "a": rng.uniform(-1, 1, (rows, columns) if matrix else rows).astype(dtype),
            "x": rng.uniform(-1, 1, rows).astype(dtype),
            "y": rng.uniform(-1, 1, columns if matrix else ()).astype(dtype),
        }
        results = []
        for a_offset, x_offset in REDUCTION_OFFSETS:
            placed = {
                "a": _placed(values["a"], a_offset),
                "x": _placed(values["x"], x_offset),
                "y": values["y"].copy(),
            }
            kernel(*(placed[n] for n in names), group_size=1)
            results.append(placed["y"])
        for offsets, result in zip(REDUCTION_OFFSETS, results):
            np.testing.assert_array_equal(result, results[0], err_msg=f"{rows} rows at {offsets}")
        a = values["a"].astype(np.float64)
        if op == "gemv.t":
            total = a.T @ values["x"].astype(np.float64)
        else:
            total = a.sum(axis=0)
        expected = 2.0 * total + 0.5 * values["y"].astype(np.float64)
        np.testing.assert_allclose(results[0], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ("host", "avx2"))
def test_elementwise_instructions_may_read_what_they_write(target: str, rng) -> None:
    """docs/language.md: axpby.n and hadamard may take their output as an input, element
    for element (every length around the vector and unrolled-loop boundaries)."""
    v = "memref<f32x?>"
    text = f"""func @axpby(%y: {v}) {{
  axpby.n 2.0, %y, 3.0, %y : f32, {v}, f32, {v}
}}
func @hadamard(%x: {v}, %y: {v}) {{
  hadamard 2.0, %y, %x, 0.5, %y : f32, {v}, {v}, f32, {v}
}}"""
    kernels = compiled(text, target)
    for n in LENGTHS:
        x, y = (rng.uniform(-1, 1, n).astype(np.float32) for _ in range(2))
        want_axpby, want_hadamard = 5.0 * y, 2.0 * y * x + 0.5 * y
        scaled, product = y.copy(), y.copy()
        kernels["axpby"](scaled, group_size=1)
        kernels["hadamard"](x, product, group_size=1)
        np.testing.assert_allclose(scaled, want_axpby, rtol=1e-6, err_msg=f"axpby, {n}")
        np.testing.assert_allclose(product, want_hadamard, rtol=1e-6, atol=1e-7,
                                   err_msg=f"hadamard, {n}")  # fmt: skip


# Instructions whose loops narrow their vectors for operands from memory: (arguments and
# their kinds, the instruction, its result in float64 from the operands and the old output,
# the vectors of elements it streams).
FROM_MEMORY = {
    "hadamard": ({"a": "v", "x": "v", "y": "v"},
                 "hadamard 2.0, %a, %x, 1.0, %y : {t}, {v}, {v}, {t}, {v}",
                 lambda a, x, y: 2.0 * a * x + y, 3),
    "axpby": ({"a": "v", "y": "v"}, "axpby.n 2.0, %a, 0.5, %y : {t}, {v}, {t}, {v}",
              lambda a, y: 2.0 * a + 0.5 * y, 2),
    "copy": ({"a": "v", "y": "v"}, "axpby.n 1.0, %a, 0.0, %y : {t}, {v}, {t}, {v}",
             lambda a, y: a, 2),
    "ger": ({"a": "v", "x": "c", "y": "m"}, "ger 2.0, %a, %x, 1.0, %y : {t}, {v}, {v}, {t}, {m}",
            lambda a, x, y: 2.0 * np.outer(a, x) + y, 1),
    "sum": ({"a": "v", "y": "s"}, "sum.n 2.0, %a, 0.5, %y : {t}, {v}, {t}, {s}",
            lambda a, y: 2.0 * a.sum() + 0.5 * y, 1),
    "column sums": ({"a": "m", "y": "c"}, "sum.t 2.0, %a, 0.5, %y : {t}, {m}, {t}, {v}",
                    lambda a, y: 2.0 * a.sum(axis=0) + 0.5 * y, 1),
}  # fmt: skip


def _streaming(target: str, narrow: bool) -> Target:
    """`target` with a small L3, streaming memory in vectors of half its width or its own."""
    t = get(target)
    return replace(t, l3_bytes=SMALL_L3, stream_vector_bits=t.vector_bits // 2 if narrow else 0)


@pytest.mark.parametrize("target", ("host", "avx2"))
@pytest.mark.parametrize("ty", ("f32", "f64", "bf16"))
@pytest.mark.parametrize("op", FROM_MEMORY)
def test_operands_from_memory_stream_in_narrower_vectors(op: str, ty: str, target: str, rng
                                                         ) -> None:  # fmt: skip
    """Past FROM_MEMORY_L3_SHARE of L3 the main loop reads and writes vectors of the
    target's streaming width (half its registers here), decided at run time; below it full
    ones. Element for element the same bits as full vectors everywhere; sums those bits below
    it, and the same bits wherever their operand lies; numpy's result."""
    shapes, instruction, expect, streams = FROM_MEMORY[op]
    v, m, s = f"memref<{ty}x?>", f"memref<{ty}x?x?>", f"memref<{ty}>"
    types = {"v": v, "c": v, "m": m, "s": s}
    params = ", ".join(f"%{n}: {types[kind]}" for n, kind in shapes.items())
    text = f"func @k({params}) {{\n  {instruction.format(t=ty, v=v, m=m, s=s)}\n}}"
    narrow = nanotc.compile(text, target=_streaming(target, True), cache=False)
    full = nanotc.compile(text, target=_streaming(target, False), cache=False)
    lanes = get(target).lanes(ScalarType.F64 if ty == "f64" else ScalarType.F32)
    element = "double" if ty == "f64" else "float"
    assert f"<{lanes // 2} x {element}>" in narrow.llvm_ir
    assert f"<{lanes // 2} x {element}>" not in full.llvm_ir
    dtype = ELEMENT_DTYPES[ty]
    size = np.dtype(dtype).itemsize
    threshold = int(SMALL_L3 * FROM_MEMORY_L3_SHARE / (size * streams))
    columns = COLUMNS_WRITTEN if "m" in shapes.values() else 1
    for elements in (threshold - 3 * 64, threshold + 3 * 64 + 5):
        rows = elements // columns
        dims = {"v": (rows,), "c": (columns,), "m": (rows, columns), "s": ()}
        values = {n: rng.uniform(-1, 1, dims[kind]).astype(dtype) for n, kind in shapes.items()}
        results = []
        for compilation, offset in ((narrow, 0), (narrow, 4), (narrow, 16), (full, 4)):
            placed = {n: _placed(values[n], offset) for n in shapes}
            compilation["k"](*placed.values(), group_size=1)
            results.append(placed["y"].copy())
        # the full vectors' partial sums round otherwise where the narrow ones run
        compared = results if "sum" not in op or elements < threshold else results[:3]
        for result in compared:
            np.testing.assert_array_equal(result, results[0], err_msg=f"{rows} rows")
        expected = expect(**{n: x.astype(np.float64) for n, x in values.items()})
        tolerance = 1e-2 if ty == "bf16" else 1e-4
        actual = np.asarray(results[0], dtype=np.float64)
        np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance)


# instruction on row-major operands (R: `strided<?,1>`) -> its parameters and numpy's result
ROW_MAJOR_CASES = {
    "axpby.n R into R": ("axpby.n", "%a: R, %c: R", lambda a, c: 2 * a + 0.5 * c),
    "axpby.t R into C": ("axpby.t", "%a: R, %c: C", lambda a, c: 2 * a.T + 0.5 * c),
    "axpby.t C into R": ("axpby.t", "%a: C, %c: R", lambda a, c: 2 * a.T + 0.5 * c),
    "axpby.t C into C": ("axpby.t", "%a: C, %c: C", lambda a, c: 2 * a.T + 0.5 * c),
    "axpby.t R into R": ("axpby.t", "%a: R, %c: R", lambda a, c: 2 * a.T + 0.5 * c),
    "axpby.n R into C": ("axpby.n", "%a: R, %c: C", lambda a, c: 2 * a + 0.5 * c),
    "axpby.n C into R": ("axpby.n", "%a: C, %c: R", lambda a, c: 2 * a + 0.5 * c),
    "sum.n R": ("sum.n", "%a: R, %c: V", lambda a, c: 2 * a.sum(1) + 0.5 * c),
    "sum.t R": ("sum.t", "%a: R, %c: V", lambda a, c: 2 * a.sum(0) + 0.5 * c),
    "gemv.t R": ("gemv.t", "%a: R, %x: V, %c: V", lambda a, x, c: 2 * a.T @ x + 0.5 * c),
    "ger R": ("ger", "%a: V, %x: V, %c: R", lambda a, x, c: 2 * np.outer(a, x) + 0.5 * c),
}


def _row_major_text(case: str, ty: str) -> str:
    inst, params, _ = ROW_MAJOR_CASES[case]
    types = {
        "R": f"memref<{ty}x?x?,strided<?,1>>",
        "C": f"memref<{ty}x?x?>",
        "V": f"memref<{ty}x?>",
    }
    named = [p.split(": ") for p in params.split(", ")]
    signature = ", ".join(f"{name}: {types[kind]}" for name, kind in named)
    names = [name for name, _ in named]
    operands = ", ".join(types[kind] for _, kind in named)
    inputs, output = operands.rsplit(", ", 1)
    return (f"func @k({signature}) {{\n  {inst} 2.0, {', '.join(names[:-1])}, 0.5, {names[-1]} : "
            f"{ty}, {inputs}, {ty}, {output}\n}}")  # fmt: skip


def _row_major_arguments(case: str, dtype: type, m: int, n: int, rng) -> list[np.ndarray]:
    """The case's arrays for an m x n row-major operand (its input, or C of a ger)."""
    _, params, _ = ROW_MAJOR_CASES[case]
    kinds = [p.split(": ")[1] for p in params.split(", ")]
    shapes = {
        "axpby.n": [(m, n), (m, n)],
        "axpby.t": [(m, n), (n, m)],
        "sum.n": [(m, n), (m,)],
        "sum.t": [(m, n), (n,)],
        "gemv.t": [(m, n), (m,), (n,)],
        "ger": [(m,), (n,), (m, n)],
    }[case.split(" ")[0]]
    arrays = []
    for kind, shape in zip(kinds, shapes):
        values = rng.uniform(-1, 1, shape).astype(dtype)
        arrays.append(np.ascontiguousarray(values) if kind == "R" else np.asfortranarray(values))
    return arrays


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", DTYPES)
@pytest.mark.parametrize("case", list(ROW_MAJOR_CASES))
def test_row_major_operands_run_as_vector_loops_on_their_transposed_views(
    case: str, ty: str, target: str, rng
) -> None:
    """A row-major matrix (`strided<?,1>`) is the transpose of a column-major one: axpby,
    sum, gemv.t and ger run their vector loops on the transposed views (axpby.t from a
    row-major A into a column-major B read A's rows as columns and was wrong; the others ran
    element by element, ger as a gemm scattering C: 0.01-0.06x numpy at 1024^2). An axpby
    between a column-major and a row-major matrix transposes blocks in registers
    (`blas_vector.transposed_axpby`), whole blocks and the rows and columns past them."""
    compilation = compiled(_row_major_text(case, ty), target)
    assert f"x {'float' if ty == 'f32' else 'double'}>" in compilation.llvm_ir  # vector code
    assert "tile.gemm" not in compilation.tiled()
    dtype, reference = DTYPES[ty], ROW_MAJOR_CASES[case][2]
    for m, n in [(1, 1), (3, 17), (17, 3), (33, 64)]:
        arrays = _row_major_arguments(case, dtype, m, n, rng)
        want = reference(*(x.astype(np.float64) for x in arrays))
        compilation["k"](*arrays, group_size=1)
        bound = _tolerance(dtype, np.abs(want) + 2, max(m, n))
        assert np.all(np.abs(arrays[-1] - want) <= bound), (m, n)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", [*DTYPES, "bf16"])
def test_row_sums_at_every_boundary(ty: str, target: str, rng) -> None:
    """sum.n of a column-major matrix: into f32 or f64, passes down its columns as gemv.n's
    (GEMV_N_COLUMNS at a time; no column at all too: c is then beta c); into bf16, vectors of
    rows summed across the columns. beta 0 (c NaN, never read), 1 and other."""
    m_t, v = f"memref<{ty}x?x?>", f"memref<{ty}x?>"
    text = (
        f"func @g(%a: {m_t}, %y: {v}, %beta: f32) {{\n"
        f"  sum.n 2.0, %a, %beta, %y : f32, {m_t}, f32, {v}\n}}"
    )
    kernel = compiled(text, target)["g"]
    dtype = ELEMENT_DTYPES[ty]
    for m in LENGTHS[1::4]:
        for n in COLUMNS_N:
            a = np.asfortranarray(rng.uniform(-1, 1, (m, n)).astype(dtype))
            for beta in (0.0, 1.0, -0.5):
                y = rng.uniform(-1, 1, m).astype(dtype) if beta else np.full(m, np.nan, dtype)
                before = y.astype(np.float64) if beta else np.zeros(m)
                expected = 2.0 * a.astype(np.float64).sum(1) + beta * before
                kernel(a, y, np.float32(beta), group_size=1)
                bound = 2.0 * np.abs(a.astype(np.float64)).sum(1) + abs(beta * before)
                eps = np.finfo(np.float32 if ty == "bf16" else dtype).eps
                rounding = 2.0**-8 * np.abs(expected) if ty == "bf16" else 0  # once, on store
                assert np.all(np.abs(y - expected) <= 4 * eps * (n + 1) * bound + rounding + 1e-30)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", ["f32", "f64", "i32"])
def test_element_by_element_sums_keep_partial_sums(ty: str, target: str, rng) -> None:
    """A reduction the vector loops do not take (a strided vector, integers) keeps
    SCALAR_CHAINS partial sums, the last few elements in the first (lengths around it)."""
    v = f"memref<{ty}x?,strided<?>>"
    text = f"func @s(%x: {v}, %s: memref<{ty}>) {{\n  sum.n 1, %x, 0, %s : {ty}, {v}, {ty}, memref<{ty}>\n}}"
    compilation = compiled(text, target)
    header = compilation.llvm_ir.split("k.header:")[1].split("br ")[0]
    carried = {"f32": "phi  float", "f64": "phi  double", "i32": "phi  i32"}[ty]
    assert header.count(carried) == SCALAR_CHAINS > 1 and "x float>" not in compilation.llvm_ir
    dtype = ELEMENT_DTYPES[ty]
    for n in [0, 1, SCALAR_CHAINS - 1, SCALAR_CHAINS, SCALAR_CHAINS + 1, 4 * SCALAR_CHAINS + 3]:
        x = rng.integers(-50, 50, 3 * n + 1).astype(dtype)[::3][:n]
        out = np.full((), 7, dtype)
        compilation["s"](x, out, group_size=1)
        assert out == x.astype(np.float64).sum(), n  # small integers: every order is exact


def test_compare_extent_only_orders() -> None:
    """`compare_extent` answers >= and <=; asked for ==, it once answered <= for a static
    extent (the short columns' bug), and now refuses."""
    builder = ir.IRBuilder()
    assert compare_extent(builder, "<=", 1, 3) is True
    assert compare_extent(builder, ">=", 1, 3) is False
    with pytest.raises(ValueError, match="orders extents"):
        compare_extent(builder, "==", 1, 3)
