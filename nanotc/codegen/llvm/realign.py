"""Contiguous f32/f64 streams read with aligned vector loads and a lane permute (AVX-512).

A vector load that straddles two cache lines costs two, and numpy's large arrays start 16
bytes past a line, so every full-width load of a stream in such an array straddles one.
Element-wise loops peel the elements before the next boundary (`blas_vector.VectorLoops.lead`);
reductions cannot, since which elements share a partial sum would then depend on where the
stream lies, and a copy of the same data could sum to other bits. Here a stream keeps the
lanes an unaligned load would give it and loads only aligned vectors: with s elements of
another array before its start in its first aligned vector, its elements tL .. tL+L-1 are
lanes s.. of aligned vector t followed by lanes ..s-1 of aligned vector t+1, one
two-source permute (vpermt2ps, vpermt2pd). A loop carries each stream's last aligned vector
into its next step, so a step loads one aligned vector per stream.

Reading aligned vector t+1 for elements tL.. means a loop over them must stop a vector
before the stream ends; the first aligned vector is masked to the stream's own elements.

Where this pays was measured on Zen 4 (docs/benchmarks.md, "Realigned reductions only where
they pay"): a single stream of 16 KiB or more in an operand that fits L2, 1.03-1.15x
faster than split loads. Shorter streams do not pay back the setup (the masked first vector,
the permute's indices). From L3 and memory the permute and the add that wait for each line's
data leave fewer lines in flight than one add that loads, and the stream ran 0.57-0.75x the
rate of split loads. With several streams (gemv.t's columns and x) or short ones (the
columns of most column sums) it was slower at every size, so those read with split loads.
"""

from __future__ import annotations

import functools

from llvmlite import ir

from nanotc.codegen.llvm import vector as vec
from nanotc.codegen.llvm.helpers import compare_extent, intrinsic, on_element_boundary
from nanotc.codegen.llvm.types import I8, I32, I64, Dim, MemrefValue, const
from nanotc.ir.types import ScalarType
from nanotc.targets import Target

_PERMUTE = {
    ScalarType.F32: ("llvm.x86.avx512.vpermi2var.ps.512", I32),
    ScalarType.F64: ("llvm.x86.avx512.vpermi2var.pd.512", I64),
}


MIN_STREAM_BYTES = 16 * 1024  # shorter streams do not pay back the realigned loop's setup


def applies(target: Target, streams: list[MemrefValue], compute: ScalarType) -> bool:
    """Full 512-bit vectors, and one stream, of the compute type (f32 or f64)."""
    avx512 = target.vector_bits == 512 and target.masked_memory
    one = len(streams) == 1 and streams[0].type.element is compute
    return avx512 and compute in _PERMUTE and one


def pays(b: ir.IRBuilder, target: Target, stream: Dim, operand: Dim, element: ScalarType
         ) -> bool | ir.Value:  # fmt: skip
    """Whether realigning a stream of `stream` elements, read from an operand of `operand`
    elements, pays (see the module docstring): the stream holds MIN_STREAM_BYTES or more,
    and the operand fits L2. A bool where both extents are static, else an i1."""
    conditions = [
        compare_extent(b, ">=", stream, -(-MIN_STREAM_BYTES // element.size)),
        compare_extent(b, "<=", operand, target.l2_bytes // element.size),
    ]
    if False in conditions:
        return False
    dynamic = [c for c in conditions if c is not True]
    return functools.reduce(b.and_, dynamic) if dynamic else True


class RealignedStream:
    """One contiguous stream's aligned vectors and how to permute them into its own."""

    def __init__(self, b: ir.IRBuilder, stream: MemrefValue, t: ir.VectorType):
        self.b, self.t = b, t
        self.element = stream.type.element
        self.lanes = t.count
        size = self.element.size
        vector_bytes = self.lanes * size
        address = b.ptrtoint(stream.ptr, I64)
        offset = b.and_(address, const(vector_bytes - 1))  # bytes past the aligned vector
        self.element_aligned = on_element_boundary(b, stream)
        self.moved = b.icmp_unsigned("!=", offset, const(0))
        self.shift = b.lshr(offset, const(size.bit_length() - 1))
        # not `inbounds`: the aligned vector starts before the stream, maybe in another array
        self.base = b.gep(stream.ptr, [b.neg(offset)], source_etype=I8)
        self.permute, index = _PERMUTE[self.element]
        iota = ir.Constant(vec.vector_type(index, self.lanes), list(range(self.lanes)))
        shift = self.shift if index is I64 else b.trunc(self.shift, index)
        self.index = b.add(iota, vec.splat(b, shift, self.lanes))  # lanes s .. s+L-1 of two

    def first(self) -> ir.Value:
        """Aligned vector 0, holding only the stream's own elements: for a loop that runs,
        whose stream has a vector's elements and more."""
        b = self.b
        iota = ir.Constant(vec.vector_type(I32, self.lanes), list(range(self.lanes)))
        mask = b.icmp_unsigned(">=", iota, vec.splat(b, b.trunc(self.shift, I32), self.lanes))
        return vec.load(b, self.t, self.base, mask, self.lanes * self.element.size)

    def aligned(self, offset: ir.Value) -> ir.Value:
        """The aligned vector holding the lanes an unaligned load at element `offset - L`
        (a multiple of L) would take from the next line: aligned vector offset / L."""
        ptr = self.b.gep(self.base, [offset], source_etype=self.t.element)
        return self.b.load(ptr, typ=self.t, align=self.lanes * self.element.size)

    def vector(self, low: ir.Value, high: ir.Value) -> ir.Value:
        """Elements tL .. tL+L-1 from aligned vectors t (`low`) and t+1 (`high`)."""
        return intrinsic(self.b, self.permute, self.t, [low, self.index, high])
