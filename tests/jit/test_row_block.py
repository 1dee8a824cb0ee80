"""Tiles whose C is one block of memory in row-major order (`nanokernel.RowBlock`): which
tiles store their columns interleaved as whole vectors, and the run-time test of a row
stride in a batch-reduce tile's epilogue, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from nanotc.ir.types import MemRefType, ScalarType
from nanotc.lowering.nanokernel import RowBlock, c_row_block

from .helpers import compiled


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


def test_which_tiles_store_row_blocks() -> None:
    """Static row strides equal to the tile's columns, or run-time ones; not 3 columns,
    adjacent rows, apart columns, or tiles the caller excludes."""
    f32 = ScalarType.F32

    def block(stride: tuple[int | None, int | None], columns: int, excluded: bool = False):
        return c_row_block(MemRefType(f32, (None, columns), stride), columns, excluded)

    assert block((4, 1), 4) is RowBlock.YES
    assert block((2, 1), 2) is RowBlock.YES
    assert block((None, 1), 1) is RowBlock.TESTED
    assert block((None, 1), 4, excluded=True) is RowBlock.NO
    assert block((3, 1), 3) is RowBlock.NO
    assert block((None, 1), 3) is RowBlock.NO
    assert block((8, 1), 4) is RowBlock.NO
    assert block((1, None), 4) is RowBlock.NO
    assert block((None, 2), 2) is RowBlock.NO
