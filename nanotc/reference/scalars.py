"""Scalar values and the replicated scalar instructions `arith`, `cmp` and `cast`.

A scalar value of type T is a numpy scalar of T's dtype (np.bool_ for i1, np.int64 for index),
the same representation `bind_arguments` gives scalar launch arguments and `load` gives
elements.

Integers (i8 ... i64, index = i64) are two's complement and wrap modulo 2^bits; they are
computed exactly with Python ints and wrapped to the type:

- div is signed and truncates toward zero; x div 0 = -1 (all bits set); MIN div -1 = MIN.
- rem has the sign of the dividend (C); x rem 0 = x; MIN rem -1 = 0.
- shl / shr take the shift amount modulo the bit width (amount & (bits - 1)); shr is arithmetic.
- and / or / xor / not are bitwise; neg is wrapping negation.
- i1 is a boolean with values 0 and 1: and / or / xor / not are the logical operations, and cmp
  compares i1 values as 0 and 1, so true > false (decision: an i1 is never read as signed -1).
- cmp on integers is signed.

Floats are IEEE in the operand type: f32 operations are computed in float32, f64 in float64;
rem is C's fmod. f16 and bf16 operations are computed in f32 and the result is rounded to the
type (nearest even). cmp on floats is ordered (false if an operand is NaN) except `.ne`, which
is unordered (true if an operand is NaN).

`cast` follows `nanotc.ir.conversions`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from nanotc.ir.conversions import HALF_TYPES, convert_scalar, wrap
from nanotc.ir.instructions import BinaryOp, CmpCond, UnaryOp
from nanotc.ir.types import ScalarType, numpy_dtype


def cast(value: np.generic, src: ScalarType, dst: ScalarType) -> np.generic:
    return convert_scalar(value, src, dst)


# -- integers -------------------------------------------------------------------------------


def _div(a: int, b: int) -> int:
    if b == 0:
        return -1
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _rem(a: int, b: int) -> int:
    return a if b == 0 else a - b * _div(a, b)


IntOp = Callable[[int, int, int], int]
"""An exact integer operation on (lhs, rhs, bit width); the result is wrapped afterwards."""

_INT_BINARY: dict[BinaryOp, IntOp] = {
    BinaryOp.ADD: lambda a, b, bits: a + b,
    BinaryOp.SUB: lambda a, b, bits: a - b,
    BinaryOp.MUL: lambda a, b, bits: a * b,
    BinaryOp.DIV: lambda a, b, bits: _div(a, b),
    BinaryOp.REM: lambda a, b, bits: _rem(a, b),
    BinaryOp.SHL: lambda a, b, bits: a << (b & (bits - 1)),
    BinaryOp.SHR: lambda a, b, bits: a >> (b & (bits - 1)),  # Python's >> is arithmetic
    BinaryOp.AND: lambda a, b, bits: a & b,
    BinaryOp.OR: lambda a, b, bits: a | b,
    BinaryOp.XOR: lambda a, b, bits: a ^ b,
}

_INT_UNARY: dict[UnaryOp, Callable[[int], int]] = {
    UnaryOp.NEG: operator.neg,
    UnaryOp.NOT: operator.invert,  # on i1, wrapping ~x to one bit is logical not
}

# -- floats ---------------------------------------------------------------------------------

_FLOAT_BINARY: dict[BinaryOp, np.ufunc] = {
    BinaryOp.ADD: np.add,
    BinaryOp.SUB: np.subtract,
    BinaryOp.MUL: np.multiply,
    BinaryOp.DIV: np.divide,
    BinaryOp.REM: np.fmod,
}

_COMPARE: dict[CmpCond, Callable[[Any, Any], Any]] = {
    CmpCond.EQ: operator.eq,
    CmpCond.NE: operator.ne,  # numpy's != is true for NaN: unordered
    CmpCond.GT: operator.gt,
    CmpCond.GE: operator.ge,
    CmpCond.LT: operator.lt,
    CmpCond.LE: operator.le,
}


def _compute_dtype(t: ScalarType) -> type[np.generic]:
    """The numpy type a float operation of type `t` is computed in."""
    return np.float32 if t in HALF_TYPES else numpy_dtype(t).type


def _float_result(value: np.generic, t: ScalarType) -> np.generic:
    return numpy_dtype(t).type(value)


# -- the instructions -----------------------------------------------------------------------


def arith_binary(op: BinaryOp, a: np.generic, b: np.generic, t: ScalarType) -> np.generic:
    if t.is_int:
        exact = _INT_BINARY[op](int(a), int(b), t.bits)
        return numpy_dtype(t).type(wrap(exact, t))
    work = _compute_dtype(t)
    return _float_result(_FLOAT_BINARY[op](work(a), work(b)), t)


def arith_unary(op: UnaryOp, a: np.generic, t: ScalarType) -> np.generic:
    if t.is_int:
        return numpy_dtype(t).type(wrap(_INT_UNARY[op](int(a)), t))
    assert op is UnaryOp.NEG, "the checker rejects .not on floats"
    return _float_result(-_compute_dtype(t)(a), t)


def compare(cond: CmpCond, a: np.generic, b: np.generic, t: ScalarType) -> np.bool_:
    if t.is_int:
        return np.bool_(_COMPARE[cond](int(a), int(b)))
    work = _compute_dtype(t)
    return np.bool_(_COMPARE[cond](work(a), work(b)))
