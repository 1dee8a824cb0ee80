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
from nanotc.codegen.llvm.helpers import carried_loop, for_range, memref_element, read
from nanotc.codegen.llvm.output import OutputUpdate, with_output_update, write_output
from nanotc.codegen.llvm.scalar import binary
from nanotc.codegen.llvm.types import Dim, MemrefValue, register_type
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


def reduction(
    b: ir.IRBuilder, count: Dim, init: ir.Value, step: Callable[[ir.Value, ir.Value], ir.Value]
) -> ir.Value:
    """acc = init; for k < count: acc = step(k, acc); the final acc."""
    (total,) = carried_loop(b, 0, count, 1, [init], lambda k, acc: [step(k, acc[0])], name="k")
    return total


def _zero(ct: ScalarType) -> ir.Constant:
    return ir.Constant(register_type(ct), 0)


def _mul_add(b: ir.IRBuilder, ct: ScalarType, acc: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
    return binary(b, BinaryOp.ADD, ct, acc, binary(b, BinaryOp.MUL, ct, x, y))


# -- the instructions ---------------------------------------------------------------------------


@emits(Axpby)
def _axpby(e: FunctionEmitter, inst: Axpby) -> None:
    a: MemrefValue = e.value(inst.a)
    out: MemrefValue = e.value(inst.b)
    b = e.b

    a_mode = 1 if inst.trans is Transpose.T and a.type.order == 2 else 0
    vectorised = blas_vector.applies(inst, [(out, 0), (a, a_mode)])

    def nest(u: OutputUpdate) -> None:
        if vectorised:
            blas_vector.axpby(e, a, out, u)
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

            write_output(b, u, memref_element(b, c, [i, j]), reduction(b, depth, _zero(ct), step))

    with_output_update(e, inst, c, nest)


@emits(Gemv)
def _gemv(e: FunctionEmitter, inst: Gemv) -> None:
    a: MemrefValue = e.value(inst.a)
    x: MemrefValue = e.value(inst.b)
    out: MemrefValue = e.value(inst.c)
    b = e.b
    depth = op_shape(inst.trans_a, a)[1]
    along_k = a if inst.trans_a is Transpose.T else blas_vector.transposed(a)  # op(A)^T
    vectorised: Callable[[OutputUpdate], None] | None = None
    if inst.trans_a is Transpose.N and blas_vector.gemv_n_applies(inst, out, a):
        vectorised = functools.partial(blas_vector.gemv_n, e, a, x, out)
    elif blas_vector.applies(inst, [(out, 0), (along_k, 0), (x, 0)]):
        vectorised = functools.partial(blas_vector.gemv_t, e, along_k, x, out)

    def nest(u: OutputUpdate) -> None:
        if vectorised is not None:
            vectorised(u)
            return
        ct = u.compute
        with for_range(b, 0, out.shape[0]) as i:

            def step(k: ir.Value, acc: ir.Value) -> ir.Value:
                aik = read(b, a, op_index(inst.trans_a, a, i, k), ct)
                return _mul_add(b, ct, acc, aik, read(b, x, [k], ct))

            write_output(b, u, memref_element(b, out, [i]), reduction(b, depth, _zero(ct), step))

    with_output_update(e, inst, out, nest)


@emits(Ger)
def _ger(e: FunctionEmitter, inst: Ger) -> None:
    x: MemrefValue = e.value(inst.a)
    y: MemrefValue = e.value(inst.b)
    out: MemrefValue = e.value(inst.c)
    b = e.b
    vectorised = blas_vector.applies(inst, [(out, 0), (x, 0)])

    def nest(u: OutputUpdate) -> None:
        if vectorised:
            blas_vector.ger(e, x, y, out, u)
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


@emits(Sum)
def _sum(e: FunctionEmitter, inst: Sum) -> None:
    a: MemrefValue = e.value(inst.a)
    out: MemrefValue = e.value(inst.b)
    b = e.b

    def add(ct: ScalarType) -> Callable[[ir.Value, ir.Value], ir.Value]:
        return lambda x, acc: binary(b, BinaryOp.ADD, ct, acc, x)

    vectorised = blas_vector.applies(inst, [(out, 0), (a, 0)])

    def nest(u: OutputUpdate) -> None:
        if vectorised:
            blas_vector.sum_(e, inst, a, out, u)
            return
        ct = u.compute
        if a.type.order == 1:
            total = reduction(
                b, a.shape[0], _zero(ct), lambda k, acc: add(ct)(read(b, a, [k], ct), acc)
            )
            write_output(b, u, memref_element(b, out, []), total)
            return
        rows, cols = op_shape(inst.trans, a)
        with for_range(b, 0, rows) as i:
            row_sum = reduction(
                b,
                cols,
                _zero(ct),
                lambda k, acc: add(ct)(read(b, a, op_index(inst.trans, a, i, k), ct), acc),
            )
            write_output(b, u, memref_element(b, out, [i]), row_sum)

    with_output_update(e, inst, out, nest)
