"""Prefetching the next work-group's operands of batched gemms: which gemms get it (small and
streamed sizes), the instructions it leaves, and results unchanged (the last group prefetches
itself)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from .helpers import compiled


def batched(
    ty: str, m: int, n: int, k: int, index: str = "%g", ld: int | None = None, inputs: str = ""
) -> str:
    """C_g += A_g B_g; with `ld`, A and C are the first m rows of ld-row arrays; A and B of
    type `inputs` (default: C's)."""
    lda, ab = ld or m, inputs or ty
    a, b, c = f"memref<{ab}x{lda}x{k}x?>", f"memref<{ab}x{k}x{n}x?>", f"memref<{ty}x{lda}x{n}x?>"
    layout = f",strided<1,{lda}>" if ld else ""
    am, bm, cm = (
        f"memref<{ab}x{m}x{k}{layout}>",
        f"memref<{ab}x{k}x{n}>",
        f"memref<{ty}x{m}x{n}{layout}>",
    )
    rows = f"0:{m}" if ld else ":"
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  %g = group_id
  %i = arith.rem %g, 2 : index
  %a = subview %A[{rows},:,{index}] : {a}
  %b = subview %B[:,:,{index}] : {b}
  %c = subview %C[{rows},:,{index}] : {c}
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
    ("ty", "m", "n", "k", "distance"),
    [("f32", 8, 8, 8, 8), ("f64", 8, 8, 8, 4), ("f32", 16, 16, 16, 2), ("f64", 16, 16, 16, 1),
     ("f64", 64, 64, 64, 1)],
)  # fmt: skip
def test_the_smallest_members_prefetch_further_ahead(
    ty: str, m: int, n: int, k: int, distance: int
) -> None:
    """As many members ahead as fill an eighth of L1 (6 KiB on avx512), at least one."""
    tiled = compiled(batched(ty, m, n, k), "avx512").tiled()
    assert re.findall(r"arith\.add %g, (\d+)", tiled) == [str(distance)]


@pytest.mark.parametrize(
    ("ty", "m", "ld", "step"),
    [("f64", 64, None, 64), ("f64", 72, 80, 80 * 8)],
    ids=["dense block: a loop over its lines", "strided columns: a loop over the columns"],
)
def test_streamed_batched_gemm_prefetches_the_next_groups_operands_in_loops(
    ty: str, m: int, ld: int | None, step: int
) -> None:
    """Operands beyond twice L1 (96 KiB of f64 64^3, 124 KiB of 72^3) are prefetched too, by
    loops: 1536 or more lines would otherwise be as many instructions."""
    compilation = compiled(batched(ty, m, m, m, ld=ld), "avx512")
    tiled = compilation.tiled()
    assert tiled.count("tile.prefetch ") == 2 and tiled.count("tile.prefetch.write ") == 1
    code = compilation.assembly()
    lines = 3 * m * m * 8 // 64
    assert 0 < code.count("prefetch") < lines // 4
    trips = r"prefetch\w*\t[^\n]*\n\taddq\t\$(\d+), %r\w+\n\tcmpq"  # a loop's last prefetch
    steps = {int(x) for x in re.findall(trips, code)}
    assert any(s % step == 0 for s in steps), steps  # whole lines or whole columns per trip


@pytest.mark.parametrize(
    "text",
    [batched("f32", 64, 64, 64), batched("f64", 192, 192, 192),
     batched("f32", 128, 128, 128, inputs="bf16"), batched("f32", 16, 16, 16, index="%i")],
    ids=["operands between a quarter of L1 and twice L1", "operands beyond a quarter of L2",
         "bf16 operands of a streamed size: packed", "views not picked by the group id"],
)  # fmt: skip
def test_no_prefetch_where_it_would_not_help(text: str) -> None:
    assert "tile.prefetch" not in compiled(text, "avx512").tiled()


@pytest.mark.parametrize(
    ("ty", "m", "n", "k", "ld"),
    [("f32", 20, 9, 20, None), ("f64", 20, 9, 20, None), ("f64", 64, 64, 64, None),
     ("f64", 72, 72, 72, 80)],
)  # fmt: skip
def test_results_with_prefetching(ty: str, m: int, n: int, k: int, ld: int | None, rng) -> None:
    dt = np.float32 if ty == "f32" else np.float64
    batch, rows = 7, ld or m
    a = np.asfortranarray(rng.uniform(-1, 1, (rows, k, batch)).astype(dt))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n, batch)).astype(dt))
    c = np.asfortranarray(rng.uniform(-1, 1, (rows, n, batch)).astype(dt))
    want = c.copy()
    want[:m] += np.einsum("mkb,knb->mnb", a[:m].astype(np.float64), b.astype(np.float64))
    compilation = compiled(batched(ty, m, n, k, ld=ld))
    assert "tile.prefetch" in compilation.tiled()
    for threads in (1, 2):
        got = c.copy(order="F")
        compilation["k"](a, b, got, group_size=batch, num_threads=threads)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_views_with_a_run_time_column_stride_are_prefetched(rng) -> None:
    """A's column stride known only at run time: the prefetch addresses are computed."""
    a_type = "memref<f32x8x8x?,strided<1,?,?>>"
    text = f"""func @k(%A: {a_type}, %B: memref<f32x8x8x?>, %C: memref<f32x8x8x?>) {{
  %g = group_id
  %a = subview %A[:,:,%g] : {a_type}
  %b = subview %B[:,:,%g] : memref<f32x8x8x?>
  %c = subview %C[:,:,%g] : memref<f32x8x8x?>
  gemm.n.n 1.0, %a, %b, 1.0, %c : f32, memref<f32x8x8,strided<1,?>>, memref<f32x8x8>, f32, memref<f32x8x8>
}}"""
    compilation = compiled(text)
    assert compilation.tiled().count("tile.prefetch") == 3
    batch = 5
    padded = np.asfortranarray(rng.uniform(-1, 1, (11, 8, batch)).astype(np.float32))
    a = padded[:8]  # column stride 11
    b = np.asfortranarray(rng.uniform(-1, 1, (8, 8, batch)).astype(np.float32))
    c = np.asfortranarray(rng.uniform(-1, 1, (8, 8, batch)).astype(np.float32))
    want = c + np.einsum("mkb,knb->mnb", a.astype(np.float64), b.astype(np.float64))
    compilation["k"](a, b, c, group_size=batch)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
