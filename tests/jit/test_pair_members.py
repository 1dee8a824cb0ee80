"""Two tiny bf16 batch members per AMX tile product (`lowering/pair_members.py`): which loops
are paired, and results for every batch size, work-group slice, alpha and beta, also where
the arrays read ahead and C share a memory span (the plain paired loop then runs)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nanotc
from nanotc import targets

AMX_HOST = targets.host().amx
BF16 = ml_dtypes.bfloat16


def loop(m: int, n: int, k: int, b_type: str = "", scalars: str = "1.0, 1.0",
         extra: str = "") -> str:  # fmt: skip
    """Work-group g multiplies its slice of the batch: C_i := alpha A_i B_i + beta C_i."""
    a, c = f"memref<bf16x{m}x{k}x?>", f"memref<f32x{m}x{n}x?>"
    b = b_type or f"memref<bf16x{k}x{n}x?>"
    am, bm, cm = f"memref<bf16x{m}x{k}>", f"memref<bf16x{k}x{n}>", f"memref<f32x{m}x{n}>"
    alpha, beta = scalars.split(", ")
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  %g = group_id
  %groups = group_size
  %batch = size %C[2] : {c}
  %lo = arith.div %batch, %groups : index
  %first = arith.mul %g, %lo : index
  %last = arith.add %g, 1 : index
  %end = arith.mul %last, %batch : index
  %hi = arith.div %end, %groups : index
  %start = arith.mul %g, %batch : index
  %from = arith.div %start, %groups : index
  for %i = %from, %hi {{
    %a = subview %A[:,:,%i] : {a}
    %b = subview %B[:,:,%i] : {b}
    %c = subview %C[:,:,%i] : {c}
    gemm.n.n {alpha}, %a, %b, {beta}, %c : f32, {am}, {bm}, f32, {cm}
  }}{extra}
}}"""


def tiled(text: str, target: str = "amx") -> str:
    return nanotc.compile(text, target=target).tiled()


def test_a_loop_of_tiny_gemms_multiplies_members_in_pairs() -> None:
    text = tiled(loop(8, 8, 8))
    assert "fuse %A[1, 2]" in text and "fuse %C[1, 2]" in text
    assert "k 16 : f32, memref<bf16x512>, memref<bf16x544>, memref<f32x8x16>" in text
    # [A_i A_i+1] into VNNI pairs, B_i and B_i+1 into the diagonal blocks of the row panel
    assert "rows 8 cols 16 panel 16" in text and text.count("rows 8 cols 8 panel 16 into") >= 4
    assert "tile.disjoint %B, %C" in text  # pairs packed ahead behind the run-time test


@pytest.mark.parametrize(
    ("text", "target", "paired"),
    [
        (loop(8, 8, 8), "avx512", False),  # no AMX
        (loop(8, 9, 8), "amx", False),  # 2N > 16
        (loop(8, 8, 17), "amx", False),  # 2K > 32
        (loop(17, 8, 8), "amx", False),  # M > 16
        (loop(4, 8, 16), "amx", True),
        (loop(8, 8, 8, b_type="memref<bf16x8x8x?,strided<1,8,?>>"), "amx", True),  # any B
        (loop(8, 8, 8).replace("f32x8x8x?>", "f32x8x8x?,strided<1,8,?>>"), "amx", False),
    ],
    ids=["avx512", "wide-n", "long-k", "tall-m", "4x8x16", "strided-b", "sparse-c"],
)
def test_which_loops_are_paired(text: str, target: str, paired: bool) -> None:
    assert ("fuse %A[1, 2]" in tiled(text, target)) == paired


def test_loops_with_other_instructions_or_other_amx_gemms_are_left_alone() -> None:
    store = (
        "\n  %x = load %C[0, 0, 0] : memref<f32x8x8x?>\n  store %x, %C[1, 1, 0] : memref<f32x8x8x?>"
    )
    assert "fuse %A" in tiled(loop(8, 8, 8, extra=store))  # outside the loop: fine
    second = (
        "\n  %a0 = subview %A[:,:,0] : memref<bf16x8x8x?>\n  %b0 = subview %B[:,:,0] : "
        "memref<bf16x8x8x?>\n  %c0 = subview %C[:,:,0] : memref<f32x8x8x?>\n  gemm.n.n 1.0, "
        "%a0, %b0, 1.0, %c0 : f32, memref<bf16x8x8>, memref<bf16x8x8>, f32, memref<f32x8x8>"
    )
    assert "fuse %A" not in tiled(loop(8, 8, 8, extra=second))


def operands(rng, m: int, n: int, k: int, batch: int) -> tuple[np.ndarray, ...]:
    def bf16(*shape: int) -> np.ndarray:
        return np.asfortranarray(rng.uniform(-1, 1, shape)).astype(BF16)

    c = np.asfortranarray(rng.uniform(-1, 1, (m, n, batch))).astype(np.float32)
    return bf16(m, k, batch), bf16(k, n, batch), c


def expected(a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float, beta: float):
    product = np.einsum("mkb,knb->mnb", a.astype(np.float64), b.astype(np.float64))
    return alpha * product + (beta * c.astype(np.float64) if beta else 0)


@pytest.mark.skipif(not AMX_HOST, reason="this host has no AMX")
@pytest.mark.parametrize("shape", [(8, 8, 8), (4, 4, 4), (16, 8, 16), (3, 5, 7)], ids=str)
@pytest.mark.parametrize("batch", [0, 1, 2, 3, 8, 13])
@pytest.mark.parametrize("groups", [1, 2, 3])
def test_results(shape: tuple[int, int, int], batch: int, groups: int, rng) -> None:
    """Odd and even slices per work-group (an odd member left at the end of each)."""
    a, b, c = operands(rng, *shape, batch)
    want = expected(a, b, c, 1.0, 1.0)
    nanotc.compile(loop(*shape))["k"](a, b, c, group_size=groups, num_threads=2)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not AMX_HOST, reason="this host has no AMX")
@pytest.mark.parametrize(("alpha", "beta"), [(2.0, 0.0), (1.0, 0.5), (-1.5, 1.0)])
def test_alpha_and_beta(alpha: float, beta: float, rng) -> None:
    a, b, c = operands(rng, 8, 8, 8, 9)
    want = expected(a, b, c, alpha, beta)
    if beta == 0:
        c[...] = np.nan  # beta 0 never reads C
    nanotc.compile(loop(8, 8, 8, scalars=f"{alpha}, {beta}"))["k"](a, b, c, group_size=1)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not AMX_HOST, reason="this host has no AMX")
def test_b_spanning_c_runs_the_plain_paired_loop(rng) -> None:
    """B's first member lies before C and the others after it: their memory spans overlap,
    so the pairs are not packed ahead, and the results are the same."""
    m = n = k = 8
    batch = 7
    a, b, c = operands(rng, m, n, k, batch)
    want = expected(a, b, c, 1.0, 1.0)
    stride = 128 + 256 * batch  # bytes from one member of B to the next: all of C between
    raw = np.zeros(batch * stride, np.uint8)
    b_spread = np.lib.stride_tricks.as_strided(raw.view(BF16), (k, n, batch), (2, 2 * k, stride))
    c_inside = raw[128 : 128 + 256 * batch].view(np.float32).reshape((m, n, batch), order="F")
    b_spread[...], c_inside[...] = b, c
    text = loop(m, n, k, b_type="memref<bf16x8x8x?,strided<1,8,?>>")
    assert "fuse %A[1, 2]" in tiled(text)
    nanotc.compile(text)["k"](a, b_spread, c_inside, group_size=1)
    np.testing.assert_allclose(c_inside, want, rtol=1e-5, atol=1e-5)
