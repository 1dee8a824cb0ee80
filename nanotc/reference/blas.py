"""Evaluation of the collective linear-algebra instructions, vectorised with numpy:

    axpby     B := alpha * op(A) + beta * B            (A, B vectors or matrices)
    gemm      C := alpha * op1(A) op2(B) + beta * C
    gemv      c := alpha * op1(A) b + beta * c
    ger       C := alpha * a b^T + beta * C
    hadamard  c := alpha * (a .* b) + beta * c
    sum       b := alpha * op(A) ones + beta * b     (A a matrix: row sums of op(A))
              b[] := alpha * sum(a) + beta * b[]    (a a vector, b of order 0)

op(X) is X^T for `.t` on a matrix and X otherwise (`.t` has no effect on vectors).

Arithmetic: the compute type is the output's element type, except that f16 and bf16 outputs
compute in f32. The inputs, alpha and beta are converted to the compute type first (with the
cast rules of `nanotc.ir.conversions`), the product term P is formed and the update
alpha * P + beta * out is computed in the compute type, and the result is converted (rounded,
or wrapped for integers) to the output type when stored. Integer compute types are evaluated in
int64, whose wrap-around agrees with the narrower type's modulo 2^bits. Floating-point sums may
be accumulated in another order than the native code's (numpy's pairwise summation and BLAS).

When beta, converted to the compute type, equals 0 the output is not read at all: NaN or
garbage already in it cannot reach the result (decision: the test is on the converted beta, so
an f64 beta that underflows to 0 in f32 does not read an f32 output either). alpha is always
applied (0 * NaN is NaN). `.atomic` changes nothing when work-groups run one after another.

Shapes: the checker verifies the static sizes; dynamic sizes that disagree at run time (an
operand of the wrong size, inner dimensions of a product that differ) are undefined behaviour
and raise EvaluationError. numpy would broadcast a size-1 operand instead, and the oracle must
not invent a result for a program whose native code reads out of bounds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nanotc.ir.conversions import HALF_TYPES, convert
from nanotc.ir.instructions import (
    Axpby,
    BlasInstruction,
    Gemm,
    Gemv,
    Ger,
    Hadamard,
    Sum,
    Transpose,
)
from nanotc.ir.types import MemRefType, ScalarType
from nanotc.ir.values import Value
from nanotc.reference.errors import require
from nanotc.reference.frame import Frame, HandlerTable


@dataclass(frozen=True)
class Arithmetic:
    """How a collective instruction with output element type `output` computes."""

    output: ScalarType

    @property
    def compute(self) -> ScalarType:
        return ScalarType.F32 if self.output in HALF_TYPES else self.output

    def operand(self, values: Any, t: ScalarType) -> np.ndarray:
        """Values of type `t` (an array or a scalar) converted to the compute type."""
        converted = convert(np.asarray(values), t, self.compute)
        return converted.astype(np.int64) if self.compute.is_int else converted

    def store(self, result: np.ndarray, out: np.ndarray) -> None:
        """Write the compute-type `result` to the output view, rounded or wrapped."""
        src = ScalarType.I64 if self.compute.is_int else self.compute
        out[...] = convert(np.asarray(result), src, self.output)


def op(x: np.ndarray, trans: Transpose) -> np.ndarray:
    """X^T for `.t` on a matrix, X otherwise."""
    return x.T if trans is Transpose.T and x.ndim == 2 else x


Product = Callable[[Callable[[Value], np.ndarray]], np.ndarray]
"""Computes the product term P from a function giving an input memref in the compute type."""


def _update(inst: BlasInstruction, frame: Frame, product: Product) -> Sequence[Any]:
    """out := alpha * P + beta * out, not reading out when beta is 0."""
    out_value = inst.output()
    out = frame.get(out_value)
    assert isinstance(out_value.type, MemRefType)
    arithmetic = Arithmetic(out_value.type.element)

    def scalar(value: Value) -> np.ndarray:
        return arithmetic.operand(frame.get(value), value.type)

    def memref(value: Value) -> np.ndarray:
        return arithmetic.operand(frame.get(value), value.type.element)

    alpha, beta = scalar(inst.fields["alpha"]), scalar(inst.fields["beta"])
    p = product(memref)
    require(
        p.shape == out.shape,
        f"incompatible shapes: the operands make a result of shape {p.shape}, "
        f"the output has shape {out.shape}",
    )
    result = alpha * p
    if beta != 0:
        result = result + beta * arithmetic.operand(out, out_value.type.element)
    arithmetic.store(result, out)
    return ()


def _axpby(inst: Axpby, frame: Frame) -> Sequence[Any]:
    return _update(inst, frame, lambda get: op(get(inst.a), inst.trans))


def _matmul(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    require(
        x.shape[1] == y.shape[0],
        f"incompatible shapes: a product of {x.shape} and {y.shape} operands",
    )
    return x @ y


def _gemm(inst: Gemm, frame: Frame) -> Sequence[Any]:
    return _update(
        inst,
        frame,
        lambda get: _matmul(op(get(inst.a), inst.trans_a), op(get(inst.b), inst.trans_b)),
    )


def _gemv(inst: Gemv, frame: Frame) -> Sequence[Any]:
    return _update(inst, frame, lambda get: _matmul(op(get(inst.a), inst.trans_a), get(inst.b)))


def _ger(inst: Ger, frame: Frame) -> Sequence[Any]:
    return _update(inst, frame, lambda get: np.multiply.outer(get(inst.a), get(inst.b)))


def _hadamard(inst: Hadamard, frame: Frame) -> Sequence[Any]:
    def product(get: Callable[[Value], np.ndarray]) -> np.ndarray:
        a, b = get(inst.a), get(inst.b)
        require(a.shape == b.shape, f"incompatible shapes: a is {a.shape}, b is {b.shape}")
        return a * b

    return _update(inst, frame, product)


def _sum(inst: Sum, frame: Frame) -> Sequence[Any]:
    def row_sums(get: Callable[[Value], np.ndarray]) -> np.ndarray:
        a = op(get(inst.a), inst.trans)
        return a.sum(axis=1) if a.ndim == 2 else np.asarray(a.sum())

    return _update(inst, frame, row_sums)


HANDLERS: HandlerTable = {
    Axpby: _axpby,
    Gemm: _gemm,
    Gemv: _gemv,
    Ger: _ger,
    Hadamard: _hadamard,
    Sum: _sum,
}
