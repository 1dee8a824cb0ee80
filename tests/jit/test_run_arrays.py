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
