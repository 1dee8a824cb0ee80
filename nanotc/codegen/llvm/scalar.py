"""Replicated scalar instructions: arith, cmp, cast, group_id, group_size.

Integer semantics (docs/language.md): arithmetic wraps; division truncates toward zero with
`x div 0 = -1`, `MIN div -1 = MIN`, `x rem 0 = x`, `MIN rem -1 = 0` (no trap is possible);
shift amounts are taken modulo the bit width and `shr` is arithmetic. Comparisons are signed
for integers (i1 compares true > false) and ordered for floats except `.ne` (true when either
side is NaN).
"""

from __future__ import annotations

from llvmlite import ir

from nanotc.codegen.llvm import float16
from nanotc.codegen.llvm.emitter import FunctionEmitter, emits
from nanotc.codegen.llvm.helpers import convert
from nanotc.ir.instructions import (
    ArithBinary,
    ArithUnary,
    BinaryOp,
    Cast,
    Cmp,
    CmpCond,
    GroupId,
    GroupSize,
    UnaryOp,
)
from nanotc.ir.types import ScalarType

_FLOAT_OPS = {
    BinaryOp.ADD: "fadd",
    BinaryOp.SUB: "fsub",
    BinaryOp.MUL: "fmul",
    BinaryOp.DIV: "fdiv",
    BinaryOp.REM: "frem",
}
_INT_OPS = {
    BinaryOp.ADD: "add",
    BinaryOp.SUB: "sub",
    BinaryOp.MUL: "mul",
    BinaryOp.AND: "and_",
    BinaryOp.OR: "or_",
    BinaryOp.XOR: "xor",
}
_CMP = {
    CmpCond.EQ: "==",
    CmpCond.NE: "!=",
    CmpCond.GT: ">",
    CmpCond.GE: ">=",
    CmpCond.LT: "<",
    CmpCond.LE: "<=",
}


def binary(b: ir.IRBuilder, op: BinaryOp, t: ScalarType, x: ir.Value, y: ir.Value) -> ir.Value:
    if t.is_float:
        result = getattr(b, _FLOAT_OPS[op])(x, y)
        return float16.round_to(b, result, t) if t in float16.SIXTEEN_BIT else result
    if op in _INT_OPS:
        return getattr(b, _INT_OPS[op])(x, y)
    if op in (BinaryOp.SHL, BinaryOp.SHR):
        amount = b.and_(y, ir.Constant(y.type, t.bits - 1))
        return b.shl(x, amount) if op is BinaryOp.SHL else b.ashr(x, amount)
    return _divide(b, op, x, y)


def _divide(b: ir.IRBuilder, op: BinaryOp, x: ir.Value, y: ir.Value) -> ir.Value:
    """sdiv/srem without the two trapping cases (divisor 0, and MIN by -1)."""
    if isinstance(y, ir.Constant):
        all_ones = (1 << y.type.width) - 1
        if (y.constant & all_ones) not in (0, all_ones):  # a literal neither 0 nor -1: no guard
            return b.sdiv(x, y) if op is BinaryOp.DIV else b.srem(x, y)
    zero, one, minus_one = (ir.Constant(y.type, v) for v in (0, 1, -1))
    y_zero = b.icmp_signed("==", y, zero)
    y_minus_one = b.icmp_signed("==", y, minus_one)
    safe = b.select(b.or_(y_zero, y_minus_one), one, y)
    if op is BinaryOp.DIV:
        result = b.select(y_minus_one, b.sub(zero, x), b.sdiv(x, safe))
        return b.select(y_zero, minus_one, result)
    result = b.select(y_minus_one, zero, b.srem(x, safe))
    return b.select(y_zero, x, result)


def compare(b: ir.IRBuilder, cond: CmpCond, t: ScalarType, x: ir.Value, y: ir.Value) -> ir.Value:
    if t is ScalarType.I1:  # booleans: true (1) > false (0)
        return b.icmp_unsigned(_CMP[cond], x, y)
    if t.is_int:
        return b.icmp_signed(_CMP[cond], x, y)
    if cond is CmpCond.NE:
        return b.fcmp_unordered("!=", x, y)
    return b.fcmp_ordered(_CMP[cond], x, y)


@emits(ArithBinary)
def _arith_binary(e: FunctionEmitter, inst: ArithBinary) -> None:
    t = inst.lhs.type
    e.define(inst.result, binary(e.b, inst.op, t, e.value(inst.lhs), e.value(inst.rhs)))


@emits(ArithUnary)
def _arith_unary(e: FunctionEmitter, inst: ArithUnary) -> None:
    x = e.value(inst.a)
    t: ScalarType = inst.a.type
    if inst.op is UnaryOp.NOT:
        result = e.b.not_(x)
    elif t.is_float:
        result = e.b.fneg(x)
    else:
        result = e.b.sub(ir.Constant(x.type, 0), x)
    e.define(inst.result, result)


@emits(Cmp)
def _cmp(e: FunctionEmitter, inst: Cmp) -> None:
    t = inst.lhs.type
    e.define(inst.result, compare(e.b, inst.cond, t, e.value(inst.lhs), e.value(inst.rhs)))


@emits(Cast)
def _cast(e: FunctionEmitter, inst: Cast) -> None:
    e.define(inst.result, convert(e.b, e.value(inst.a), inst.a.type, inst.to))


@emits(GroupId)
def _group_id(e: FunctionEmitter, inst: GroupId) -> None:
    e.define(inst.result, e.state.group_id)


@emits(GroupSize)
def _group_size(e: FunctionEmitter, inst: GroupSize) -> None:
    e.define(inst.result, e.state.group_size)
