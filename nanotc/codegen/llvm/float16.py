"""The 16-bit floats, f16 and bf16 (nanotc extensions): held as f32 in registers, 16 bits in
memory, every result rounded to the type (to nearest even, as the reference evaluator does).

Widening is exact: f16 through `fpext` (F16C's vcvtph2ps), bf16 by moving its bits into the
high half of an f32. Narrowing rounds to nearest even: f16 through `fptrunc`, bf16 on the
bits (adding 0x7FFF plus the lowest kept bit, NaN kept quiet). An f64 goes to bf16 through
an f32 rounded to odd, so it is rounded once, not twice.
"""

from __future__ import annotations

from llvmlite import ir

from nanotc.codegen.llvm.types import F16, F32, F64, I16, I32, I64
from nanotc.ir.types import ScalarType

SIXTEEN_BIT = (ScalarType.F16, ScalarType.BF16)


def _like(t: ir.Type, element: ir.Type) -> ir.Type:
    """`element`, or a vector of it as wide as `t`."""
    return ir.VectorType(element, t.count) if isinstance(t, ir.VectorType) else element


def _const(t: ir.Type, element: ir.Type, value: int | float) -> ir.Constant:
    scalar = ir.Constant(element, value)
    return ir.Constant(t, [scalar] * t.count) if isinstance(t, ir.VectorType) else scalar


def widen(b: ir.IRBuilder, raw: ir.Value, t: ScalarType) -> ir.Value:
    """Memory form (half, or i16 bits for bf16; scalar or vector) to f32, exactly."""
    if t is ScalarType.F16:
        return b.fpext(raw, _like(raw.type, F32))
    wide = b.zext(raw, _like(raw.type, I32))
    return b.bitcast(b.shl(wide, _const(wide.type, I32, 16)), _like(raw.type, F32))


def narrow(b: ir.IRBuilder, value: ir.Value, t: ScalarType) -> ir.Value:
    """f32 (scalar or vector) to the memory form, rounded to nearest even."""
    if t is ScalarType.F16:
        return b.fptrunc(value, _like(value.type, F16))
    return _bf16_bits(b, value)


def _bf16_bits(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    t = value.type
    bits = b.bitcast(value, _like(t, I32))
    keep = b.and_(b.lshr(bits, _const(bits.type, I32, 16)), _const(bits.type, I32, 1))
    rounded = b.add(bits, b.add(_const(bits.type, I32, 0x7FFF), keep))
    upper = b.trunc(b.lshr(rounded, _const(bits.type, I32, 16)), _like(t, I16))
    is_nan = b.fcmp_unordered("uno", value, value)
    quiet = b.or_(
        b.trunc(b.lshr(bits, _const(bits.type, I32, 16)), _like(t, I16)),
        _const(upper.type, I16, 0x40),
    )
    return b.select(is_nan, quiet, upper)


def round_to(b: ir.IRBuilder, value: ir.Value, t: ScalarType) -> ir.Value:
    """An f32 rounded to the precision of t, still as f32 (the result of an operation)."""
    return widen(b, narrow(b, value, t), t)


def from_f64(b: ir.IRBuilder, value: ir.Value, t: ScalarType) -> ir.Value:
    """An f64 rounded once to t (as f32): f16 directly; bf16 via an f32 rounded to odd
    (truncate toward zero, then set the lowest bit if anything was cut off), which carries
    enough bits that the final rounding to nearest even is the correct one."""
    if t is ScalarType.F16:
        return b.fpext(b.fptrunc(value, F16), F32)
    nearest = b.fptrunc(value, F32)
    bits = b.bitcast(nearest, I32)
    back = b.fpext(nearest, F64)
    overshoot = b.fcmp_ordered(">", _abs(b, back), _abs(b, value))
    toward_zero = b.select(overshoot, b.sub(bits, ir.Constant(I32, 1)), bits)
    inexact = b.zext(b.fcmp_ordered("!=", back, value), I32)
    odd = b.bitcast(b.or_(toward_zero, inexact), F32)
    return round_to(b, odd, t)


def _abs(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    bits = b.bitcast(value, I64)
    return b.bitcast(b.and_(bits, ir.Constant(I64, (1 << 63) - 1)), F64)
