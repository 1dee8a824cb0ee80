"""The native calling convention of kernels (documented in docs/calling-convention.md).

Parameters flatten left to right, following the reference implementation:

- a scalar is one native argument (i1 as an 8-bit integer, f16/bf16 as their 16-bit pattern);
- a memref is its data pointer, then one i64 for every `?` in its shape, then one i64 for
  every `?` in its stride;
- a group is a pointer to the members' data pointers, then for every `?` in the member shape
  and then stride a pointer to an i64 array holding that entry for each member, then an i64
  offset if the offset is `?`.

After the parameters come three i64: the first and one-past-last group id to run, and the
group size (what `group_size` returns). A second entry, `NAME__packed`, takes the same
arguments as an array of 8-byte slots (one per native argument, little-endian, narrower
values in the low bytes) followed by the same three i64; the Python launcher calls it.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from nanotc.ir.core import Function
from nanotc.ir.types import GroupType, MemRefType, ScalarType, Type

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Slot(enum.Enum):
    """What one native argument carries."""

    SCALAR = "scalar"
    DATA = "data pointer"
    SHAPE = "dynamic size"
    STRIDE = "dynamic stride"
    MEMBERS = "member pointer array"
    MEMBER_SHAPES = "per-member dynamic sizes"
    MEMBER_STRIDES = "per-member dynamic strides"
    OFFSET = "dynamic offset"


@dataclass(frozen=True)
class NativeArg:
    param: int  # index of the language-level parameter
    slot: Slot
    mode: int = -1  # for sizes and strides: which mode
    scalar: ScalarType | None = None  # for SCALAR slots

    @property
    def is_pointer(self) -> bool:
        return self.slot in (
            Slot.DATA,
            Slot.MEMBERS,
            Slot.MEMBER_SHAPES,
            Slot.MEMBER_STRIDES,
        )


LAUNCH_ARGS = ("group_begin", "group_end", "group_size")


def flatten(func: Function) -> list[NativeArg]:
    out: list[NativeArg] = []
    for index, param in enumerate(func.arguments):
        out.extend(flatten_param(index, param.type))
    return out


def flatten_param(index: int, t: Type) -> list[NativeArg]:
    if isinstance(t, ScalarType):
        return [NativeArg(index, Slot.SCALAR, scalar=t)]
    if isinstance(t, MemRefType):
        return (
            [NativeArg(index, Slot.DATA)]
            + [NativeArg(index, Slot.SHAPE, m) for m in t.dynamic_shape_modes]
            + [NativeArg(index, Slot.STRIDE, m) for m in t.dynamic_stride_modes]
        )
    if isinstance(t, GroupType):
        m = t.memref
        offset = [NativeArg(index, Slot.OFFSET)] if t.offset is None else []
        return (
            [NativeArg(index, Slot.MEMBERS)]
            + [NativeArg(index, Slot.MEMBER_SHAPES, k) for k in m.dynamic_shape_modes]
            + [NativeArg(index, Slot.MEMBER_STRIDES, k) for k in m.dynamic_stride_modes]
            + offset
        )
    raise TypeError(f"parameter of type {t} cannot be passed to a kernel")


def kernel_symbol(kernel: str) -> str:
    """The object's symbol of a kernel: its name when that is a C identifier (the C calling
    convention's), else the name behind a private prefix. A name such as `@0` would clash
    with llvmlite's numbered metadata, and C could not declare it anyway."""
    return kernel if _C_IDENTIFIER.fullmatch(kernel) else f"nanotc.kernel.{kernel}"


def packed_name(kernel: str) -> str:
    return f"{kernel_symbol(kernel)}__packed"
