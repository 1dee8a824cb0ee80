"""Memrefs and groups as numpy views on the memory the kernel addresses.

A memref value is an `np.ndarray` whose shape is the memref's shape and whose strides are the
memref's strides (in bytes, numpy's unit), viewing the caller's memory, so stores write through
to the caller's arrays exactly as a native launch would. Memref element (i, j) is `view[i, j]`.

- Arguments: the view starts at the bound array's element 0; static strides of the type are
  used as written (they equal the array's wherever they address memory), dynamic ones are the
  array's.
- Groups: member i is a view on the i-th bound array starting `offset` elements after its
  element 0, with that array's sizes and the type's strides.
- Every view made from an address is checked to lie inside the memory of the array it came
  from (the root of its `.base` chain); views are never made on memory the caller did not pass.
- subview: `offset:size` slices keep the mode, a single index drops it, `?` runs to the end of
  the mode; strides are unchanged. Out-of-range offsets or sizes raise EvaluationError (the
  language does not check them at run time; the oracle refuses to guess).
- expand: one mode becomes several with canonical strides (S, S*e1, S*e1*e2, ...); a `?` entry is
  inferred as the mode size divided by the product of the other entries, which must divide it.
- fuse: modes [first, last] become one mode of their product size with the stride of the first
  mode of size above 1.
  When that does not address the same elements as the original modes (a dynamic stride
  violating S(k)*s(k) = S(k+1) on modes of size > 1) the language's behaviour is undefined and
  EvaluationError is raised.
- alloca: a fresh array with the type's (packed or strided) layout, filled with NaN (floats),
  true (i1) or the byte pattern 0x5A (other integers), so that reading memory before it is
  written shows up in results.
- load / store: indices are checked against the mode sizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nanotc.ir.types import DYNAMIC, GroupType, MemRefType, ScalarType
from nanotc.reference.errors import EvaluationError, require
from nanotc.runtime.arguments import GroupView, MemrefView, numpy_dtype

GARBAGE_BYTE = 0x5A
"""The byte an integer alloca is filled with."""


class _ByteSpan:
    """Bytes [address, address + length) kept alive by `owner`, as a numpy array interface."""

    def __init__(self, owner: np.ndarray, address: int, length: int):
        self.owner = owner
        readonly = not owner.flags.writeable
        self.__array_interface__ = {
            "version": 3,
            "shape": (length,),
            "typestr": "|u1",
            "data": (address, readonly),
        }


def _root(array: np.ndarray) -> np.ndarray:
    """The array at the end of `array`'s chain of bases: the widest memory it may address."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _memory_of(root: np.ndarray) -> tuple[int, int]:
    """The byte range [low, high) spanned by the elements of array `root`."""
    address = root.__array_interface__["data"][0]
    require(root.size > 0, "memref view outside the memory passed by the caller (empty array)")
    extents = [(n - 1) * s for n, s in zip(root.shape, root.strides)]
    low = address + sum(min(0, e) for e in extents)
    high = address + sum(max(0, e) for e in extents) + root.itemsize
    return low, high


def view_at(
    owner: np.ndarray, address: int, shape: Sequence[int], strides: Sequence[int], dtype: Any
) -> np.ndarray:
    """A view with element `strides` whose element 0 is at byte `address`, inside the memory of
    `owner`'s root array; EvaluationError if it would reach outside."""
    dtype = np.dtype(dtype)
    if math.prod(shape) == 0:
        return np.empty(tuple(shape), dtype)  # no element is ever addressed
    byte_strides = tuple(s * dtype.itemsize for s in strides)
    root = _root(owner)
    low, high = _memory_of(root)
    span = np.asarray(_ByteSpan(root, low, high - low))
    try:
        return np.ndarray(
            tuple(shape), dtype, buffer=span, offset=address - low, strides=byte_strides
        )
    except (TypeError, ValueError) as e:
        raise EvaluationError(f"memref view outside the memory passed by the caller ({e})") from e


def argument_view(bound: MemrefView, t: MemRefType, offset: int = 0) -> np.ndarray:
    """The view a kernel has of a bound memref argument, `offset` elements after its start."""
    dtype = numpy_dtype(t.element)
    strides = [have if want is DYNAMIC else want for want, have in zip(t.stride, bound.strides)]
    address = bound.address + offset * dtype.itemsize
    return view_at(bound.array, address, bound.shape, strides, dtype)


@dataclass(frozen=True)
class GroupArgument:
    """A bound group argument: the members' memory and the group's type."""

    bound: GroupView
    type: GroupType

    def member(self, index: int) -> np.ndarray:
        """`load %group[index]`: member `index` as a memref view, shifted by the offset."""
        count = len(self.bound)
        require(0 <= index < count, f"group index {index} out of bounds [0, {count})")
        return argument_view(self.bound.member(index), self.type.memref, self.bound.offset)


def alloca(t: MemRefType) -> np.ndarray:
    """Fresh memory with the layout of static memref type `t`, filled with garbage."""
    dtype = numpy_dtype(t.element)
    if math.prod(t.shape) == 0:  # type: ignore[arg-type]
        return np.empty(t.shape, dtype)  # type: ignore[arg-type]
    byte_strides = tuple(s * dtype.itemsize for s in t.stride)  # type: ignore[operator]
    buffer = _garbage(t.num_elements(), t.element)
    return np.ndarray(t.shape, dtype, buffer=buffer, strides=byte_strides)  # type: ignore[arg-type]


def _garbage(count: int, element: ScalarType) -> np.ndarray:
    dtype = numpy_dtype(element)
    if element.is_float:
        return np.full(count, np.nan, dtype)
    if element is ScalarType.I1:
        return np.ones(count, dtype)
    return np.full(count * dtype.itemsize, GARBAGE_BYTE, np.uint8).view(dtype)


# -- views ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slice:
    """One mode of a subview: `offset:size`, or a single index when `size` is None."""

    offset: int
    size: int | None


def subview(source: np.ndarray, slices: Sequence[Slice]) -> np.ndarray:
    index: list[int | slice] = []
    for mode, (s, n) in enumerate(zip(slices, source.shape)):
        if s.size is None:
            require(0 <= s.offset < n, f"index {s.offset} out of bounds for mode {mode} (size {n})")
            index.append(s.offset)
        else:
            require(
                s.offset >= 0 and s.size >= 0 and s.offset + s.size <= n,
                f"slice {s.offset}:{s.size} out of bounds for mode {mode} (size {n})",
            )
            index.append(slice(s.offset, s.offset + s.size))
    return source[(*index, ...)]  # the Ellipsis keeps a 0-d result a view


def expand(source: np.ndarray, mode: int, entries: Sequence[int | None]) -> np.ndarray:
    """Mode `mode` viewed as the modes `entries`; one None entry is inferred."""
    n = source.shape[mode]
    known = [e for e in entries if e is not None]
    require(all(e >= 0 for e in known), f"negative size in expand shape {list(entries)}")
    rest = math.prod(known)
    if len(known) < len(entries):
        # a zero entry fits only an empty mode, and `?` beside it is 0
        require(n % rest == 0 if rest else n == 0, f"expand shape does not divide mode size {n}")
        entries = [(n // rest if rest else 0) if e is None else e for e in entries]
    else:
        require(rest == n, f"product of expand shape {list(entries)} is not the mode size {n}")
    strides: list[int] = []
    stride = source.strides[mode]
    for e in entries:
        strides.append(stride)
        stride *= e
    shape = source.shape[:mode] + tuple(entries) + source.shape[mode + 1 :]
    byte_strides = source.strides[:mode] + tuple(strides) + source.strides[mode + 1 :]
    return as_strided(source, shape, byte_strides, writeable=source.flags.writeable)


def fuse(source: np.ndarray, first: int, last: int) -> np.ndarray:
    """Modes first..last viewed as one mode with the stride of the first that is stepped
    (modes of size 1 never are: their strides do not matter)."""
    sizes, strides = source.shape[first : last + 1], source.strides[first : last + 1]
    total = math.prod(sizes)
    stepped = next((k for k, n in enumerate(sizes) if n > 1), 0)
    for k in range(stepped, len(sizes)):
        expected = strides[stepped] * math.prod(sizes[stepped:k])
        require(
            total == 0 or sizes[k] <= 1 or strides[k] == expected,
            f"modes {first}..{last} cannot be fused: element strides "
            f"{[s // source.itemsize for s in strides]} with sizes {list(sizes)}",
        )
    shape = source.shape[:first] + (total,) + source.shape[last + 1 :]
    byte_strides = source.strides[:first] + (strides[stepped],) + source.strides[last + 1 :]
    return as_strided(source, shape, byte_strides, writeable=source.flags.writeable)


def element(view: np.ndarray, indices: Sequence[int]) -> tuple[int, ...]:
    """The numpy index of the element at `indices`, checked against the mode sizes."""
    for mode, (i, n) in enumerate(zip(indices, view.shape)):
        require(0 <= i < n, f"index {i} out of bounds for mode {mode} of size {n}")
    return tuple(indices)
