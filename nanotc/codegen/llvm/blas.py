"""Collective linear algebra as loop nests: axpby, gemm, gemv, ger, hadamard, sum.

This is the always-correct lowering; where they apply, full-width vector loops
(`blas_vector`) and the GEMM nanokernels of `nanotc.lowering` replace it. Every output
element is written once through `output.write_output`, which owns alpha/beta/atomic.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from llvmlite import ir

from nanotc.codegen.llvm import blas_vector
from nanotc.codegen.llvm.emitter import FunctionEmitter, emits
from nanotc.codegen.llvm.helpers import (
    carried_loop,
    for_range,
    memref_element,
    read,
    round_down,
)
from nanotc.codegen.llvm.output import OutputUpdate, with_output_update, write_output
from nanotc.codegen.llvm.scalar import binary
from nanotc.codegen.llvm.types import Dim, MemrefValue, const, register_type, transposed
from nanotc.ir.instructions import (
    Axpby,
    BinaryOp,
    Gemm,
    Gemv,
    Ger,
    Hadamard,
    Sum,
    Transpose,
)
from nanotc.ir.types import ScalarType

# -- element access ---------------------------------------------------------------------------


def op_index(trans: Transpose, m: MemrefValue, i: Dim, j: Dim) -> list[Dim]:
    """Indices of element (i, j) of op(m)."""
    return [j, i] if trans is Transpose.T else [i, j]


def op_shape(trans: Transpose, m: MemrefValue) -> tuple[Dim, Dim]:
    rows, cols = m.shape
    return (cols, rows) if trans is Transpose.T else (rows, cols)


# partial sums a scalar reduction keeps: each add waits on the last (3 cycles on Zen 4), and
# with one sum a strided f32 vector in L2 was summed at 4.7 GB/s
SCALAR_CHAINS = 4


def reduction(
    b: ir.IRBuilder, ct: ScalarType, count: Dim, step: Callable[[ir.Value, ir.Value], ir.Value]
) -> ir.Value:
    """The sum of what step(k, acc) adds to acc for each k < count: k in SCALAR_CHAINS
    partial sums (by k modulo SCALAR_CHAINS, the last few k in the first), added at the end."""

    def chunk(k: ir.Value, sums: list[ir.Value]) -> list[ir.Value]:
        return [step(b.add(k, const(c)), total) for c, total in enumerate(sums)]

    main = round_down(b, count, SCALAR_CHAINS)
    sums = carried_loop(b, 0, main, SCALAR_CHAINS, [_zero(ct)] * SCALAR_CHAINS, chunk, name="k")
    rest = lambda k, acc: [step(k, acc[0])]  # noqa: E731 - the loop's body
    sums[0] = carried_loop(b, main, count, 1, [sums[0]], rest, name="k.rest")[0]
    while len(sums) > 1:
        sums = [binary(b, BinaryOp.ADD, ct, x, y) for x, y in zip(sums[::2], sums[1::2])]
    return sums[0]


def _zero(ct: ScalarType) -> ir.Constant:
    return ir.Constant(register_type(ct), 0)


def _mul_add(b: ir.IRBuilder, ct: ScalarType, acc: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
    return binary(b, BinaryOp.ADD, ct, acc, binary(b, BinaryOp.MUL, ct, x, y))


# -- the instructions ---------------------------------------------------------------------------


def _vector_axpby(e: FunctionEmitter, inst: Axpby, a: MemrefValue, out: MemrefValue
                  ) -> Callable[[OutputUpdate], None] | None:  # fmt: skip
    """The vector loops of an axpby, where they apply: on op(A) and out where the columns of
    both are contiguous, on their transposes where their rows are (row-major), and
    transposing blocks in registers where one's columns and the other's rows are."""
    if a.type.order == 1:
        if blas_vector.applies(inst, [(out, 0), (a, 0)]):
            return functools.partial(blas_vector.axpby, e, a, out)
        return None
    op_a = transposed(a) if inst.trans is Transpose.T else a
    op_a_t, out_t = transposed(op_a), transposed(out)
    for loops, x, y in [
        (blas_vector.axpby, op_a, out),
        (blas_vector.axpby, op_a_t, out_t),
        (blas_vector.transposed_axpby, op_a_t, out),
        (blas_vector.transposed_axpby, op_a, out_t),
    ]:
        if blas_vector.applies(inst, [(y, 0), (x, 0)]):
            return functools.partial(loops, e, x, y)
    return None


@emits(Axpby)
def _axpby(e: FunctionEmitter, inst: Axpby) -> None:
    a: MemrefValue = e.value(inst.a)
    out: MemrefValue = e.value(inst.b)
    b = e.b

    vectorised = _vector_axpby(e, inst, a, out)

    def nest(u: OutputUpdate) -> None:
        if vectorised is not None:
            vectorised(u)
            return
        if out.type.order == 1:
            with for_range(b, 0, out.shape[0]) as i:
                write_output(b, u, memref_element(b, out, [i]), read(b, a, [i], u.compute))
            return
        with for_range(b, 0, out.shape[1], name="j") as j, for_range(b, 0, out.shape[0]) as i:
            x = read(b, a, op_index(inst.trans, a, i, j), u.compute)
            write_output(b, u, memref_element(b, out, [i, j]), x)

    with_output_update(e, inst, out, nest)


@emits(Gemm)
def _gemm(e: FunctionEmitter, inst: Gemm) -> None:
    a: MemrefValue = e.value(inst.a)
    bm: MemrefValue = e.value(inst.b)
    c: MemrefValue = e.value(inst.c)
    b = e.b
    depth = op_shape(inst.trans_a, a)[1]

    def nest(u: OutputUpdate) -> None:
        ct = u.compute
        with for_range(b, 0, c.shape[1], name="j") as j, for_range(b, 0, c.shape[0]) as i:

            def step(k: ir.Value, acc: ir.Value) -> ir.Value:
                x = read(b, a, op_index(inst.trans_a, a, i, k), ct)
                y = read(b, bm, op_index(inst.trans_b, bm, k, j), ct)
                return _mul_add(b, ct, acc, x, y)

            write_output(b, u, memref_element(b, c, [i, j]), reduction(b, ct, depth, step))

    with_output_update(e, inst, c, nest)


@emits(Gemv)
def _gemv(e: FunctionEmitter, inst: Gemv) -> None:
    a: MemrefValue = e.value(inst.a)
    x: MemrefValue = e.value(inst.b)
    out: MemrefValue = e.value(inst.c)
    b = e.b
    depth = op_shape(inst.trans_a, a)[1]
    op_a = transposed(a) if inst.trans_a is Transpose.T else a
    rows = transposed(op_a)  # op(A)'s rows as columns
    vectorised: Callable[[OutputUpdate], None] | None = None
    if blas_vector.gemv_n_applies(inst, out, op_a):  # axpys down op(A)'s columns
        vectorised = functools.partial(blas_vector.gemv_n, e, op_a, x, out)
    elif blas_vector.applies(inst, [(out, 0), (rows, 0), (x, 0)]):  # dots along its rows
        vectorised = functools.partial(blas_vector.gemv_t, e, rows, x, out)

    def nest(u: OutputUpdate) -> None:
        if vectorised is not None:
            vectorised(u)
            return
        ct = u.compute
        with for_range(b, 0, out.shape[0]) as i:

            def step(k: ir.Value, acc: ir.Value) -> ir.Value:
                aik = read(b, a, op_index(inst.trans_a, a, i, k), ct)
                return _mul_add(b, ct, acc, aik, read(b, x, [k], ct))

            write_output(b, u, memref_element(b, out, [i]), reduction(b, ct, depth, step))

    with_output_update(e, inst, out, nest)


@emits(Ger)
def _ger(e: FunctionEmitter, inst: Ger) -> None:
    x: MemrefValue = e.value(inst.a)
    y: MemrefValue = e.value(inst.b)
    out: MemrefValue = e.value(inst.c)
    b = e.b
    vectorised: Callable[[OutputUpdate], None] | None = None
    if blas_vector.applies(inst, [(out, 0), (x, 0)]):
        vectorised = functools.partial(blas_vector.ger, e, x, y, out)
    elif blas_vector.applies(inst, [(transposed(out), 0), (y, 0)]):  # a row-major C: C^T += y x^T
        vectorised = functools.partial(blas_vector.ger, e, y, x, transposed(out))

    def nest(u: OutputUpdate) -> None:
        if vectorised is not None:
            vectorised(u)
            return
        ct = u.compute
        with for_range(b, 0, out.shape[1], name="j") as j:
            yj = read(b, y, [j], ct)
            with for_range(b, 0, out.shape[0]) as i:
                xy = binary(b, BinaryOp.MUL, ct, read(b, x, [i], ct), yj)
                write_output(b, u, memref_element(b, out, [i, j]), xy)

    with_output_update(e, inst, out, nest)


@emits(Hadamard)
def _hadamard(e: FunctionEmitter, inst: Hadamard) -> None:
    x: MemrefValue = e.value(inst.a)
    y: MemrefValue = e.value(inst.b)
    out: MemrefValue = e.value(inst.c)
    b = e.b
    vectorised = blas_vector.applies(inst, [(out, 0), (x, 0), (y, 0)])

    def nest(u: OutputUpdate) -> None:
        if vectorised:
            blas_vector.hadamard(e, x, y, out, u)
            return
        ct = u.compute
        with for_range(b, 0, out.shape[0]) as i:
            xy = binary(b, BinaryOp.MUL, ct, read(b, x, [i], ct), read(b, y, [i], ct))
            write_output(b, u, memref_element(b, out, [i]), xy)

    with_output_update(e, inst, out, nest)


def _vector_sums(e: FunctionEmitter, inst: Sum, a: MemrefValue, out: MemrefValue
                 ) -> Callable[[OutputUpdate], None] | None:  # fmt: skip
    """The vector loops of a sum, where they apply. A matrix's sums are the row sums of
    `summed` (A, or A^T for sum.t): passes down its columns where they are contiguous and
    out holds the compute type, else sums down the columns of its transpose where those are
    contiguous, else vectors of its rows summed across its columns."""
    if a.type.order == 1:
        if blas_vector.applies(inst, [(out, 0), (a, 0)]):
            return functools.partial(blas_vector.sum_, e, Transpose.N, a, out)
        return None
    summed = a if inst.trans is Transpose.N else transposed(a)
    if blas_vector.gemv_n_applies(inst, out, summed):
        return functools.partial(blas_vector.row_sums, e, summed, out)
    if blas_vector.applies(inst, [(out, 0), (transposed(summed), 0)]):
        return functools.partial(blas_vector.sum_, e, Transpose.T, transposed(summed), out)
    if blas_vector.applies(inst, [(out, 0), (summed, 0)]):
        return functools.partial(blas_vector.sum_, e, Transpose.N, summed, out)
    return None


@emits(Sum)
def _sum(e: FunctionEmitter, inst: Sum) -> None:
    a: MemrefValue = e.value(inst.a)
    out: MemrefValue = e.value(inst.b)
    b = e.b

    def add(ct: ScalarType) -> Callable[[ir.Value, ir.Value], ir.Value]:
        return lambda x, acc: binary(b, BinaryOp.ADD, ct, acc, x)

    vectorised = _vector_sums(e, inst, a, out)

    def nest(u: OutputUpdate) -> None:
        if vectorised is not None:
            vectorised(u)
            return
        ct = u.compute
        if a.type.order == 1:
            total = reduction(b, ct, a.shape[0], lambda k, acc: add(ct)(read(b, a, [k], ct), acc))
            write_output(b, u, memref_element(b, out, []), total)
            return
        rows, cols = op_shape(inst.trans, a)
        with for_range(b, 0, rows) as i:
            row_sum = reduction(
                b,
                ct,
                cols,
                lambda k, acc: add(ct)(read(b, a, op_index(inst.trans, a, i, k), ct), acc),
            )
            write_output(b, u, memref_element(b, out, [i]), row_sum)

    with_output_update(e, inst, out, nest)
