"""Binding Python launch arguments to a kernel's parameters, with every check done up front.

A memref parameter takes a numpy array (or anything exposing the array interface) whose
dtype matches the element type and whose element strides are whole multiples of the item
size; static sizes and strides of the type must equal the array's (strides of modes of size
at most 1 never address memory and are not compared); dynamic ones are read from the array.
Indexing is the array's: memref element (i, j) is `array[i, j]`, so a Fortran-ordered array
matches the default column-major layout.

A group parameter takes a sequence of such arrays (one per group member), a single array whose
last axis indexes the group, or a `Group(members, offset=...)` for a dynamic offset. Member i
seen by the kernel starts `offset` elements after the start of array i.

A scalar parameter takes a Python or numpy number that fits the type.

Everything wrong raises `ArgumentError` naming the parameter, what was expected and what was
given, before any native code runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from nanotc.ir.core import Function
from nanotc.ir.types import DYNAMIC, GroupType, MemRefType, ScalarType, Type

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


class ArgumentError(ValueError):
    """A launch argument does not fit its parameter."""

    def __init__(self, name: str, expected: str, actual: str):
        super().__init__(f"argument %{name}: expected {expected}, got {actual}")
        self.name = name
        self.expected = expected
        self.actual = actual


@dataclass(frozen=True)
class Group:
    """Group members with an explicit element offset (for `group<..., offset: ?>`)."""

    members: Any
    offset: int = 0


@dataclass(frozen=True)
class MemrefView:
    """A memref as the kernel sees it: address of element 0, sizes and element strides."""

    array: np.ndarray  # keeps the memory alive
    address: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class GroupView:
    members: tuple[MemrefView, ...]
    offset: int


BoundArgument = MemrefView | GroupView | np.generic


def bind_arguments(func: Function, args: Sequence[Any], group_size: int) -> list[BoundArgument]:
    params = func.arguments
    if len(args) != len(params):
        names = ", ".join("%" + (p.name or "?") for p in params)
        raise TypeError(f"@{func.name} takes {len(params)} arguments ({names}), {len(args)} given")
    return [
        bind(p.name or str(i), p.type, a, group_size) for i, (p, a) in enumerate(zip(params, args))
    ]


def bind(name: str, t: Type, value: Any, group_size: int) -> BoundArgument:
    if isinstance(t, ScalarType):
        return bind_scalar(name, t, value)
    if isinstance(t, MemRefType):
        return bind_memref(name, t, value)
    if isinstance(t, GroupType):
        return bind_group(name, t, value, group_size)
    raise ArgumentError(name, f"a parameter of a launchable type, not {t}", type(value).__name__)


def bind_scalar(name: str, t: ScalarType, value: Any) -> np.generic:
    dtype = numpy_dtype(t)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if t.is_int:
        if isinstance(value, bool | np.bool_):
            value = int(value)
        if not isinstance(value, int | np.integer):
            raise ArgumentError(name, f"an integer ({t})", _describe(value))
        lo, hi = (0, 1) if t is ScalarType.I1 else (-(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1)
        if not lo <= int(value) <= hi:
            raise ArgumentError(name, f"a {t} in [{lo}, {hi}]", str(int(value)))
        return dtype.type(value)
    real = int | float | np.integer | np.floating | ml_dtypes.bfloat16
    if not isinstance(value, real) or isinstance(value, bool):
        raise ArgumentError(name, f"a real number ({t})", _describe(value))
    return dtype.type(value)


def bind_memref(name: str, t: MemRefType, value: Any) -> MemrefView:
    array = _as_array(name, t, value)
    dtype = numpy_dtype(t.element)
    if array.dtype != dtype:
        raise ArgumentError(name, f"{dtype} array for {t}", _describe(array))
    if t.order == 0 and array.shape == (1,):
        array = array.reshape(())
    if array.ndim != t.order:
        raise ArgumentError(name, f"array with {t.order} dimensions for {t}", _describe(array))
    if any(s % array.itemsize for s in array.strides):
        raise ArgumentError(
            name, "strides that are multiples of the element size", _describe(array)
        )
    strides = tuple(s // array.itemsize for s in array.strides)
    for mode, (want, have) in enumerate(zip(t.shape, array.shape)):
        if want is not DYNAMIC and want != have:
            raise ArgumentError(name, f"size {want} in mode {mode} for {t}", _describe(array))
    for mode, (want, have, size) in enumerate(zip(t.stride, strides, array.shape)):
        if want is not DYNAMIC and want != have and size > 1:
            raise ArgumentError(
                name, f"element stride {want} in mode {mode} for {t}", _describe(array)
            )
    address = array.__array_interface__["data"][0]
    return MemrefView(array, address, tuple(array.shape), strides)


def bind_group(name: str, t: GroupType, value: Any, group_size: int) -> GroupView:
    offset = t.offset
    if isinstance(value, Group):
        if offset is not DYNAMIC and value.offset != offset:
            raise ArgumentError(name, f"offset {offset} for {t}", f"offset {value.offset}")
        offset, value = value.offset, value.members
    if offset is DYNAMIC:
        offset = 0
    if offset < 0:
        raise ArgumentError(name, "a non-negative group offset", str(offset))
    if isinstance(value, np.ndarray) or hasattr(value, "__array_interface__"):
        batch = np.asarray(value)
        if batch.ndim != t.memref.order + 1:
            raise ArgumentError(
                name,
                f"array with {t.memref.order + 1} dimensions (last one indexes the group) for {t}",
                _describe(batch),
            )
        members: Sequence[Any] = [batch[..., i] for i in range(batch.shape[-1])]
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        members = value
    else:
        raise ArgumentError(
            name, f"a sequence of arrays or one batched array for {t}", _describe(value)
        )
    if len(members) < group_size:
        raise ArgumentError(
            name, f"at least {group_size} group members (group_size)", f"{len(members)}"
        )
    views = tuple(
        bind_memref(f"{name}[{i}]", t.memref, m) for i, m in enumerate(members[:group_size])
    )
    for i, view in enumerate(views):
        _check_shifted_member(f"{name}[{i}]", view, offset)
    return GroupView(views, offset)


def _check_shifted_member(name: str, view: MemrefView, offset: int) -> None:
    """Member i is seen `offset` elements after the start of array i, so it reaches past that
    array: it must stay inside the memory the array is a view of (its root base array)."""
    if offset == 0 or 0 in view.shape:
        return
    root = view.array
    while isinstance(root.base, np.ndarray):
        root = root.base
    itemsize = view.array.itemsize
    start = view.address + offset * itemsize
    low, high = _byte_range(start, view.shape, [s * itemsize for s in view.strides], itemsize)
    root_low, root_high = _byte_range(
        root.__array_interface__["data"][0], root.shape, root.strides, root.itemsize
    )
    if root.size == 0 or low < root_low or high > root_high:
        raise ArgumentError(
            name,
            f"memory for the member {offset} elements after the array's start (group offset)",
            _describe(view.array),
        )


def _byte_range(
    address: int, shape: Sequence[int], byte_strides: Sequence[int], itemsize: int
) -> tuple[int, int]:
    """Bytes [low, high) spanned by the elements of a non-empty strided array."""
    extents = [(n - 1) * s for n, s in zip(shape, byte_strides)]
    low = address + sum(min(0, e) for e in extents)
    return low, address + sum(max(0, e) for e in extents) + itemsize


def _as_array(name: str, t: MemRefType, value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__array_interface__") or hasattr(value, "__dlpack__"):
        return np.asarray(value)
    raise ArgumentError(name, f"a numpy array for {t}", _describe(value))


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        strides = tuple(s // value.itemsize if value.itemsize else s for s in value.strides)
        return f"{value.dtype} array of shape {value.shape} with element strides {strides}"
    return f"{type(value).__name__} {value!r}"[:120]
