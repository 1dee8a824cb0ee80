"""The types of the tensor language: scalars, memrefs with strided layouts, groups, void.

Types are immutable values compared structurally. A dynamic mode size, stride or offset (`?`
in the text) is `DYNAMIC` (None). A memref always stores its full stride vector; the default
packed column-major layout is computed by `packed_strides`, and the printer omits the layout
when it equals the default, so `memref<f32x5x6x7>` and `memref<f32x5x6x7,strided<1,5,30>>`
are the same type.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import ml_dtypes
import numpy as np

from nanotc.diagnostics import ErrorKind

Extent: TypeAlias = "int | None"
"""A mode size, stride or offset: an int when known at compile time, DYNAMIC otherwise."""

DYNAMIC: Final = None


class ScalarType(enum.Enum):
    """Scalar types. `bf16` and `f16` are nanotc extensions of the language (SPEC-NOTES)."""

    I1 = "i1"
    I8 = "i8"
    I16 = "i16"
    I32 = "i32"
    I64 = "i64"
    INDEX = "index"
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"

    @property
    def bits(self) -> int:
        return _BITS[self]

    @property
    def size(self) -> int:
        """Size in bytes of one element in memory (i1 occupies a byte)."""
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self in (ScalarType.F16, ScalarType.BF16, ScalarType.F32, ScalarType.F64)

    @property
    def is_int(self) -> bool:
        return not self.is_float

    def int_range(self) -> tuple[int, int]:
        """Literal values accepted for this integer type (signed or unsigned reading)."""
        if self is ScalarType.I1:
            return (0, 1)
        return (-(1 << (self.bits - 1)), (1 << self.bits) - 1)

    def __str__(self) -> str:
        return self.value


_BITS = {
    ScalarType.I1: 1,
    ScalarType.I8: 8,
    ScalarType.I16: 16,
    ScalarType.I32: 32,
    ScalarType.I64: 64,
    ScalarType.INDEX: 64,
    ScalarType.F16: 16,
    ScalarType.BF16: 16,
    ScalarType.F32: 32,
    ScalarType.F64: 64,
}

INDEX: Final = ScalarType.INDEX
I1: Final = ScalarType.I1


@dataclass(frozen=True)
class VoidType:
    def __str__(self) -> str:
        return "void"


def packed_strides(shape: Sequence[Extent]) -> tuple[Extent, ...]:
    """Column-major packed strides: S1 = 1, S(k) = S(k-1) * s(k-1); dynamic propagates."""
    strides: list[Extent] = []
    current: Extent = 1
    for size in shape:
        strides.append(current)
        current = DYNAMIC if current is DYNAMIC or size is DYNAMIC else current * size
    return tuple(strides)


@dataclass(frozen=True)
class MemRefType:
    element: ScalarType
    shape: tuple[Extent, ...]
    stride: tuple[Extent, ...]

    @staticmethod
    def packed(element: ScalarType, shape: Sequence[Extent]) -> MemRefType:
        return MemRefType(element, tuple(shape), packed_strides(shape))

    @property
    def order(self) -> int:
        return len(self.shape)

    def transposed(self) -> MemRefType:
        """The type of a matrix's transpose as a view of its memory: modes reversed."""
        return MemRefType(self.element, self.shape[::-1], self.stride[::-1])

    @property
    def is_packed(self) -> bool:
        return self.stride == packed_strides(self.shape)

    @property
    def is_static(self) -> bool:
        return DYNAMIC not in self.shape and DYNAMIC not in self.stride

    @property
    def dynamic_shape_modes(self) -> tuple[int, ...]:
        return tuple(i for i, s in enumerate(self.shape) if s is DYNAMIC)

    @property
    def dynamic_stride_modes(self) -> tuple[int, ...]:
        return tuple(i for i, s in enumerate(self.stride) if s is DYNAMIC)

    def num_elements(self) -> int:
        """Elements spanned by a static memref (including gaps of non-packed layouts)."""
        assert self.is_static
        if not self.shape:
            return 1
        return 1 + sum((s - 1) * st for s, st in zip(self.shape, self.stride))  # type: ignore[operator]

    def size_in_bytes(self) -> int:
        return self.num_elements() * self.element.size

    def __str__(self) -> str:
        shape = "".join("x" + _extent(s) for s in self.shape)
        layout = "" if self.is_packed else f",strided<{','.join(map(_extent, self.stride))}>"
        return f"memref<{self.element}{shape}{layout}>"


@dataclass(frozen=True)
class GroupType:
    memref: MemRefType
    offset: Extent = 0

    def __str__(self) -> str:
        offset = "" if self.offset == 0 else f", offset: {_extent(self.offset)}"
        return f"group<{self.memref}{offset}>"


@dataclass(frozen=True)
class UnknownType:
    """The type of a value the frontend could not resolve (only in erroneous programs)."""

    def __str__(self) -> str:
        return "<unknown>"


Type: TypeAlias = "ScalarType | MemRefType | GroupType | VoidType | UnknownType"


def _extent(value: Extent) -> str:
    return "?" if value is DYNAMIC else str(value)


def memref_errors(t: MemRefType) -> list[ErrorKind]:
    """Well-formedness of a memref type: sizes non-negative, strided-layout rules where static."""
    errors = []
    if any(s is not DYNAMIC and s < 0 for s in t.shape):
        errors.append(ErrorKind.INVALID_SHAPE)
    first_ok = not t.stride or t.stride[0] is DYNAMIC or t.stride[0] >= 1
    ordered = all(
        prev_stride is DYNAMIC
        or prev_size is DYNAMIC
        or stride is DYNAMIC
        or prev_stride * prev_size <= stride
        for prev_stride, prev_size, stride in zip(t.stride, t.shape, t.stride[1:])
    )
    if not (first_ok and ordered):
        errors.append(ErrorKind.INVALID_STRIDE)
    if _past_index(t):
        errors.append(ErrorKind.INTEGER_OVERFLOW)
    return errors


def _past_index(t: MemRefType) -> bool:
    """Whether a static stride, or the byte offset of the last element its static modes
    reach, is past what an index holds (the addresses of the native code would wrap)."""
    if any(s is not DYNAMIC and s > INDEX_MAX for s in t.stride):
        return True
    static = [(n, s) for n, s in zip(t.shape, t.stride) if DYNAMIC not in (n, s) and n > 0]
    return sum((n - 1) * s for n, s in static) * t.element.size > INDEX_MAX


INDEX_MAX: Final = (1 << 63) - 1  # index values, sizes and integer literals are 64-bit


def product(values: Sequence[Extent]) -> Extent:
    """Product of extents; dynamic if any factor is dynamic."""
    if DYNAMIC in values:
        return DYNAMIC
    return math.prod(values)  # type: ignore[arg-type]


_DTYPES: dict[ScalarType, np.dtype[Any]] = {
    ScalarType.I1: np.dtype(np.bool_),
    ScalarType.I8: np.dtype(np.int8),
    ScalarType.I16: np.dtype(np.int16),
    ScalarType.I32: np.dtype(np.int32),
    ScalarType.I64: np.dtype(np.int64),
    ScalarType.INDEX: np.dtype(np.int64),
    ScalarType.F16: np.dtype(np.float16),
    ScalarType.BF16: np.dtype(ml_dtypes.bfloat16),
    ScalarType.F32: np.dtype(np.float32),
    ScalarType.F64: np.dtype(np.float64),
}


def numpy_dtype(t: ScalarType) -> np.dtype[Any]:
    return _DTYPES[t]
