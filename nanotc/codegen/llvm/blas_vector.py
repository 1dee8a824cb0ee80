"""Vectorised axpby, hadamard, sum and gemv.t: memory-bound instructions as loops over full
target vectors along the contiguous mode, with one masked vector for the remainder.

They apply when the compute type is f32 or f64, every element type a float (16-bit ones are
widened on load and rounded on store), the update is not atomic, and every operand is
contiguous along the vectorised mode; otherwise the plain loop nests of `blas` run.
Reductions (sum, gemv.t) accumulate a vector of partial sums and add its lanes at the end,
so their rounding differs from a sequential sum (as BLAS implementations' does).
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from nanotc.codegen.llvm import vector as vec
from nanotc.codegen.llvm.emitter import FunctionEmitter
from nanotc.codegen.llvm.helpers import (
    as_value,
    carried_loop,
    element_ptr,
    for_range,
    memref_element,
    sub,
)
from nanotc.codegen.llvm.output import OutputUpdate, compute_type, write_output
from nanotc.codegen.llvm.types import Dim, MemrefValue, const, register_type
from nanotc.ir.instructions import BlasInstruction, Sum, Transpose
from nanotc.ir.types import ScalarType

VECTOR_TYPES = (ScalarType.F32, ScalarType.F64)


def applies(inst: BlasInstruction, contiguous: list[tuple[MemrefValue, int]]) -> bool:
    """Vector code fits: float compute type, no atomics, unit stride where it vectorises."""
    output: MemrefValue = contiguous[0][0]
    ct = compute_type(output.type.element)
    floats = all(m.type.element.is_float for m, _ in contiguous)
    unit = all(m.type.order == 0 or m.stride[mode] == 1 for m, mode in contiguous)
    return ct in VECTOR_TYPES and floats and unit and not inst.atomic


class VectorLoops:
    def __init__(self, e: FunctionEmitter, ct: ScalarType):
        self.e, self.b, self.ct = e, e.b, ct
        self.lanes = e.state.target.lanes(ct)
        self.type = vec.vector_type(register_type(ct), self.lanes)
        self.fused = e.state.target.fma

    def load(self, m: MemrefValue, offset: Dim, mask: ir.Value | None) -> ir.Value:
        element = m.type.element
        ptr = element_ptr(self.b, m.ptr, element, offset)
        raw = vec.load(self.b, vec.memory_vector(element, self.lanes), ptr, mask, element.size)
        return vec.to_register(self.b, raw, element, self.type)

    def each(self, n: Dim, body: Callable[[ir.Value, ir.Value | None], None]) -> None:
        """body(i, mask) for i = 0, L, 2L, ... covering n elements, the last one masked."""
        b, lanes = self.b, self.lanes
        main = n - n % lanes if isinstance(n, int) else sub(b, n, b.srem(n, const(lanes)))
        with for_range(b, 0, main, lanes, name="v") as i:
            body(i, None)
        if isinstance(n, int):
            if n % lanes:
                body(const(main), vec.static_mask(lanes, n % lanes))
            return
        rest = b.sub(n, as_value(b, main))
        with b.if_then(b.icmp_signed(">", rest, const(0))):
            body(as_value(b, main), vec.dynamic_mask(b, lanes, 0, rest))

    def reduce(self, n: Dim, term: Callable[[ir.Value, ir.Value | None], ir.Value]) -> ir.Value:
        """Sum over n elements of term(i, mask) vectors, as a scalar."""
        b, lanes = self.b, self.lanes
        main = n - n % lanes if isinstance(n, int) else sub(b, n, b.srem(n, const(lanes)))
        (acc,) = carried_loop(
            b, 0, main, lanes, [vec.zeros(self.type)],
            lambda i, acc: [b.fadd(acc[0], term(i, None))], name="r",
        )  # fmt: skip
        if isinstance(n, int):
            if n % lanes:
                acc = b.fadd(acc, term(const(main), vec.static_mask(lanes, n % lanes)))
        else:
            rest = b.sub(n, as_value(b, main))
            acc = b.fadd(acc, term(as_value(b, main), vec.dynamic_mask(b, lanes, 0, rest)))
        name = f"llvm.vector.reduce.fadd.{vec.suffix(self.type)}"
        return self._call_reassoc(name, [ir.Constant(self.type.element, 0.0), acc])

    def _call_reassoc(self, name: str, args: list[ir.Value]) -> ir.Value:
        fn = self.b.module.globals.get(name) or ir.Function(
            self.b.module, ir.FunctionType(self.type.element, [a.type for a in args]), name
        )
        return self.b.call(fn, args, fastmath=("reassoc",))

    def write(self, u: OutputUpdate, out: MemrefValue, offset: Dim, x: ir.Value,
              mask: ir.Value | None) -> None:  # fmt: skip
        """out[offset : offset+L] := alpha*x + beta*out (out not read when beta is 0)."""
        b = self.b
        element = out.type.element
        ptr = element_ptr(b, out.ptr, element, offset)
        value = b.fmul(x, vec.splat(b, u.alpha, self.lanes))
        if u.beta is not None:
            old = self.load(out, offset, mask)
            scaled = old if u.beta_is_one else b.fmul(old, vec.splat(b, u.beta, self.lanes))
            value = b.fadd(value, scaled)
        vec.store(b, vec.to_memory(b, value, element), ptr, mask, element.size)


def axpby(e: FunctionEmitter, a: MemrefValue, out: MemrefValue, u: OutputUpdate) -> None:
    v = VectorLoops(e, u.compute)
    if out.type.order == 1:
        v.each(out.shape[0], lambda i, mask: v.write(u, out, i, v.load(a, i, mask), mask))
        return
    with for_range(e.b, 0, out.shape[1], name="j") as j:
        a_col, out_col = _column(e, a, j), _column(e, out, j)
        v.each(out.shape[0], lambda i, mask: v.write(u, out_col, i, v.load(a_col, i, mask), mask))


def hadamard(
    e: FunctionEmitter, x: MemrefValue, y: MemrefValue, out: MemrefValue, u: OutputUpdate
) -> None:
    v = VectorLoops(e, u.compute)
    v.each(
        out.shape[0],
        lambda i, mask: v.write(u, out, i, e.b.fmul(v.load(x, i, mask), v.load(y, i, mask)), mask),
    )


def sum_(e: FunctionEmitter, inst: Sum, a: MemrefValue, out: MemrefValue, u: OutputUpdate) -> None:
    v, b = VectorLoops(e, u.compute), e.b
    if a.type.order == 1:
        total = v.reduce(a.shape[0], lambda i, mask: v.load(a, i, mask))
        write_output(b, u, out.ptr, total)
    elif inst.trans is Transpose.N:  # row sums: vectors of rows, accumulated over columns

        def rows(i: ir.Value, mask: ir.Value | None) -> None:
            (acc,) = carried_loop(
                b, 0, a.shape[1], 1, [vec.zeros(v.type)],
                lambda j, acc: [b.fadd(acc[0], v.load(_column(e, a, j), i, mask))], name="j",
            )  # fmt: skip
            v.write(u, out, i, acc, mask)

        v.each(out.shape[0], rows)
    else:  # column sums: one reduction along each contiguous column
        with for_range(b, 0, a.shape[1], name="j") as j:
            column = _column(e, a, j)
            total = v.reduce(a.shape[0], lambda i, mask: v.load(column, i, mask))
            write_output(b, u, memref_element(b, out, [j]), total)


def gemv_t(
    e: FunctionEmitter, a: MemrefValue, x: MemrefValue, out: MemrefValue, u: OutputUpdate
) -> None:
    """c(i) = alpha * sum_k A(k, i) x(k) + beta c(i): a dot product down each column of A."""
    v, b = VectorLoops(e, u.compute), e.b
    with for_range(b, 0, a.shape[1], name="i") as i:
        column = _column(e, a, i)
        total = v.reduce(
            a.shape[0], lambda k, mask: b.fmul(v.load(column, k, mask), v.load(x, k, mask))
        )
        write_output(b, u, memref_element(b, out, [i]), total)


def _column(e: FunctionEmitter, m: MemrefValue, j: ir.Value) -> MemrefValue:
    """Column j of a matrix, as a vector view."""
    return MemrefValue(m.type, memref_element(e.b, m, [0, j]), m.shape, m.stride)
