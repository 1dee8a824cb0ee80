"""LLVM types of nanotc values, and how memrefs and groups are carried in generated code.

In registers, i1 is `i1`; in memory it occupies a byte (as numpy's bool does). A memref is its
data pointer plus its sizes and strides, each a Python int when the type knows it (so address
arithmetic on it folds while generating) or an i64 SSA value when it is dynamic.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from nanotc.ir.types import GroupType, MemRefType, ScalarType

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()

_REGISTER = {
    ScalarType.I1: I1,
    ScalarType.I8: I8,
    ScalarType.I16: I16,
    ScalarType.I32: I32,
    ScalarType.I64: I64,
    ScalarType.INDEX: I64,
    ScalarType.F16: F16,
    ScalarType.F32: F32,
    ScalarType.F64: F64,
}


def register_type(t: ScalarType) -> ir.Type:
    try:
        return _REGISTER[t]
    except KeyError:
        raise NotImplementedError(f"scalar type {t} is not supported by the LLVM backend") from None


def memory_type(t: ScalarType) -> ir.Type:
    return I8 if t is ScalarType.I1 else register_type(t)


def abi_type(t: ScalarType) -> ir.Type:
    """Type of a scalar argument at the native interface (C-friendly: bool as a byte)."""
    return memory_type(t)


Dim = int | ir.Value
"""A size, stride or offset: static (Python int) or dynamic (i64 value)."""


@dataclass(frozen=True)
class MemrefValue:
    type: MemRefType
    ptr: ir.Value
    shape: tuple[Dim, ...]
    stride: tuple[Dim, ...]


@dataclass(frozen=True)
class GroupValue:
    type: GroupType
    members: ir.Value  # pointer to the members' data pointers
    member_shapes: dict[int, ir.Value]  # mode -> pointer to per-member i64 sizes
    member_strides: dict[int, ir.Value]
    offset: Dim


def const(value: int, t: ir.Type = I64) -> ir.Constant:
    return ir.Constant(t, value)
