"""The collective linear-algebra instructions against numpy formulas: random shapes including
primes, transposes, alpha and beta in {0, 1, other} (NaN-filled outputs when beta is 0),
strided and dynamic memrefs, mixed element types and wrapping integer outputs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from reference_helpers import (
    DTYPES,
    PRIMES_AND_SMALL,
    assert_close,
    nan_array,
    random_array,
    run,
    same_bits,
)

ALPHA_BETA = [(1.0, 0.0), (1.0, 1.0), (-0.5, 0.0), (2.5, 1.0), (1.5, -0.75), (0.0, 2.0)]


def dyn(ty: str, order: int) -> str:
    """A memref type of `order` with dynamic sizes and strides: accepts any numpy view."""
    if order == 0:
        return f"memref<{ty}>"
    return f"memref<{ty}{'x?' * order},strided<{','.join('?' * order)}>>"


def to_type(x: np.ndarray, ty: str) -> np.ndarray:
    return np.asarray(x).astype(DTYPES[ty])


def output(shape: tuple[int, ...], ty: str, beta: float, rng: np.random.Generator) -> np.ndarray:
    """The output array: NaN (or garbage) when beta is 0, so a read of it would show."""
    if beta == 0:
        if DTYPES[ty].kind == "f" or ty == "bf16":
            return nan_array(shape, ty)
        return np.full(shape, 0x5A, DTYPES[ty], order="F")
    return random_array(rng, shape, ty)


def compute_type(out_ty: str) -> str:
    return "f32" if out_ty in ("f16", "bf16") else out_ty


def expected_update(
    alpha: float, product: np.ndarray, beta: float, out: np.ndarray, out_ty: str
) -> np.ndarray:
    """alpha * P + beta * out in float64 (floats) or int64 with wrap-around (integers)."""
    if DTYPES[out_ty].kind in "iu":
        result = np.int64(alpha) * product.astype(np.int64)
        if beta != 0:
            result = result + np.int64(beta) * out.astype(np.int64)
        bits = DTYPES[out_ty].itemsize * 8
        return (result + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)
    result = alpha * product.astype(np.float64)
    if beta != 0:
        result = result + beta * out.astype(np.float64)
    return result


def as_compute(x: np.ndarray, out_ty: str) -> np.ndarray:
    """Inputs as the compute type sees them, in float64 / int64 for the expected formula."""
    converted = to_type(x.astype(np.float64) if x.dtype.kind == "V" else x, compute_type(out_ty))
    return converted.astype(np.int64 if converted.dtype.kind in "iu" else np.float64)


def op(x: np.ndarray, trans: str) -> np.ndarray:
    return x.T if trans == "t" and x.ndim == 2 else x


# -- gemm -----------------------------------------------------------------------------------


def gemm_text(ta: str, tb: str, tys: tuple[str, str, str, str]) -> str:
    ts, ta_ty, tb_ty, tc_ty = tys
    a, b, c = dyn(ta_ty, 2), dyn(tb_ty, 2), dyn(tc_ty, 2)
    return f"""func @k(%alpha: {ts}, %a: {a}, %b: {b}, %beta: {ts}, %c: {c}) {{
        gemm.{ta}.{tb} %alpha, %a, %b, %beta, %c : {ts}, {a}, {b}, {ts}, {c}
    }}"""


def check_gemm(
    rng: np.random.Generator,
    mnk: tuple[int, int, int],
    trans: tuple[str, str],
    alpha_beta: tuple[float, float],
    tys: tuple[str, str, str, str] = ("f64", "f64", "f64", "f64"),
    strided: bool = False,
) -> None:
    (m, n, k), (ta, tb), (alpha, beta) = mnk, trans, alpha_beta
    ts, ta_ty, tb_ty, tc_ty = tys
    a_shape = (k, m) if ta == "t" else (m, k)
    b_shape = (n, k) if tb == "t" else (k, n)
    if strided:  # every other row and column of larger arrays
        a = random_array(rng, (2 * a_shape[0], 2 * a_shape[1]), ta_ty)[::2, 1::2]
        b = random_array(rng, (b_shape[0] + 3, b_shape[1]), tb_ty)[3:]
    else:
        a, b = random_array(rng, a_shape, ta_ty), random_array(rng, b_shape, tb_ty)
    c = output((m, n), tc_ty, beta, rng)
    product = op(as_compute(a, tc_ty), ta) @ op(as_compute(b, tc_ty), tb)
    expected = expected_update(alpha, product, beta, as_compute(c, tc_ty), tc_ty)
    scalar = DTYPES[ts].type
    run(gemm_text(ta, tb, tys), scalar(alpha), a, b, scalar(beta), c)
    assert_close(c, to_type(expected, tc_ty), tc_ty)


@pytest.mark.parametrize("ty", ["f32", "f64"])
@pytest.mark.parametrize(("ta", "tb"), list(itertools.product("nt", "nt")))
def test_gemm_random_shapes(ty: str, ta: str, tb: str) -> None:
    rng = np.random.default_rng(100)
    for _ in range(12):
        mnk = tuple(int(x) for x in rng.choice(PRIMES_AND_SMALL, 3))
        alpha_beta = ALPHA_BETA[rng.integers(len(ALPHA_BETA))]
        check_gemm(rng, mnk, (ta, tb), alpha_beta, (ty, ty, ty, ty))  # type: ignore[arg-type]


@pytest.mark.parametrize("alpha_beta", ALPHA_BETA)
def test_gemm_alpha_beta_strided(alpha_beta: tuple[float, float]) -> None:
    rng = np.random.default_rng(101)
    check_gemm(rng, (7, 5, 3), ("n", "t"), alpha_beta, strided=True)
    check_gemm(rng, (13, 2, 17), ("t", "n"), alpha_beta, strided=True)


@pytest.mark.parametrize(
    "tys",
    [
        ("f32", "bf16", "bf16", "f32"),
        ("f32", "f16", "f16", "f32"),
        ("f64", "f32", "f32", "f64"),
        ("f32", "f64", "f32", "f16"),
        ("f32", "bf16", "f32", "bf16"),
        ("f64", "i32", "i8", "f32"),
        ("i32", "i8", "i8", "i8"),
        ("i64", "i16", "i32", "i16"),
        ("f32", "f32", "f32", "i32"),
    ],
)
def test_gemm_mixed_types(tys: tuple[str, str, str, str]) -> None:
    rng = np.random.default_rng(102)
    for mnk, alpha_beta in [((5, 7, 3), (1.0, 1.0)), ((8, 3, 11), (2.0, 0.0))]:
        check_gemm(rng, mnk, ("n", "n"), alpha_beta, tys)


def test_gemm_integer_output_wraps() -> None:
    a = np.full((2, 3), 100, np.int8, order="F")
    b = np.full((3, 2), 100, np.int8, order="F")
    c = np.full((2, 2), 7, np.int8, order="F")
    run(gemm_text("n", "n", ("i8", "i8", "i8", "i8")), 1, a, b, 1, c)
    assert (c == 55).all()  # 3 * 100 * 100 + 7 = 30007 = 117 * 256 + 55


def test_gemm_float_scalars_with_integer_output_truncate() -> None:
    rng = np.random.default_rng(103)
    a, b = random_array(rng, (3, 4), "i32"), random_array(rng, (4, 2), "i32")
    c = random_array(rng, (3, 2), "i32")
    expected = 2 * (a.astype(np.int64) @ b) + (-1) * c
    run(
        gemm_text("n", "n", ("f32", "i32", "i32", "i32")),
        np.float32(2.9),
        a,
        b,
        np.float32(-1.5),
        c,
    )
    np.testing.assert_array_equal(c, expected)


def test_gemm_static_types_and_constant_scalars() -> None:
    text = """func @k(%a: memref<f32x4x3>, %b: memref<f32x5x3>, %c: memref<f32x4x5>) {
        gemm.n.t 1.5, %a, %b, 0.0, %c
            : f32, memref<f32x4x3>, memref<f32x5x3>, f32, memref<f32x4x5>
    }"""
    rng = np.random.default_rng(104)
    a, b, c = (
        random_array(rng, (4, 3), "f32"),
        random_array(rng, (5, 3), "f32"),
        nan_array((4, 5), "f32"),
    )
    run(text, a, b, c)
    assert_close(c, 1.5 * a.astype(np.float64) @ b.T, "f32")


def test_beta_zero_at_run_time_does_not_read_output_but_alpha_zero_propagates_nan() -> None:
    text = gemm_text("n", "n", ("f32", "f32", "f32", "f32"))
    a, b = np.ones((2, 2), np.float32), np.ones((2, 2), np.float32)
    c = nan_array((2, 2), "f32")
    run(text, np.float32(1), a, b, np.float32(-0.0), c)
    np.testing.assert_array_equal(c, 2 * np.ones((2, 2)))
    a[0, 0] = np.nan
    c[...] = 1
    run(text, np.float32(0), a, b, np.float32(1), c)  # 0 * NaN is NaN: alpha is always applied
    assert np.isnan(c[0, 0]) and np.isnan(c[0, 1]) and c[1, 0] == 1
    c = nan_array((2, 2), "f32")
    run(text, np.float32(1), b, b, np.float32(np.nan), c)  # beta NaN is not 0: reads c
    assert np.isnan(c).all()


def test_f64_beta_that_is_zero_in_f32_does_not_read_f32_output() -> None:
    rng = np.random.default_rng(105)
    a, b = random_array(rng, (3, 3), "f32"), random_array(rng, (3, 3), "f32")
    c = nan_array((3, 3), "f32")
    run(gemm_text("n", "n", ("f64", "f32", "f32", "f32")), 1.0, a, b, 1e-300, c)
    assert_close(c, a.astype(np.float64) @ b, "f32")


def test_f16_output_is_computed_in_f32_and_rounded() -> None:
    a = np.full((1, 3), 1.0, np.float16, order="F")
    b = np.array([[2.0**-11], [2.0**-11], [1.0]], np.float16)
    c = np.zeros((1, 1), np.float16)
    # in f16 each partial sum 1 + 2^-11 would round back to 1; in f32 they add up to 2^-10
    run(
        gemm_text("t", "n", ("f32", "f16", "f16", "f16")),
        np.float32(1),
        a.T.copy(order="F"),
        b,
        np.float32(0),
        c,
    )
    assert same_bits(c[0, 0], np.float16(1 + 2**-10))


# -- gemv, ger, hadamard, axpby, sum --------------------------------------------------------


def blas4_text(inst: str, order_a: int, order_b: int, order_c: int, tys: tuple[str, ...]) -> str:
    ts, ta, tb, tc = tys
    a, b, c = dyn(ta, order_a), dyn(tb, order_b), dyn(tc, order_c)
    return f"""func @k(%alpha: {ts}, %a: {a}, %b: {b}, %beta: {ts}, %c: {c}) {{
        {inst} %alpha, %a, %b, %beta, %c : {ts}, {a}, {b}, {ts}, {c}
    }}"""


def blas3_text(inst: str, order_a: int, order_b: int, tys: tuple[str, ...]) -> str:
    ts, ta, tb = tys
    a, b = dyn(ta, order_a), dyn(tb, order_b)
    return f"""func @k(%alpha: {ts}, %a: {a}, %beta: {ts}, %b: {b}) {{
        {inst} %alpha, %a, %beta, %b : {ts}, {a}, {ts}, {b}
    }}"""


TYPE_SETS = [("f64",) * 4, ("f32",) * 4, ("f32", "f16", "f32", "bf16"), ("i32", "i8", "i16", "i8")]


@pytest.mark.parametrize("trans", "nt")
@pytest.mark.parametrize("tys", TYPE_SETS)
def test_gemv(trans: str, tys: tuple[str, str, str, str]) -> None:
    rng = np.random.default_rng(200)
    ts, ta, tb, tc = tys
    for (m, k), (alpha, beta) in zip([(1, 1), (7, 3), (17, 13), (16, 5)], ALPHA_BETA):
        a = random_array(rng, (k, m) if trans == "t" else (m, k), ta)
        b = random_array(rng, (2 * k,), tb)[::2]
        c = output((m,), tc, beta, rng)
        product = op(as_compute(a, tc), trans) @ as_compute(b, tc)
        expected = expected_update(alpha, product, beta, as_compute(c, tc), tc)
        run(
            blas4_text(f"gemv.{trans}", 2, 1, 1, tys),
            DTYPES[ts].type(alpha),
            a,
            b,
            DTYPES[ts].type(beta),
            c,
        )
        assert_close(c, to_type(expected, tc), tc)


@pytest.mark.parametrize("tys", TYPE_SETS)
def test_ger(tys: tuple[str, str, str, str]) -> None:
    rng = np.random.default_rng(201)
    ts, ta, tb, tc = tys
    for (m, n), (alpha, beta) in zip([(1, 1), (7, 3), (5, 13), (16, 2)], ALPHA_BETA[2:]):
        a, b = random_array(rng, (m,), ta), random_array(rng, (n,), tb)
        c = output((m, n), tc, beta, rng)
        product = np.multiply.outer(as_compute(a, tc), as_compute(b, tc))
        expected = expected_update(alpha, product, beta, as_compute(c, tc), tc)
        run(blas4_text("ger", 1, 1, 2, tys), DTYPES[ts].type(alpha), a, b, DTYPES[ts].type(beta), c)
        assert_close(c, to_type(expected, tc), tc)


@pytest.mark.parametrize("tys", TYPE_SETS)
def test_hadamard(tys: tuple[str, str, str, str]) -> None:
    rng = np.random.default_rng(202)
    ts, ta, tb, tc = tys
    for n, (alpha, beta) in zip([1, 2, 13, 32], ALPHA_BETA):
        a, b = random_array(rng, (n,), ta), random_array(rng, (3 * n,), tb)[1::3]
        c = output((n,), tc, beta, rng)
        product = as_compute(a, tc) * as_compute(b, tc)
        expected = expected_update(alpha, product, beta, as_compute(c, tc), tc)
        run(
            blas4_text("hadamard", 1, 1, 1, tys),
            DTYPES[ts].type(alpha),
            a,
            b,
            DTYPES[ts].type(beta),
            c,
        )
        assert_close(c, to_type(expected, tc), tc)


def test_hadamard_product_spelling() -> None:
    text = """func @k(%a: memref<f32x3>, %c: memref<f32x3>) {
        hadamard_product 2.0, %a, %a, 0.0, %c
            : f32, memref<f32x3>, memref<f32x3>, f32, memref<f32x3>
    }"""
    a, c = np.array([1, 2, 3], np.float32), nan_array((3,), "f32")
    run(text, a, c)
    np.testing.assert_array_equal(c, [2, 8, 18])


@pytest.mark.parametrize("trans", "nt")
@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("tys", [t[:1] + t[2:] for t in TYPE_SETS])
def test_axpby(trans: str, order: int, tys: tuple[str, str, str]) -> None:
    rng = np.random.default_rng(203)
    ts, ta, tb = tys
    for shape, (alpha, beta) in zip([(1, 1), (5, 3), (2, 17), (13, 13)], ALPHA_BETA[1:]):
        shape = shape[:order]
        a_shape = shape[::-1] if trans == "t" else shape
        a = random_array(rng, tuple(2 * s for s in a_shape), ta)[(slice(None, None, 2),) * order]
        b = output(shape, tb, beta, rng)
        expected = expected_update(alpha, op(as_compute(a, tb), trans), beta, as_compute(b, tb), tb)
        run(
            blas3_text(f"axpby.{trans}", order, order, tys),
            DTYPES[ts].type(alpha),
            a,
            DTYPES[ts].type(beta),
            b,
        )
        assert_close(b, to_type(expected, tb), tb)


@pytest.mark.parametrize("trans", "nt")
@pytest.mark.parametrize("tys", [t[:1] + t[2:] for t in TYPE_SETS])
def test_sum_of_matrix_rows(trans: str, tys: tuple[str, str, str]) -> None:
    rng = np.random.default_rng(204)
    ts, ta, tb = tys
    for (m, n), (alpha, beta) in zip([(1, 1), (7, 3), (3, 17), (16, 16)], ALPHA_BETA[2:]):
        a = random_array(rng, (n, m) if trans == "t" else (m, n), ta)
        b = output((m,), tb, beta, rng)
        product = op(as_compute(a, tb), trans).sum(axis=1)
        expected = expected_update(alpha, product, beta, as_compute(b, tb), tb)
        run(
            blas3_text(f"sum.{trans}", 2, 1, tys),
            DTYPES[ts].type(alpha),
            a,
            DTYPES[ts].type(beta),
            b,
        )
        assert_close(b, to_type(expected, tb), tb)


@pytest.mark.parametrize("tys", [t[:1] + t[2:] for t in TYPE_SETS])
def test_sum_of_vector(tys: tuple[str, str, str]) -> None:
    rng = np.random.default_rng(205)
    ts, ta, tb = tys
    for n, (alpha, beta) in zip([1, 2, 13, 100], ALPHA_BETA):
        a = random_array(rng, (n,), ta)
        b = output((), tb, beta, rng)
        product = np.asarray(as_compute(a, tb).sum())
        expected = expected_update(alpha, product, beta, as_compute(b, tb), tb)
        run(blas3_text("sum.n", 1, 0, tys), DTYPES[ts].type(alpha), a, DTYPES[ts].type(beta), b)
        assert_close(b, to_type(expected, tb), tb)


def test_atomic_flag_changes_nothing_in_sequence() -> None:
    text = """func @k(%a: group<memref<f64x4>>, %c: memref<f64x4>) {
        %id = group_id
        %m = load %a[%id] : group<memref<f64x4>>
        axpby.n.atomic 1.0, %m, 1.0, %c : f64, memref<f64x4>, f64, memref<f64x4>
    }"""
    rng = np.random.default_rng(206)
    batch = random_array(rng, (4, 9), "f64")
    c = np.zeros(4)
    run(text, batch, c, group_size=9)
    np.testing.assert_allclose(c, batch.sum(axis=1))
