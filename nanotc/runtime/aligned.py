"""numpy arrays whose data start on a cache line, for kernels' operands.

numpy places a large array's data 16 bytes past a 64-byte line (glibc's allocation header at
the start of an mmap'd page), so a column that starts there is read and written by 64-byte
vectors that each straddle two lines. Small batched gemms in cache ran up to 1.16x faster
on line-aligned operands, one shape (f64 16^3) 0.94-0.97x as fast (docs/benchmarks.md,
"Line-aligned operands"); their kernels are the same, only where the data lie differs.

An aligned array is a view into a numpy byte buffer allocated one alignment larger and cut
at its first aligned byte; the view keeps the buffer alive as its base.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from nanotc.ir.types import ScalarType, numpy_dtype
from nanotc.runtime.launcher import is_count

LINE_BYTES = 64  # the default alignment: a cache line of every target nanotc knows

Order = Literal["F", "C"]
_TYPE_NAMES = {t.value: t for t in ScalarType}


def empty_aligned(shape: int | tuple[int, ...], dtype: Any = np.float32, *, order: Order = "F",
                  alignment: int = LINE_BYTES) -> np.ndarray:  # fmt: skip
    """An uninitialised array of `shape` and `dtype` whose data start on an `alignment`-byte
    boundary. `dtype` is a numpy dtype or a nanotc scalar type name ("bf16", "f16", "f32",
    ...: these names win over numpy's, for which "f16" is a 16-byte float). `order` "F"
    (column-major, the layout of nanotc's memrefs) or "C"."""
    dims, element = _shape(shape), _dtype(dtype)
    _check_alignment(alignment, element)
    if order not in ("F", "C"):
        raise ValueError(f"order must be 'F' or 'C', got {order!r}")
    nbytes = math.prod(dims) * element.itemsize  # Python's integers: no silent wrap-around
    try:
        buffer = np.empty(nbytes + alignment, np.uint8)
    except (ValueError, MemoryError) as e:
        raise MemoryError(f"cannot allocate {nbytes} bytes for an array of shape {dims} "
                          f"and dtype {element}: {e}") from None  # fmt: skip
    start = -buffer.ctypes.data % alignment
    return np.ndarray(dims, element, buffer=buffer[start:], order=order)


def zeros_aligned(shape: int | tuple[int, ...], dtype: Any = np.float32, *, order: Order = "F",
                  alignment: int = LINE_BYTES) -> np.ndarray:  # fmt: skip
    """`empty_aligned`, filled with zeros."""
    array = empty_aligned(shape, dtype, order=order, alignment=alignment)
    array[...] = 0
    return array


def aligned(array: np.ndarray, *, alignment: int = LINE_BYTES) -> np.ndarray:
    """`array` itself where its data already start on an `alignment`-byte boundary, else a
    copy that does: column-major unless `array` is row-major only."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"array must be a numpy array, got {type(array).__name__}")
    _check_alignment(alignment, array.dtype)
    if array.ctypes.data % alignment == 0:
        return array
    row_major_only = array.flags.c_contiguous and not array.flags.f_contiguous
    copy = empty_aligned(array.shape, array.dtype, order="C" if row_major_only else "F",
                         alignment=alignment)  # fmt: skip
    copy[...] = array
    return copy


def _shape(shape: int | tuple[int, ...]) -> tuple[int, ...]:
    dims = (shape,) if is_count(shape) else tuple(shape)
    if not all(is_count(d) and d >= 0 for d in dims):
        raise ValueError(f"shape must be non-negative integers, got {shape!r}")
    return tuple(int(d) for d in dims)


def _dtype(dtype: Any) -> np.dtype[Any]:
    if isinstance(dtype, str) and dtype in _TYPE_NAMES:
        return numpy_dtype(_TYPE_NAMES[dtype])
    return np.dtype(dtype)


def _check_alignment(alignment: int, element: np.dtype[Any]) -> None:
    if element.hasobject:  # a view of raw bytes would hold garbage pointers as objects
        raise TypeError(f"dtype must hold no Python objects, got {element}")
    power_of_two = is_count(alignment) and alignment > 0 and alignment & (alignment - 1) == 0
    if not power_of_two or alignment < element.alignment:
        raise ValueError(
            f"alignment must be a power of two of at least {element.alignment} bytes "
            f"(the alignment of {element}), got {alignment!r}"
        )
