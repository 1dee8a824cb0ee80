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
"""

from __future__ import annotations

from llvmlite import ir

from nanotc.codegen.llvm import vector as vec
from nanotc.codegen.llvm.helpers import intrinsic
from nanotc.codegen.llvm.types import I8, I32, I64, MemrefValue, const
from nanotc.ir.types import ScalarType
from nanotc.targets import Target

_PERMUTE = {
    ScalarType.F32: ("llvm.x86.avx512.vpermi2var.ps.512", I32),
    ScalarType.F64: ("llvm.x86.avx512.vpermi2var.pd.512", I64),
}


def applies(target: Target, streams: list[MemrefValue], compute: ScalarType) -> bool:
    """Full 512-bit vectors, and every stream holds the compute type (f32 or f64)."""
    avx512 = target.vector_bits == 512 and target.masked_memory
    return avx512 and compute in _PERMUTE and all(s.type.element is compute for s in streams)


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
        self.element_aligned = b.icmp_unsigned("==", b.and_(address, const(size - 1)), const(0))
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
