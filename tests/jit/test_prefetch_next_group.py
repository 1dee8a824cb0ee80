"""Prefetching the next work-group's operands of small batched gemms: which gemms get it, the
instructions it leaves, and results unchanged (the last group prefetches itself)."""

from __future__ import annotations

import numpy as np
import pytest

from .helpers import compiled


def batched(ty: str, m: int, n: int, k: int, index: str = "%g") -> str:
    a, b, c = f"memref<{ty}x{m}x{k}x?>", f"memref<{ty}x{k}x{n}x?>", f"memref<{ty}x{m}x{n}x?>"
    am, bm, cm = f"memref<{ty}x{m}x{k}>", f"memref<{ty}x{k}x{n}>", f"memref<{ty}x{m}x{n}>"
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  %g = group_id
  %i = arith.rem %g, 2 : index
  %a = subview %A[:,:,{index}] : {a}
  %b = subview %B[:,:,{index}] : {b}
  %c = subview %C[:,:,{index}] : {c}
  gemm.n.n 1.0, %a, %b, 1.0, %c : {ty}, {am}, {bm}, {ty}, {cm}
}}"""


def test_small_batched_gemm_prefetches_the_next_groups_operands() -> None:
    compilation = compiled(batched("f32", 16, 16, 16), "avx512")
    tiled = compilation.tiled()
    assert tiled.count("tile.prefetch ") == 2 and tiled.count("tile.prefetch.write ") == 1
    assert "tile.min" in tiled  # the next group, at most the last
    code = compilation.assembly()
    assert code.count("prefetcht0") >= 2 * 16 and code.count("prefetchw") >= 16  # 1 KiB each


@pytest.mark.parametrize(
    "text",
    [batched("f32", 64, 64, 64), batched("f32", 16, 16, 16, index="%i")],
    ids=["operands beyond a quarter of L1", "views not picked by the group id"],
)
def test_no_prefetch_where_it_would_not_help(text: str) -> None:
    assert "tile.prefetch" not in compiled(text, "avx512").tiled()


@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_results_with_prefetching(ty: str, rng) -> None:
    dt = np.float32 if ty == "f32" else np.float64
    m, n, k, batch = 20, 9, 20, 7
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k, batch)).astype(dt))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n, batch)).astype(dt))
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n, batch)).astype(dt))
    want = c + np.einsum("mkb,knb->mnb", a.astype(np.float64), b.astype(np.float64))
    compilation = compiled(batched(ty, m, n, k))
    assert "tile.prefetch" in compilation.tiled()
    for threads in (1, 2):
        got = c.copy(order="F")
        compilation["k"](a, b, got, group_size=batch, num_threads=threads)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
