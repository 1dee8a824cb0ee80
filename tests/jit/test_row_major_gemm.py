"""Gemms into a row-major C (`strided<?,1>`) compute their transposed problem into C's
transposed view (`lowering.row_major`): C^T := alpha op(B)^T op(A)^T + beta C^T. Every
transpose and layout of A and B, static and run-time sizes, alpha and beta as literals and
launch arguments, a batch of members, an atomic gemm, against the reference interpreter and
numpy; and the gemms that keep their C."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import nanotc
from nanotc.codegen.llvm.nanokernel import NanokernelEmitter
from nanotc.tuning.tuner import gemm_sites

from .blas_cases import Case, run_case
from .helpers import TARGETS, ZEN4, compiled

ROW_MAJOR = "memref<f32x?x?,strided<?,1>>"


def gemm_text(ta: str, tb: str, types: tuple[str, str, str], atomic: str = "",
              beta: float = 0.5) -> str:  # fmt: skip
    a, b, c = types
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.{ta}.{tb}{atomic} 1.0, %A, %B, {beta}, %C : f32, {a}, {b}, f32, {c}
}}"""


@pytest.mark.parametrize(("ta", "tb"), list(itertools.product("nt", repeat=2)), ids="".join)
def test_a_row_major_c_takes_the_transposed_problem(ta: str, tb: str) -> None:
    """The gemm reads B as its A and A as its B, each transpose flipped, into C's transposed
    view: a gemm into a column-major C, whose tiles store whole columns (the tuner sees the
    same gemm)."""
    text = gemm_text(ta, tb, (ROW_MAJOR,) * 3)
    tiled = compiled(text, ZEN4).tiled()
    assert "tile.transposed %C : memref<f32x?x?,strided<?,1>>" in tiled
    arrays = [np.empty((64, 64), np.float32) for _ in range(3)]
    (site,) = gemm_sites(nanotc.load(text).function("k"), ZEN4, arrays)
    flip = {"n": "t", "t": "n"}
    assert f" {flip[tb]}.{flip[ta]} " in site.key


def test_column_major_c_and_batch_reduce_loops_keep_their_c() -> None:
    """A column-major C, or one whose row stride is not known to be 1, is left as it is (its
    register tiles write it; only a C of a few rows that is one block of memory is transposed,
    `test_row_block`); so is the C of a batch-reduce loop, which its tiles hold in registers
    across the loop."""
    for c in ["memref<f32x?x?>", "memref<f32x?x?,strided<?,?>>"]:
        tiled = compiled(gemm_text("n", "n", (ROW_MAJOR, ROW_MAJOR, c))).tiled()
        assert "tile.transposed %C :" not in tiled and "tile.gemm" in tiled
    m = "memref<f32x8x8x?>"
    one = "memref<f32x8x8>"
    c = "memref<f32x8x8,strided<?,1>>"
    text = f"""func @k(%A: {m}, %B: {m}, %C: {c}, %n: index) {{
  for %i = 0, %n {{
    %a = subview %A[:, :, %i] : {m}
    %b = subview %B[:, :, %i] : {m}
    gemm.n.n 1.0, %a, %b, 1.0, %C : f32, {one}, {one}, f32, {c}
  }}
}}"""
    tiled = compiled(text).tiled()
    assert "tile.batch_gemm" in tiled and "tile.transposed" not in tiled


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("ta", "tb"), list(itertools.product("nt", repeat=2)), ids="".join)
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_row_major_c_matches_numpy(ty: str, ta: str, tb: str, target: str, rng) -> None:
    """Run-time sizes around the tiles' edges, A and B row-major or not, alpha and beta
    launch arguments (beta 0 never reads C)."""
    for layouts in [("rowmajor", "rowmajor", "rowmajor"), ("dynamic", "strided", "rowmajor")]:
        case = Case("gemm", (ta, tb), (ty,) * 3, ty, layouts)
        run_case(case, target, rng, [(1, 1, 1), (17, 5, 33), (40, 70, 9), (130, 3, 64)])


@pytest.mark.parametrize("target", TARGETS)
def test_row_major_c_of_static_size_and_atomic(target: str, rng) -> None:
    """A static C with a run-time row stride; an atomic gemm into a row-major C from several
    threads (every work-group adds its product to the same C)."""
    c = "memref<f32x7x13,strided<?,1>>"
    text = gemm_text("n", "t", ("memref<f32x7x9>", "memref<f32x13x9>", c))
    a = np.asfortranarray(rng.uniform(-1, 1, (7, 9)).astype(np.float32))
    b = np.asfortranarray(rng.uniform(-1, 1, (13, 9)).astype(np.float32))
    out = rng.uniform(-1, 1, (7, 13)).astype(np.float32)  # C order
    want = a.astype(np.float64) @ b.T + 0.5 * out
    compiled(text, target)["k"](a, b, out, group_size=1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    atomic = compiled(gemm_text("n", "n", (ROW_MAJOR,) * 3, ".atomic", 1.0), target)["k"]
    a = rng.uniform(-1, 1, (20, 30)).astype(np.float32)
    b = rng.uniform(-1, 1, (30, 11)).astype(np.float32)
    out = np.zeros((20, 11), np.float32)
    atomic(a, b, out, group_size=8, num_threads=2)
    np.testing.assert_allclose(out, 8 * (a.astype(np.float64) @ b), rtol=1e-4, atol=1e-4)


def members_text(m: int, n: int, k: int, ty: str) -> str:
    """C_g := A_g B_g of static sizes on numpy's (batch, rows, columns) arrays: every stride
    a run-time one."""
    a, b, c = (f"memref<{ty}x{r}x{s}x?,strided<?,1,?>>" for r, s in ((m, k), (k, n), (m, n)))
    am, bm, cm = (f"memref<{ty}x{r}x{s},strided<?,1>>" for r, s in ((m, k), (k, n), (m, n)))
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  %g = group_id
  %a = subview %A[:, :, %g] : {a}
  %b = subview %B[:, :, %g] : {b}
  %c = subview %C[:, :, %g] : {c}
  gemm.n.n 1.0, %a, %b, 0.0, %c : {ty}, {am}, {bm}, {ty}, {cm}
}}"""


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_members_of_run_time_strides_in_wide_tiles_match_numpy(ty: str, target: str,
                                                              rng) -> None:  # fmt: skip
    """Tiles wider than a register per column and K steps past eight, whose columns of C and
    steps of A address from groups of four (`NanokernelEmitter._groups_c`, `resident_a`):
    group edges at 9, 12, 13, 16 and 17."""
    dtype = np.float32 if ty == "f32" else np.float64
    for m, n, k in [(16, 16, 16), (56, 9, 9), (9, 13, 17), (20, 12, 12)]:
        a, b = (rng.uniform(-1, 1, (5, *s)).astype(dtype) for s in ((m, k), (k, n)))
        c = np.full((5, m, n), np.nan, dtype)
        views = [x.transpose(1, 2, 0) for x in (a, b, c)]
        compiled(members_text(m, n, k, ty), target)["k"](*views, group_size=5)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("shape", "grouping"), [((56, 9, 9), "_groups_c"), ((16, 16, 16), "_groups_a")]
)
def test_run_time_strides_in_wide_tiles_spill_less(shape: tuple[int, int, int], grouping: str,
                                                   monkeypatch) -> None:  # fmt: skip
    """Nine columns of C, or sixteen k steps of a resident A, a run-time stride apart address
    from group bases plus up to three strides: from one base, LLVM kept every column's (k
    step's) multiple of the stride live through the work-group loop and spilled them (f32
    members on AVX-512, 2026-11-30: 56x9x9 58 stack references against 94; 16^3 84 against
    97)."""
    text = members_text(*shape, "f32")
    grouped = nanotc.compile(text, target="avx512", cache=False).assembly().count("(%rsp)")
    monkeypatch.setattr(NanokernelEmitter, grouping, lambda *_: False)
    plain = nanotc.compile(text, target="avx512", cache=False).assembly().count("(%rsp)")
    assert grouped < plain
