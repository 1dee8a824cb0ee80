"""Emission of `tile.pack` (copying a block of op(X) into panel-major scratch) and `tile.min`.

Packing converts to the target buffer's element type, so a nanokernel reading packed panels
always sees its compute type. Where the rows of op(X) are contiguous, a panel column is
copied with (masked) vector loads and stores; otherwise element by element.
"""

from __future__ import annotations

from llvmlite import ir

from nanotc.codegen.llvm import vector as vec
from nanotc.codegen.llvm.emitter import FunctionEmitter, emits
from nanotc.codegen.llvm.helpers import (
    add,
    as_value,
    convert,
    div,
    element_ptr,
    for_range,
    load_scalar,
    mul,
)
from nanotc.codegen.llvm.types import MemrefValue, const, register_type
from nanotc.ir.instructions import Transpose
from nanotc.ir.tile import TileMin, TilePack


@emits(TileMin)
def _min(e: FunctionEmitter, inst: TileMin) -> None:
    x, y = e.index_value(inst.lhs), e.index_value(inst.rhs)
    e.define(inst.result, e.b.select(e.b.icmp_signed("<", x, y), x, y))


@emits(TilePack)
def _pack(e: FunctionEmitter, inst: TilePack) -> None:
    b = e.b
    source: MemrefValue = e.value(inst.source)
    target: MemrefValue = e.value(inst.target)
    x = _PackedBlock(e, source, target, inst)
    panels = div(b, add(b, x.rows, inst.panel - 1), inst.panel)
    with for_range(b, 0, panels, name="panel") as q, for_range(b, 0, x.cols, name="k") as k:
        first_row = b.mul(q, const(inst.panel))
        valid = b.sub(as_value(b, x.rows), first_row)
        src, dst = x.source_column(first_row, k), x.target_column(first_row, k)
        if x.row_stride == 1:
            x.copy_vectors(src, dst, valid)
        else:
            x.copy_elements(src, dst, valid)


class _PackedBlock:
    """Addresses of one panel column in op(source) and in the packing buffer."""

    def __init__(self, e: FunctionEmitter, source: MemrefValue, target: MemrefValue,
                 inst: TilePack):  # fmt: skip
        b = self.b = e.b
        self.e, self.source, self.target, self.panel = e, source, target, inst.panel
        self.src_t, self.dst_t = source.type.element, target.type.element
        row_mode, col_mode = (1, 0) if inst.trans is Transpose.T else (0, 1)
        self.row_stride = source.stride[row_mode]
        self.col_stride = source.stride[col_mode]
        self.rows, self.cols = e.dim(inst.rows), e.dim(inst.cols)
        corner = add(
            b, mul(b, e.dim(inst.row), self.row_stride), mul(b, e.dim(inst.col), self.col_stride)
        )
        self.base = element_ptr(b, source.ptr, self.src_t, corner)

    def source_column(self, first_row: ir.Value, k: ir.Value) -> ir.Value:
        b = self.b
        offset = add(b, mul(b, first_row, self.row_stride), mul(b, k, self.col_stride))
        return element_ptr(b, self.base, self.src_t, offset)

    def target_column(self, first_row: ir.Value, k: ir.Value) -> ir.Value:
        """Panel q starts at q*panel*cols; its column k at + k*panel."""
        b = self.b
        offset = b.add(b.mul(first_row, as_value(b, self.cols)), b.mul(k, const(self.panel)))
        return element_ptr(b, self.target.ptr, self.dst_t, offset)

    def copy_vectors(self, src: ir.Value, dst: ir.Value, valid: ir.Value) -> None:
        b, lanes = self.b, self.e.state.target.lanes(self.dst_t)
        for v in range(0, self.panel, lanes):
            width = min(lanes, self.panel - v)
            t_in = vec.vector_type(register_type(self.src_t), width)
            t_out = vec.vector_type(register_type(self.dst_t), width)
            mask = vec.dynamic_mask(b, width, v, valid)
            loaded = vec.load(b, t_in, element_ptr(b, src, self.src_t, v), mask, self.src_t.size)
            out = element_ptr(b, dst, self.dst_t, v)
            b.store(vec.convert(b, loaded, t_out), out, align=self.dst_t.size)

    def copy_elements(self, src: ir.Value, dst: ir.Value, valid: ir.Value) -> None:
        b = self.b
        zero = ir.Constant(register_type(self.dst_t), 0)
        for i in range(self.panel):
            slot = element_ptr(b, dst, self.dst_t, i)
            with b.if_else(b.icmp_signed("<", const(i), valid)) as (inside, outside):
                with inside:
                    ptr = element_ptr(b, src, self.src_t, mul(b, i, self.row_stride))
                    value = load_scalar(b, ptr, self.src_t)
                    b.store(convert(b, value, self.src_t, self.dst_t), slot)
                with outside:
                    b.store(zero, slot)
