"""The recipes against numpy: small_gemm_batched over flat buffers with leading dimensions and
batch strides (every transpose, both precisions, beta 0 and not) and tall_and_skinny with
dynamic M and leading dimensions, remainders of the row blocks included."""

from __future__ import annotations

import numpy as np
import pytest

from nanotc import recipes

TOLERANCE = {np.float32: 1e-5, np.float64: 1e-12}


def reference_batch(
    op_a: str, op_b: str, alpha: float, a: np.ndarray, b: np.ndarray, beta: float, c: np.ndarray
) -> np.ndarray:
    """alpha op(A_g) op(B_g) + beta C_g in float64 for every g (last axis)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if op_a == "t":
        a64 = a64.transpose(1, 0, 2)
    if op_b == "t":
        b64 = b64.transpose(1, 0, 2)
    product = np.einsum("ikg,kjg->ijg", a64, b64)
    return alpha * product + (beta * c.astype(np.float64) if beta else 0)


def strided(buffer: np.ndarray, rows: int, cols: int, ld: int, stride: int, howmany: int):
    return np.lib.stride_tricks.as_strided(
        buffer, (rows, cols, howmany), tuple(s * buffer.itemsize for s in (1, ld, stride))
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans", ["nn", "nt", "tn", "tt"])
def test_small_gemm_batched_on_flat_buffers(dtype: type, trans: str, rng) -> None:
    m, n, k, howmany = 5, 3, 4, 6
    ta, tb = trans
    a_rows, a_cols = (m, k) if ta == "n" else (k, m)
    b_rows, b_cols = (k, n) if tb == "n" else (n, k)
    lda, ldb, ldc = a_rows + 2, b_rows + 1, m + 3  # leading dimensions beyond the rows
    sa, sb, sc = lda * a_cols + 5, ldb * b_cols, ldc * n + 1  # gaps between batch members
    gemm = recipes.small_gemm_batched(dtype, ta, tb, m, n, k, lda, sa, ldb, sb, ldc, sc)
    a = rng.uniform(-1, 1, sa * howmany).astype(dtype)
    b = rng.uniform(-1, 1, sb * howmany).astype(dtype)
    c = rng.uniform(-1, 1, sc * howmany).astype(dtype)
    before = c.copy()
    av, bv = (
        strided(a, a_rows, a_cols, lda, sa, howmany),
        strided(b, b_rows, b_cols, ldb, sb, howmany),
    )
    want = reference_batch(ta, tb, 0.75, av, bv, -1.5, strided(c, m, n, ldc, sc, howmany))
    gemm(0.75, a, b, -1.5, c, howmany)
    np.testing.assert_allclose(
        strided(c, m, n, ldc, sc, howmany), want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype]
    )
    outside = np.ones(c.size, dtype=bool)
    outside[np.unique(strided(np.arange(c.size), m, n, ldc, sc, howmany))] = False
    assert np.array_equal(c[outside], before[outside]), "wrote outside the batch members"


def test_small_gemm_batched_beta_zero_never_reads_c(rng) -> None:
    gemm = recipes.small_gemm_batched("f64", "n", "n", 4, 4, 4, 4, 16, 4, 16, 4, 16)
    assert gemm.kernel_for(0.0) == "gemm_beta0" and gemm.kernel_for(1) == "gemm"
    a, b = rng.uniform(-1, 1, (4, 4, 3)), rng.uniform(-1, 1, (4, 4, 3))
    a, b = np.asfortranarray(a), np.asfortranarray(b)
    c = np.full((4, 4, 3), np.nan, order="F")
    gemm(2.0, a, b, 0.0, c)  # 3-D arrays: howmany from the batch axis
    np.testing.assert_allclose(c, reference_batch("n", "n", 2.0, a, b, 0.0, c), rtol=1e-12)


def test_small_gemm_batched_argument_errors(rng) -> None:
    with pytest.raises(ValueError, match="ldA = 3 is less than the 4 rows"):
        recipes.small_gemm_batched("f32", "n", "n", 4, 4, 4, 3, 16, 4, 16, 4, 16)
    with pytest.raises(ValueError, match="would overlap"):
        recipes.small_gemm_batched("f32", "n", "n", 4, 4, 4, 4, 15, 4, 16, 4, 16)
    with pytest.raises(ValueError, match="transpose must be"):
        recipes.small_gemm_batched("f32", "x", "n", 4, 4, 4, 4, 16, 4, 16, 4, 16)
    with pytest.raises(ValueError, match="not supported"):
        recipes.small_gemm_batched("i32", "n", "n", 4, 4, 4, 4, 16, 4, 16, 4, 16)
    gemm = recipes.small_gemm_batched(np.float32, True, False, 4, 4, 4, 4, 16, 4, 16, 4, 16)
    flat = np.zeros(16 * 3, dtype=np.float32)
    with pytest.raises(ValueError, match="howmany is needed"):
        gemm(1.0, flat, flat.copy(), 0.0, flat.copy())
    with pytest.raises(ValueError, match="need 64"):
        gemm(1.0, flat, flat.copy(), 0.0, flat.copy(), 4)
    with pytest.raises(ValueError, match="must hold f32"):
        gemm(1.0, flat.astype(np.float64), flat, 0.0, flat, 3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m", [1, 100, 300, 517])
def test_tall_and_skinny_with_leading_dimensions(dtype: type, m: int, rng) -> None:
    n, k = 6, 9
    tas = recipes.tall_and_skinny(dtype, n, k, M_block_size=64)
    big_a = np.asfortranarray(rng.uniform(-1, 1, (m + 3, k + 1)).astype(dtype))
    big_c = np.asfortranarray(rng.uniform(-1, 1, (m + 5, n)).astype(dtype))
    a, c = big_a[2 : m + 2, :k], big_c[:m]  # views: leading dimensions m+3 and m+5
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n)).astype(dtype))
    before = big_c.copy()
    want = 1.25 * a.astype(np.float64) @ b + 0.5 * c.astype(np.float64)
    tas(1.25, a, b, 0.5, c)
    tol = TOLERANCE[dtype] * 10
    np.testing.assert_allclose(c, want, rtol=tol, atol=tol)
    assert np.array_equal(big_c[m:], before[m:]), "wrote below C"
    assert tas.groups(m) == -(-m // 64)


def test_tall_and_skinny_default_block_and_beta_zero(rng) -> None:
    tas = recipes.tall_and_skinny("f64", 8, 16)
    assert tas.M_block_size > 0 and tas.M_block_size % 8 == 0
    a = np.asfortranarray(rng.uniform(-1, 1, (1000, 16)))
    b = np.asfortranarray(rng.uniform(-1, 1, (16, 8)))
    c = np.full((1000, 8), np.nan, order="F")
    tas(1.0, a, b, 0.0, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="must agree"):
        tas(1.0, a[:999], b, 0.0, c)


def test_tall_and_skinny_specialized_static_m(rng) -> None:
    tas = recipes.tall_and_skinny_specialized("f32", 256, 4, 4, 256, 4, 256, M_block_size=64)
    assert "if %short" not in tas.source  # M is whole blocks: no remainder path
    a = np.asfortranarray(rng.uniform(-1, 1, (256, 4)).astype(np.float32))
    b = np.asfortranarray(rng.uniform(-1, 1, (4, 4)).astype(np.float32))
    c = np.zeros((256, 4), dtype=np.float32, order="F")
    tas(1.0, a, b, 1.0, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mnk", [(0, 4, 4), (4, 0, 4), (4, 4, 0), (0, 0, 0)])
def test_small_gemm_batched_with_an_empty_size(mnk: tuple[int, int, int], rng) -> None:
    """K = 0 leaves beta C; M or N = 0 has nothing to write."""
    m, n, k = mnk
    ld_a, ld_b, ld_c = max(1, m), max(1, k), max(1, m)
    sa, sb, sc = ld_a * k, ld_b * n, ld_c * n
    gemm = recipes.small_gemm_batched("f64", "n", "n", m, n, k, ld_a, sa, ld_b, sb, ld_c, sc)
    a, b = rng.uniform(-1, 1, max(1, sa * 3)), rng.uniform(-1, 1, max(1, sb * 3))
    c = rng.uniform(-1, 1, max(1, sc * 3))
    want = c.copy()
    if k == 0:
        want[: sc * 3] *= 0.5
    gemm(2.0, a, b, 0.5, c, 3)
    np.testing.assert_allclose(c, want, rtol=1e-15)


def test_small_gemm_batched_sizes_past_an_index_are_refused() -> None:
    with pytest.raises(ValueError, match=r"strideA = 9223372036854775808 does not fit an index"):
        recipes.small_gemm_batched("f32", "n", "n", 4, 4, 4, 4, 2**63, 4, 16, 4, 16)


@pytest.mark.parametrize(("m", "ld"), [(None, 100), (100, 100), (37, 40), (0, 1)])
def test_tall_and_skinny_blocks_fit_a_static_leading_dimension(m, ld: int, rng) -> None:
    """A block of rows is a view of A and C: at most M and the static ldA and ldC rows."""
    tas = recipes.tall_and_skinny_specialized("f32", m, 4, 4, ld, 4, ld)
    assert tas.M_block_size <= min(x for x in (m, ld) if x is not None) or m == 0
    rows = 100 if m is None else m
    big_a = np.asfortranarray(rng.uniform(-1, 1, (ld, 4)).astype(np.float32))
    big_c = np.asfortranarray(rng.uniform(-1, 1, (ld, 4)).astype(np.float32))
    a, c = big_a[:rows], big_c[:rows]
    b = np.asfortranarray(rng.uniform(-1, 1, (4, 4)).astype(np.float32))
    want = a.astype(np.float64) @ b + c
    tas(1.0, a, b, 1.0, c)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["f128", "i32", "int32", "no-such-type"])
def test_unsupported_element_types_are_value_errors(name: str) -> None:
    with pytest.raises(ValueError, match=r"unsupported element type|not supported"):
        recipes.scalar_type(name)
