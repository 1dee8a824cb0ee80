"""The random arrays `nanotc run` makes for a kernel's parameters follow their types' layouts."""

from __future__ import annotations

import numpy as np

from nanotc.check import load
from nanotc.cli.run import layout_strides, make_arguments
from nanotc.ir.types import GroupType, MemRefType
from nanotc.runtime.arguments import bind_group, bind_memref

from .test_cli_run import STRIDED_KERNEL


def test_static_strides_are_kept_and_the_batch_axis_never_overlaps_a_member() -> None:
    func = load(STRIDED_KERNEL).functions[0]
    a, b, c = make_arguments(func, 6, {}, np.random.default_rng(0))
    assert [s // 4 for s in a.strides] == [1, 7, 26]  # a member spans 1 + 4 * 1 + 3 * 7 elements
    assert [s // 4 for s in b.strides] == [1, 6]
    assert [s // 4 for s in c.strides] == [2, 11, 31]
    types = [p.type for p in func.arguments]
    assert isinstance(types[1], MemRefType) and isinstance(types[0], GroupType)
    bind_memref("B", types[1], b)  # the launch accepts them as they are
    bind_group("A", types[0], a)
    bind_group("C", types[2], c)


def test_dynamic_strides_are_packed_column_major() -> None:
    t = load("func @k(%X: memref<f64x?x?x?>) {}").functions[0].arguments[0].type
    assert isinstance(t, MemRefType)
    assert layout_strides(t, (3, 0, 5)) == (1, 3, 3)
    assert layout_strides(t, (3, 4, 5)) == (1, 3, 12)


def test_dynamic_strides_go_past_the_static_ones() -> None:
    """A row-major type (`strided<?,1>`): its static stride 1 places the rows, so the run-time
    stride goes past a row (counting only the modes before it gave (1, 1), rows on top of
    each other, which binding refused: `nanotc run` could not run a row-major kernel)."""
    kernel = (
        """func @k(%X: memref<f32x?x?,strided<?,1>>, %Y: memref<f32x8x4x?,strided<?,1,?>>) {}"""
    )
    x, y = (p.type for p in load(kernel).functions[0].arguments)
    assert isinstance(x, MemRefType) and isinstance(y, MemRefType)
    assert layout_strides(x, (3, 4)) == (4, 1)
    assert layout_strides(y, (8, 4, 5)) == (4, 1, 32)
    func = load(kernel).functions[0]
    arrays = make_arguments(func, 1, {"X.0": 3, "X.1": 4, "Y.2": 5}, np.random.default_rng(0))
    bind_memref("X", x, arrays[0])
    bind_memref("Y", y, arrays[1])
