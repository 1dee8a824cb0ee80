"""Floating-point operation counts of kernels, for reporting GFLOP/s and for sizing the
chunks of a launch's threads (`gemm_work_per_group`).

BLAS conventions: gemm 2MNK, gemv 2MK, ger 2MN, axpby and hadamard 2 per element, sum 1 per
element. Loops multiply their body by the trip count. Sizes that are dynamic are looked up in
`sizes` (parameter name -> mode -> size, filled from the launch arguments); a count that
needs an unknown size or trip count is None.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from nanotc.ir.core import Function, Instruction, Region
from nanotc.ir.instructions import (
    ArithBinary,
    ArithUnary,
    Axpby,
    BlasInstruction,
    Cast,
    Cmp,
    For,
    Foreach,
    Gemm,
    Gemv,
    Ger,
    Hadamard,
    If,
    Load,
    Store,
    Sum,
    Transpose,
)
from nanotc.ir.types import MemRefType
from nanotc.ir.values import Constant, Value

Sizes = Mapping[int, tuple[int, ...]]
"""id(value) -> concrete shape, for memrefs whose type has dynamic sizes."""


def flops_per_group(func: Function, shapes: Sizes) -> int | None:
    return _region(func.body, shapes)


def gemm_work_per_group(func: Function) -> tuple[int, int] | None:
    """The FLOPs of a work-group and the bytes of the widest element of the Cs its gemms
    write, for a kernel whose only work is gemms of static shapes (in loops of static trip
    counts, with scalar code only outside loops); None for any other kernel, whose time
    FLOPs do not tell (memory-bound BLAS 1 and 2 instructions, scalar loops, run-time
    sizes). The launcher sizes its threads' chunks by it (`launcher.chunk_groups`)."""
    gemms = list(_gemms_only(func.body, looped=False))
    flops = flops_per_group(func, {})
    if None in gemms or not gemms or flops is None:
        return None
    return flops, max(g.c.type.element.size for g in gemms if g is not None)


_SCALAR_WORK = (Load, Store, ArithBinary, ArithUnary, Cast, Cmp)


def _gemms_only(region: Region, looped: bool) -> Iterator[Gemm | None]:
    """The region's gemms, with None for each instruction of other work (`gemm_work_per_group`)."""
    for inst in region.instructions:
        if isinstance(inst, Gemm):
            yield inst
        elif isinstance(inst, BlasInstruction) or (looped and isinstance(inst, _SCALAR_WORK)):
            yield None
        for inner in inst.regions():
            yield from _gemms_only(inner, looped or isinstance(inst, For | Foreach))


def _region(region: Region, shapes: Sizes) -> int | None:
    total = 0
    for inst in region.instructions:
        count = _instruction(inst, shapes)
        if count is None:
            return None
        total += count
    return total


def _instruction(inst: Instruction, shapes: Sizes) -> int | None:
    if isinstance(inst, For | Foreach):
        trips = _trip_count(inst)
        body = _region(inst.body, shapes)
        return None if trips is None or body is None else trips * body
    if isinstance(inst, If):
        arms = [_region(r, shapes) for r in inst.regions()]
        return None if None in arms else max(arms, default=0)  # type: ignore[type-var]
    shape = _shape_lookup(shapes)
    if isinstance(inst, Gemm):
        a, c = shape(inst.a), shape(inst.c)
        if a is None or c is None:
            return None
        depth = a[0] if inst.trans_a is Transpose.T else a[1]
        return 2 * c[0] * c[1] * depth
    if isinstance(inst, Gemv):
        a = shape(inst.a)
        return None if a is None else 2 * a[0] * a[1]
    if isinstance(inst, Ger | Hadamard | Axpby):
        out = shape(inst.output())
        return None if out is None else 2 * math.prod(out)
    if isinstance(inst, Sum):
        a = shape(inst.a)
        return None if a is None else math.prod(a)
    return 0


def _trip_count(inst: For | Foreach) -> int | None:
    start, stop = inst.start, inst.stop
    step = inst.step if isinstance(inst, For) else None
    values = [v.value if isinstance(v, Constant) else None for v in (start, stop)]
    step_value = 1 if step is None else step.value if isinstance(step, Constant) else None
    if None in values or step_value is None:
        return None
    lo, hi = values
    return max(0, -(-(hi - lo) // step_value))  # type: ignore[operator]


def _shape_lookup(shapes: Sizes):  # type: ignore[no-untyped-def]
    def shape(value: Value) -> tuple[int, ...] | None:
        t = value.type
        assert isinstance(t, MemRefType)
        if None not in t.shape:
            return t.shape  # type: ignore[return-value]
        return shapes.get(id(value))

    return shape
