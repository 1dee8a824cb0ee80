"""LLVM types of nanotc values, and how memrefs and groups are carried in generated code.

In registers, i1 is `i1`; in memory it occupies a byte (as numpy's bool does). f16 and bf16
are f32 in registers and 16 bits in memory (`nanotc.codegen.llvm.float16`). A memref is its
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
    ScalarType.F16: F32,  # 16-bit floats compute in f32 (nanotc.codegen.llvm.float16)
    ScalarType.BF16: F32,
    ScalarType.F32: F32,
    ScalarType.F64: F64,
}
_MEMORY = {ScalarType.I1: I8, ScalarType.F16: F16, ScalarType.BF16: I16}


def register_type(t: ScalarType) -> ir.Type:
    return _REGISTER[t]


def memory_type(t: ScalarType) -> ir.Type:
    """How a value is stored: i1 as a byte, f16 as half, bf16 as its 16 bits."""
    return _MEMORY.get(t) or _REGISTER[t]


def abi_type(t: ScalarType) -> ir.Type:
    """Type of a scalar argument at the native interface (C-friendly: bool as a byte, f16 and
    bf16 as their 16-bit patterns)."""
    return I16 if t in (ScalarType.F16, ScalarType.BF16) else memory_type(t)


Dim = int | ir.Value
"""A size, stride or offset: static (Python int) or dynamic (i64 value)."""


@dataclass(frozen=True)
class MemrefValue:
    type: MemRefType
    ptr: ir.Value
    shape: tuple[Dim, ...]
    stride: tuple[Dim, ...]


def transposed(m: MemrefValue) -> MemrefValue:
    """A matrix's transpose, as a view: its rows are the columns of this one."""
    return MemrefValue(m.type.transposed(), m.ptr, m.shape[::-1], m.stride[::-1])


@dataclass(frozen=True)
class GroupValue:
    type: GroupType
    members: ir.Value  # pointer to the members' data pointers
    member_shapes: dict[int, ir.Value]  # mode -> pointer to per-member i64 sizes
    member_strides: dict[int, ir.Value]
    offset: Dim


def const(value: int, t: ir.Type = I64) -> ir.Constant:
    return ir.Constant(t, value)
