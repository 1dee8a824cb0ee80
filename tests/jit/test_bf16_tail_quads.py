"""A bf16 dot tile of two vectors whose last holds 4 rows or fewer (an xmm on Zen 4's 256-bit
units) runs that vector in a ymm whose lane pairs hold two K pairs of each row
(`lowering.nanokernel.tail_k_quads`): which tiles do, their listing and assembly, and their
results against float64, with the steps past the last whole quad and an infinity in B."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nanotc
from nanotc.codegen import asm
from nanotc.targets import Target, get

from .helpers import ZEN4, group_members, looped_members, runs_here

MARK = "vtranspose16"


def listing(text: str, target: Target = ZEN4) -> str:
    return nanotc.compile(text, target=target, cache=False).nanokernels()


def looped(m: int, n: int, k: int) -> str:
    return looped_members("f32", m, n, k, inputs="bf16")


def single(m: int, n: int, k: int, alpha: str = "1.0", beta: str = "1.0", trans: str = "n") -> str:
    """One bf16 gemm into an f32 C, B as stored (`trans` "t": B holds op(B)'s transpose)."""
    b_shape = f"{n}x{k}" if trans == "t" else f"{k}x{n}"
    a_t, b_t, c_t = f"memref<bf16x{m}x{k}>", f"memref<bf16x{b_shape}>", f"memref<f32x{m}x{n}>"
    return f"""func @k(%A: {a_t}, %B: {b_t}, %C: {c_t}) {{
  gemm.n.{trans} {alpha}, %A, %B, {beta}, %C : f32, {a_t}, {b_t}, f32, {c_t}
}}"""


@pytest.mark.parametrize("shape", [(20, 9, 20), (17, 6, 24), (20, 12, 32), (19, 5, 17)],
                         ids=str)  # fmt: skip
def test_two_vector_tiles_take_tail_quads(shape: tuple[int, int, int]) -> None:
    assert MARK in listing(looped(*shape))


@pytest.mark.parametrize(
    ("text", "target"),
    [(looped(20, 9, 8), ZEN4),  # K below 16
     (looped(35, 9, 35), ZEN4),  # three vectors
     (looped(16, 9, 20), ZEN4),  # no narrow vector
     (looped(24, 9, 20), ZEN4),  # a narrow vector of 8 rows (a ymm)
     (group_members("f32", 20, 9, 20, "bf16"), ZEN4),  # a member from memory
     (single(20, 9, 20, trans="t"), ZEN4),  # B's K strided
     (looped(20, 9, 20), get("avx512"))],  # the last vector computes at full width
    ids=["k8", "three-vectors", "whole", "ymm-tail", "group", "b.t", "avx512"],
)  # fmt: skip
def test_other_tiles_keep_the_tail_in_pairs(text: str, target: Target) -> None:
    assert MARK not in listing(text, target)


def test_the_tail_computes_in_ymm_and_nothing_spills() -> None:
    """20x9x20: per four k, 18 zmm dot products for the 16 rows and 9 ymm ones for the 4."""
    assembly = nanotc.compile(looped(20, 9, 20), target=ZEN4, cache=False).assembly()
    loop = max(asm.hot_loops(assembly, "k", "vdpbf16ps"), key=lambda lp: lp.count("vdpbf16ps"))
    dots = [i for i in loop.instructions if i.startswith("vdpbf16ps")]
    widths = [sum(f"%{r}" in i for i in dots) for r in ("zmm", "ymm", "xmm")]
    assert widths == [18, 9, 0]
    assert loop.stack_accesses() == []


def _bf16(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return np.asfortranarray(rng.uniform(-1, 1, shape).astype(ml_dtypes.bfloat16))


@pytest.mark.skipif(not runs_here(ZEN4), reason="this host cannot run Zen 4 code")
@pytest.mark.parametrize(
    "shape", [(20, 9, 20), (20, 9, 16), (17, 6, 17), (19, 5, 18), (18, 3, 19), (20, 3, 16)],
    ids=str,
)  # fmt: skip
def test_tail_quads_compute_the_products(shape: tuple[int, int, int],
                                         rng: np.random.Generator) -> None:  # fmt: skip
    """K past its last whole quad by 0 to 3 steps; 20x3x16's six accumulators start from C
    (C's rows into the even lanes) where the others start from zero."""
    m, n, k = shape
    compilation = nanotc.compile(looped(m, n, k), target=ZEN4, cache=False)
    assert MARK in compilation.nanokernels()
    batch = 4
    a, b = _bf16(rng, (m, k, batch)), _bf16(rng, (k, n, batch))
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n, batch)).astype(np.float32))
    want = c + np.einsum("mkg,kng->mng", a.astype(np.float64), b.astype(np.float64))
    compilation["k"](a, b, c, group_size=1)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * k)


@pytest.mark.skipif(not runs_here(ZEN4), reason="this host cannot run Zen 4 code")
@pytest.mark.parametrize(("alpha", "beta"), [("0.5", "0.0"), ("-2.0", "0.25")], ids=str)
def test_tail_quads_with_alpha_and_beta(alpha: str, beta: str, rng: np.random.Generator) -> None:
    m, n, k = 19, 9, 21
    compilation = nanotc.compile(single(m, n, k, alpha, beta), target=ZEN4, cache=False)
    assert MARK in compilation.nanokernels()
    a, b = _bf16(rng, (m, k)), _bf16(rng, (k, n))
    c = np.full((m, n), np.nan if float(beta) == 0 else 0.5, np.float32, order="F")
    product = a.astype(np.float64) @ b.astype(np.float64)
    want = float(alpha) * product + (0 if float(beta) == 0 else float(beta) * 0.5)
    compilation["k"](a, b, c, group_size=1)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * k)


@pytest.mark.skipif(not runs_here(ZEN4), reason="this host cannot run Zen 4 code")
@pytest.mark.parametrize("at", [20, 17, 18], ids=lambda k: f"k{k}")
def test_an_infinity_in_b_meets_no_zero(at: int) -> None:
    """B's element at k = `at` is +inf, A all positive: every row of that column is +inf.
    Past the last whole quad (K = 21: k 20 is the odd last step, 17 and 18 in a quad) the
    tail's odd lanes are masked, where a zero would make 0 x inf = NaN."""
    m, n, k = 20, 3, 21
    compilation = nanotc.compile(single(m, n, k), target=ZEN4, cache=False)
    a = np.asfortranarray(np.full((m, k), 0.5, ml_dtypes.bfloat16))
    b = np.asfortranarray(np.full((k, n), 0.25, ml_dtypes.bfloat16))
    b[at, 1] = np.inf
    c = np.zeros((m, n), np.float32, order="F")
    compilation["k"](a, b, c, group_size=1)
    assert np.all(np.isposinf(c[:, 1]))
    np.testing.assert_allclose(c[:, [0, 2]], 0.5 * 0.25 * k)
