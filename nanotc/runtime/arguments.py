"""Binding Python launch arguments to a kernel's parameters, with every check done up front.

A memref parameter takes a numpy array (or a view of a torch tensor or anything else
exposing DLPack or the array interface, without a copy: `nanotc.runtime.interop`) whose
dtype matches the element type and whose element strides are whole multiples of the item
size; static sizes and strides of the type must equal the array's (strides of modes of
size at most 1, and all strides of an empty array, never address memory and are not
compared); dynamic ones are read from the array. Indexing is the array's: memref element (i, j) is
`array[i, j]`, so a Fortran-ordered array matches the default column-major layout.

A group parameter takes a sequence of such arrays (one per group member), a single array whose
last axis indexes the group, or a `Group(members, offset=...)` for a dynamic offset. Member i
seen by the kernel starts `offset` elements after the start of array i.

A scalar parameter takes a Python or numpy number that fits the type.

Everything wrong raises `ArgumentError` naming the parameter, what was expected and what was
given, before any native code runs.
"""

from __future__ import annotations

import ctypes
import math
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np

from nanotc.ir.conversions import convert_scalar
from nanotc.ir.core import Function, walk
from nanotc.ir.instructions import Load, is_group_id
from nanotc.ir.types import (
    DYNAMIC,
    INDEX_MAX,
    GroupType,
    MemRefType,
    ScalarType,
    Type,
    numpy_dtype,
)
from nanotc.runtime.extents import (
    GroupIndexed,
    ParameterMode,
    SameExtent,
    group_indexed_modes,
    same_extents,
)
from nanotc.runtime.interop import InteropError, as_ndarray, is_foreign_array, is_ndarray
from nanotc.runtime.writes import (
    DisjointPair,
    Piece,
    byte_range,
    disjoint_pairs,
    elements_overlap,
    share_memory,
    shifted_member,
    written_parameters,
)


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


def arrays_of(value: Any) -> list[np.ndarray]:
    """The numpy arrays an argument holds: itself, or a group's members."""
    if is_ndarray(value):
        return [value]
    if isinstance(value, Group):
        return arrays_of(value.members)
    if isinstance(value, list | tuple):
        return [a for v in value for a in arrays_of(v)]
    return []


def copy_argument(value: Any) -> Any:
    """A copy of an argument that a launch sees as it sees the original: arrays keep their
    strides and their place in the memory around them (a group's offset reaches past its
    members), so a launch on the copy accepts what it accepts on the original and never
    writes the original's memory. Foreign arrays (torch tensors) are copied into numpy
    arrays of the same layout. Scalars are returned as they are."""
    if is_ndarray(value):
        return _copy_with_layout(value)
    if is_foreign_array(value):
        view = as_ndarray(value)
        return value if view is None else _copy_with_layout(view)
    if isinstance(value, Group):
        return Group(copy_argument(value.members), value.offset)
    if isinstance(value, list | tuple):
        return type(value)(copy_argument(v) for v in value)
    return value


def _copy_with_layout(array: np.ndarray) -> np.ndarray:
    """`array` in a copy of the whole memory block its data lies in (the block numpy
    allocated for it; else the bytes its elements span), at the same offset and strides."""
    owner = array
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    if owner.base is None:  # numpy allocated the block: copy it whole
        start, size = owner.ctypes.data, owner.nbytes
    else:  # memory from elsewhere (a bytes object, a foreign buffer): only the span
        start, size = _byte_span(array)
    block = np.empty(size, np.uint8)
    ctypes.memmove(block.ctypes.data, start, size)
    copy = np.ndarray(array.shape, array.dtype, block, array.ctypes.data - start, array.strides)
    copy.flags.writeable = array.flags.writeable
    return copy


def _byte_span(array: np.ndarray) -> tuple[int, int]:
    """The address and length of the bytes between an array's first and last elements."""
    if array.size == 0:
        return array.ctypes.data, 0
    extents = [(n - 1) * s for n, s in zip(array.shape, array.strides)]
    low = sum(e for e in extents if e < 0)
    high = sum(e for e in extents if e > 0) + array.itemsize
    return array.ctypes.data + low, high - low


class MemrefView(NamedTuple):
    """A memref as the kernel sees it: address of element 0, sizes and element strides
    (a named tuple: one is built per memref argument of every launch)."""

    array: np.ndarray  # keeps the memory alive
    address: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class GroupView:
    """A group's members as the kernel sees them, as tables with one row per member: data
    address (before the group offset), sizes and element strides."""

    addresses: np.ndarray  # uint64
    shapes: np.ndarray  # int64, (members, order)
    strides: np.ndarray  # int64, (members, order)
    offset: int
    arrays: tuple[np.ndarray, ...]  # the member arrays, or the one batched array
    batched: bool  # one array whose last axis indexes the group

    def __len__(self) -> int:
        return len(self.addresses)

    def member(self, i: int) -> MemrefView:
        """Member i (before the offset), as a view of the caller's memory."""
        array = self.arrays[0][..., i] if self.batched else self.arrays[i]
        return MemrefView(array, int(self.addresses[i]), tuple(array.shape), tuple(self.strides[i]))


BoundArgument = MemrefView | GroupView | np.generic


def bind_arguments(func: Function, args: Sequence[Any], group_size: int) -> list[BoundArgument]:
    """Bind every argument of one launch of `func` (see `ArgumentBinder`)."""
    return ArgumentBinder(func)(args, group_size)


ParameterBinder = Callable[[Any, int], BoundArgument]
"""Binds the value given for one parameter, in a launch of so many work-groups."""


class ArgumentBinder:
    """Binds the arguments of `func`'s launches. What each parameter's type asks of its
    argument is derived once, here: a kernel binds its arguments at every launch (a launch
    with three arrays took 20 us when every launch derived them, 17 us since; most of the rest
    is ctypes)."""

    def __init__(self, func: Function):
        self.func = func
        members = group_members_needed(func)
        self._names = [p.name or str(i) for i, p in enumerate(func.arguments)]
        self._binders = [
            _parameter_binder(name, p.type, members.get(i))
            for i, (name, p) in enumerate(zip(self._names, func.arguments))
        ]
        self.disjoint = disjoint_pairs(func)
        self.written = written_parameters(func)
        self.same_extents = same_extents(func)
        self.group_indexed = group_indexed_modes(func)

    def __call__(self, args: Sequence[Any], group_size: int) -> list[BoundArgument]:
        binders = self._binders
        if len(args) != len(binders):
            params = self.func.arguments
            names = ", ".join("%" + (p.name or "?") for p in params)
            raise TypeError(
                f"@{self.func.name} takes {len(params)} arguments ({names}), {len(args)} given"
            )
        bound = [bind(value, group_size) for bind, value in zip(binders, args)]
        for index, where in self.written.items():
            self._check_writeable(index, where, bound[index])
        for pair in self.disjoint:
            self._check_disjoint(pair, bound)
        for same in self.same_extents:
            self._check_same_extent(same, bound, group_size)
        for indexed in self.group_indexed:
            self._check_group_indexed(indexed, bound[indexed.param], group_size)
        return bound

    def _check_group_indexed(self, indexed: GroupIndexed, argument: BoundArgument,
                             group_size: int) -> None:  # fmt: skip
        """ArgumentError if the mode holds fewer elements than the launch has work-groups."""
        assert isinstance(argument, MemrefView)  # a memref parameter's
        if argument.shape[indexed.mode] >= group_size:
            return
        raise ArgumentError(
            self._names[indexed.param],
            f"at least {group_size} elements in mode {indexed.mode} ({indexed.where} indexes"
            f" it by group_id, in each of the launch's {group_size} work-groups)",
            _describe(argument.array),
        )

    def _check_same_extent(self, same: SameExtent, bound: Sequence[BoundArgument],
                           group_size: int) -> None:  # fmt: skip
        """ArgumentError if the two modes' sizes differ (for group members, member by member
        over the launch's work-groups), at the second argument, or at the member where a
        group's member differs from an array."""
        kept, blamed = same.first, same.second
        x, y = bound[kept.param], bound[blamed.param]
        arrays = isinstance(x, MemrefView) and isinstance(y, MemrefView)
        if arrays and x.shape[kept.mode] == y.shape[blamed.mode]:  # the common case, cheaply
            return
        if kept.member and not blamed.member:
            kept, blamed = blamed, kept
        expected = _sizes(bound[kept.param], kept, group_size)
        got = _sizes(bound[blamed.param], blamed, group_size)
        if expected is None or got is None:
            return
        if kept.member and blamed.member:  # groups a work-group may skip can be shorter
            common = min(expected.size, got.size)
            expected, got = expected[:common], got[:common]
        differ = np.flatnonzero(expected != got)
        if not differ.size:
            return
        i = int(differ[0])
        argument = bound[blamed.param]
        array = argument.member(i).array if isinstance(argument, GroupView) else argument.array
        raise ArgumentError(
            self._names[blamed.param],
            f"size {expected[min(i, expected.size - 1)]} in {_mode_label(blamed, i)}, as"
            f" argument %{self._names[kept.param]} has in {_mode_label(kept, i)}"
            f" ({same.where} pairs their elements)",
            _describe(array),
        )

    def _check_writeable(self, index: int, where: str, argument: BoundArgument) -> None:
        """ArgumentError if the kernel would write an array numpy marks read-only, or one
        whose elements share memory (stride 0: torch's `expand`), whose result would depend
        on the order of the writes."""
        name = self._names[index]
        if not isinstance(argument, GroupView):
            labelled = [(name, argument.array, argument.array.ndim)]
        elif argument.batched:  # members may share memory: atomic updates accumulate there
            labelled = [(name, argument.arrays[0], argument.arrays[0].ndim - 1)]
        else:
            labelled = [(f"{name}[{i}]", a, a.ndim) for i, a in enumerate(argument.arrays)]
        for label, array, modes in labelled:
            if not array.flags.writeable:
                raise ArgumentError(
                    label,
                    f"a writeable array ({where} writes %{name})",
                    f"a read-only {_describe(array)}",
                )
            repeated = [m for m in range(modes) if array.strides[m] == 0 and array.shape[m] > 1]
            if repeated and array.size:
                raise ArgumentError(
                    label,
                    f"an array of distinct elements ({where} writes %{name})",
                    f"{_describe(array)}, whose mode {repeated[0]} repeats one element",
                )
            if elements_overlap(array.shape[:modes], array.strides[:modes], array.itemsize):
                raise ArgumentError(
                    label,
                    f"an array of distinct elements ({where} writes %{name})",
                    f"{_describe(array)}, whose elements overlap",
                )

    def _check_disjoint(self, pair: DisjointPair, bound: Sequence[BoundArgument]) -> None:
        """ArgumentError at the output's argument if it shares memory with the operand's."""
        if share_memory(_pieces(bound[pair.output]), _pieces(bound[pair.operand])):
            out, operand = self._names[pair.output], self._names[pair.operand]
            raise ArgumentError(
                out,
                f"memory disjoint from argument %{operand} ({pair.where} writes %{out} while"
                f" it reads %{operand})",
                f"an array sharing memory with %{operand}",
            )

    def binder(self, index: int) -> ParameterBinder:
        """The binder of parameter `index` alone."""
        return self._binders[index]


def _parameter_binder(name: str, t: Type, members: GroupMembers | None) -> ParameterBinder:
    """`members`: what a group parameter needs of its members (None: nothing beyond its
    type)."""
    if isinstance(t, ScalarType):
        return lambda value, _: bind_scalar(name, t, value)
    if isinstance(t, MemRefType):
        bind_array = MemrefBinder(name, t)
        return lambda value, _: bind_array(value)
    if isinstance(t, GroupType):
        if members is GroupMembers.ONLY_PER_GROUP:
            return lambda value, group_size: bind_group(name, t, value, group_size, group_size)
        if members is GroupMembers.ONE_PER_GROUP:
            return lambda value, group_size: bind_group(name, t, value, group_size)
        return lambda value, _: bind_group(name, t, value)
    raise TypeError(f"parameter %{name} of type {t} cannot be launched")


def _sizes(argument: BoundArgument, place: ParameterMode, group_size: int) -> np.ndarray | None:
    """The sizes of a parameter mode: one for an array, one per work-group's member for a
    group (None where the argument is neither)."""
    if isinstance(argument, MemrefView) and not place.member:
        return np.array([argument.shape[place.mode]])
    if isinstance(argument, GroupView) and place.member:
        return argument.shapes[:group_size, place.mode]
    return None


def _mode_label(place: ParameterMode, member: int) -> str:
    """`mode 1` of an array, `mode 1 of member 3` of a group's member."""
    return f"mode {place.mode}" + (f" of member {member}" if place.member else "")


class GroupMembers(Enum):
    """What a group parameter's loads need of its members, in a launch of G work-groups."""

    ONE_PER_GROUP = "at least G, as every work-group loads its own by group_id"
    ONLY_PER_GROUP = "at least G, and the kernel loads only those: every load is by group_id"


def group_members_needed(func: Function) -> dict[int, GroupMembers]:
    """The group parameters that need a member per work-group: those whose every load uses
    `group_id` as the index (only the first group_size members are reachable), and those
    the function's body itself (not under an `if` or a `for`) loads by `group_id`, which
    every work-group runs. Any other group may have fewer members, and be read at any."""
    loads: dict[int, list[Load]] = {}
    for inst in walk(func.body):
        if isinstance(inst, Load) and isinstance(inst.source.type, GroupType):
            loads.setdefault(id(inst.source), []).append(inst)
    every_group = {
        id(inst.source)
        for inst in func.body.instructions
        if isinstance(inst, Load)
        and isinstance(inst.source.type, GroupType)
        and is_group_id(inst.indices[0])
    }
    needed: dict[int, GroupMembers] = {}
    for i, p in enumerate(func.arguments):
        mine = loads.get(id(p), [])
        if mine and all(is_group_id(load.indices[0]) for load in mine):
            needed[i] = GroupMembers.ONLY_PER_GROUP
        elif id(p) in every_group:
            needed[i] = GroupMembers.ONE_PER_GROUP
    return needed


def _pieces(argument: BoundArgument) -> list[Piece]:
    """The arrays an argument gives the kernel, with their byte ranges: a memref's array, a
    group's member arrays (or the one batch they are slices of), or, for a group with an
    offset, its members where the kernel sees them."""
    if isinstance(argument, MemrefView):
        arrays: Sequence[np.ndarray] = (argument.array,)
    elif isinstance(argument, GroupView) and argument.offset == 0:
        arrays = argument.arrays
    elif isinstance(argument, GroupView):
        arrays = [_shifted(argument.member(i), argument.offset) for i in range(len(argument))]
    else:
        return []
    return [
        (*byte_range(data_address(a), a.shape, a.strides, a.itemsize), a) for a in arrays if a.size
    ]


def _shifted(view: MemrefView, offset: int) -> np.ndarray:
    """Group member `view` as the kernel sees it, `offset` elements past its array's start."""
    array = view.array
    if not array.size:
        return array
    return shifted_member(
        view.address + offset * array.itemsize, array.shape, array.strides, array.dtype
    )


def bind_scalar(name: str, t: ScalarType, value: Any) -> np.generic:
    dtype = numpy_dtype(t)
    if not isinstance(value, np.ndarray | np.generic) and hasattr(value, "__dlpack__"):
        value = _as_array(name, t, value)  # a 0-d tensor is a number, as a 0-d array is
    if is_ndarray(value) and value.ndim == 0:
        value = value[()]
    if t.is_int:
        if isinstance(value, bool | np.bool_) and t is ScalarType.I1:
            value = int(value)  # a truth value, as the language's true and false are i1's
        if not isinstance(value, int | np.integer) or isinstance(value, bool):
            raise ArgumentError(name, f"an integer ({t})", _describe(value))
        lo, hi = (0, 1) if t is ScalarType.I1 else (-(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1)
        if not lo <= int(value) <= hi:
            raise ArgumentError(name, f"an integer ({t}) in [{lo}, {hi}]", str(int(value)))
        return dtype.type(value)
    real = int | float | np.integer | np.floating | ml_dtypes.bfloat16
    if not isinstance(value, real) or isinstance(value, bool):
        raise ArgumentError(name, f"a real number ({t})", _describe(value))
    if _overflows(t, value):
        raise ArgumentError(name, f"a real number within {t}'s range", _describe(value))
    if t is ScalarType.BF16:
        # rounded once from the number's double, as the language's f64 -> bf16 cast rounds;
        # ml_dtypes rounds twice (through f32) before 0.7 and takes no integer past int64
        return convert_scalar(float(value), ScalarType.F64, ScalarType.BF16)
    return dtype.type(value)


# the least magnitude each float type rounds to infinity: its largest value plus half an ulp
_ROUNDS_TO_INFINITY = {
    ScalarType.F16: float.fromhex("0x1.ffep15"),
    ScalarType.BF16: float.fromhex("0x1.ffp127"),
    ScalarType.F32: float.fromhex("0x1.ffffffp127"),
    ScalarType.F64: math.inf,
}


def _overflows(t: ScalarType, value: Any) -> bool:
    """Whether a finite `value` would become an infinity in `t` (an infinity or NaN given is
    kept as it is)."""
    try:
        as_float = float(value)
    except OverflowError:  # an integer past every float
        return True
    if math.isinf(as_float):  # given as one, or a wider float (long double) past f64's range
        return isinstance(value, np.floating) and bool(np.isfinite(value))
    return abs(as_float) >= _ROUNDS_TO_INFINITY[t]


def bind_memref(name: str, t: MemRefType, value: Any) -> MemrefView:
    return MemrefBinder(name, t)(value)


class MemrefBinder:
    """Checks and binds the arrays given for one memref parameter."""

    def __init__(self, name: str, t: MemRefType):
        self.name, self.type = name, t
        self.dtype, self.order, self.static_sizes, self.static_strides = _memref_spec(t)

    def __call__(self, value: Any) -> MemrefView:
        array = value if type(value) is np.ndarray else _as_array(self.name, self.type, value)
        if self.order == 0 and array.shape == (1,):
            array = array.reshape(())
        shape, strides = self._checked_layout(array)
        return MemrefView(array, data_address(array), shape, strides)

    def _checked_layout(self, array: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The array's shape and element strides, after every check of the type."""
        name, t = self.name, self.type
        if array.dtype != self.dtype:
            raise ArgumentError(name, f"{self.dtype} array for {t}", _describe(array))
        shape, itemsize, byte_strides = array.shape, array.itemsize, array.strides
        if len(shape) != self.order:
            raise ArgumentError(
                name, f"array with {self.order} dimensions for {t}", _describe(array)
            )
        if any(s % itemsize for s in byte_strides):
            raise ArgumentError(
                name, "strides that are multiples of the element size", _describe(array)
            )
        strides = tuple(s // itemsize for s in byte_strides)
        for mode, want in self.static_sizes:
            if shape[mode] != want:
                raise ArgumentError(name, f"size {want} in mode {mode} for {t}", _describe(array))
        if self.static_strides and 0 not in shape:  # an empty array's strides address nothing
            for mode, want in self.static_strides:
                if strides[mode] != want and shape[mode] > 1:  # size-1 modes are never stepped
                    raise ArgumentError(
                        name, f"element stride {want} in mode {mode} for {t}", _describe(array)
                    )
        if 1 in shape:
            strides = _normalise_unit_modes(t, shape, strides)
        return shape, strides


class _ArrayInterface(ctypes.Structure):
    """numpy's `PyArrayInterface`, what an array's `__array_struct__` capsule points to."""

    _fields_ = (
        ("two", ctypes.c_int),
        ("nd", ctypes.c_int),
        ("typekind", ctypes.c_char),
        ("itemsize", ctypes.c_int),
        ("flags", ctypes.c_int),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("data", ctypes.c_void_p),
    )


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)


def _capsule_data_address(array: np.ndarray) -> int:
    capsule = array.__array_struct__  # owns the struct: held until it has been read
    return _ArrayInterface.from_address(_capsule_pointer(capsule, None)).data or 0


def _data_pointer_offset() -> int | None:
    """Where an ndarray object keeps its data pointer, or None if that cannot be relied on.
    numpy's `PyArrayObject_fields` (its C ABI) puts it first after the object header, whose
    size is `object.__basicsize__`; in CPython `id` is the object's address. Checked on
    probe arrays against the array interface."""
    if platform.python_implementation() != "CPython":
        return None  # elsewhere `id` need not be an address: never read through it
    offset = object.__basicsize__
    probes = (np.empty(4), np.arange(6.0)[2:], np.zeros((3, 2), order="F").T[1:])
    for probe in probes:
        if _pointer_at(id(probe) + offset).value != _capsule_data_address(probe):
            return None
    return offset


_pointer_at = ctypes.c_void_p.from_address
_DATA_POINTER_OFFSET = _data_pointer_offset()


def data_address(array: np.ndarray) -> int:
    """The address of the array's first element, as `array.ctypes.data` gives it. Read from
    the array object's header where `_data_pointer_offset` allows (a sixth of the time
    `ctypes.data` takes: launches of small kernels read it for every array), else from the
    array interface."""
    if _DATA_POINTER_OFFSET is None:
        return _capsule_data_address(array)
    return _pointer_at(id(array) + _DATA_POINTER_OFFSET).value or 0


def _normalise_unit_modes(
    t: MemRefType, shape: tuple[int, ...], strides: tuple[int, ...]
) -> tuple[int, ...]:
    """A mode of size 1 is never stepped, so its stride is free; numpy gives such modes
    arbitrary strides. The type's stride (if static) replaces it, else the stride of the next
    mode, as a fused mode starting there steps through the next one's elements; the last
    mode takes the packed continuation of the previous one."""
    out = list(strides)
    for mode in reversed(range(len(shape))):
        if shape[mode] != 1:
            continue
        if t.stride[mode] is not DYNAMIC:
            out[mode] = t.stride[mode]
        elif mode + 1 < len(shape):
            out[mode] = out[mode + 1]
        else:
            out[mode] = out[mode - 1] * shape[mode - 1] if mode else 1
    return tuple(out)


@lru_cache(maxsize=1024)
def _memref_spec(
    t: MemRefType,
) -> tuple[np.dtype[Any], int, tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    """What binding checks of a memref type: its dtype, order, and (mode, value) of its
    static sizes and strides (derived once per type: binding runs at every launch)."""
    sizes = tuple((m, s) for m, s in enumerate(t.shape) if s is not DYNAMIC)
    strides = tuple((m, s) for m, s in enumerate(t.stride) if s is not DYNAMIC)
    return numpy_dtype(t.element), t.order, sizes, strides


def bind_group(name: str, t: GroupType, value: Any, needed: int = 0,
               reachable: int | None = None) -> GroupView:  # fmt: skip
    """`needed`: the least number of members (the launch's work-groups, where each loads its
    own); `reachable`: how many the kernel can load (None: all)."""
    offset = t.offset
    if isinstance(value, Group):
        if not isinstance(value.offset, int | np.integer) or isinstance(value.offset, bool):
            raise ArgumentError(name, "an integer group offset", _describe(value.offset))
        if offset is not DYNAMIC and value.offset != offset:
            raise ArgumentError(name, f"offset {offset} for {t}", f"offset {value.offset}")
        offset, value = int(value.offset), value.members
    if offset is DYNAMIC:
        offset = 0
    if not 0 <= offset <= INDEX_MAX:
        raise ArgumentError(name, f"a group offset from 0 to {INDEX_MAX}", str(offset))
    batch = is_foreign_array(value)
    if batch:
        value = _as_array(name, t, value)
        _check_batch_order(name, t, value)  # before counting members along its last axis
        count = value.shape[-1]
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        count = len(value)
    else:
        raise ArgumentError(
            name, f"a sequence of arrays or one batched array for {t}", _describe(value)
        )
    if count < needed:
        raise ArgumentError(
            name, f"at least {needed} group members (indexed by group_id)", str(count)
        )
    view = _bind_batch(name, t, value) if batch else _bind_members(name, t, value)
    used = len(view) if reachable is None else reachable
    # members of a batch differ by a shift of their start: the first and last suffice
    for i in sorted({0, used - 1}) if view.batched else range(used):
        if 0 <= i < len(view):
            _check_shifted_member(f"{name}[{i}]", view.member(i), offset)
    return GroupView(view.addresses, view.shapes, view.strides, offset, view.arrays, view.batched)


def _bind_members(name: str, t: GroupType, members: Sequence[Any]) -> GroupView:
    views = [bind_memref(f"{name}[{i}]", t.memref, m) for i, m in enumerate(members)]
    order = t.memref.order
    return GroupView(
        np.array([v.address for v in views], dtype=np.uint64),
        np.array([v.shape for v in views], dtype=np.int64).reshape(len(views), order),
        np.array([v.strides for v in views], dtype=np.int64).reshape(len(views), order),
        0,
        tuple(v.array for v in views),
        batched=False,
    )


def _check_batch_order(name: str, t: GroupType, batch: np.ndarray) -> None:
    if batch.ndim != t.memref.order + 1:
        raise ArgumentError(
            name,
            f"array with {t.memref.order + 1} dimensions (last one indexes the group) for {t}",
            _describe(batch),
        )


def _bind_batch(name: str, t: GroupType, batch: np.ndarray) -> GroupView:
    """One array whose last axis indexes the group: every member has the layout of member 0,
    which is checked once; the pointer table is computed, not built member by member."""
    _check_batch_order(name, t, batch)
    count = batch.shape[-1]
    if count == 0:
        empty = np.zeros((0, t.memref.order), dtype=np.int64)
        return GroupView(np.zeros(0, dtype=np.uint64), empty, empty, 0, (batch,), batched=True)
    first = bind_memref(f"{name}[0]", t.memref, batch[..., 0])
    step = batch.strides[-1]
    if count > 1 and step % batch.itemsize:  # members would start between elements
        raise ArgumentError(
            name, "strides that are multiples of the element size", _describe(batch)
        )
    addresses = (np.arange(count, dtype=np.int64) * step + first.address).astype(np.uint64)
    shapes = np.broadcast_to(np.array(first.shape, dtype=np.int64), (count, t.memref.order))
    strides = np.broadcast_to(np.array(first.strides, dtype=np.int64), (count, t.memref.order))
    return GroupView(addresses, shapes, strides, 0, (batch,), batched=True)


def _check_shifted_member(name: str, view: MemrefView, offset: int) -> None:
    """Member i is seen `offset` elements after the start of array i, so it reaches past that
    array: it must stay inside the memory the array is a view of (its root base array)."""
    if offset == 0 or 0 in view.shape:
        return
    root = view.array
    while isinstance(root.base, np.ndarray):
        root = root.base
    itemsize = view.array.itemsize
    start = int(view.address) + offset * itemsize  # Python integers: offsets may be huge
    shape, strides = [int(n) for n in view.shape], [int(s) * itemsize for s in view.strides]
    low, high = byte_range(start, shape, strides, itemsize)
    root_low, root_high = byte_range(
        root.__array_interface__["data"][0], root.shape, root.strides, root.itemsize
    )
    if root.size == 0 or low < root_low or high > root_high:
        raise ArgumentError(
            name,
            f"memory for the member {offset} elements after the array's start (group offset)",
            _describe(view.array),
        )


def _as_array(name: str, t: Type, value: Any) -> np.ndarray:
    """The array itself, or a view of a foreign array's memory (torch tensors: no copy)."""
    try:
        array = as_ndarray(value)
    except InteropError as e:
        raise ArgumentError(name, f"an array in CPU memory for {t}", f"{e}") from None
    if array is None:
        raise ArgumentError(name, f"a numpy array for {t}", _describe(value))
    return array


def _describe(value: Any) -> str:
    if is_ndarray(value):
        size = value.itemsize
        if not size or any(s % size for s in value.strides):
            return f"{value.dtype} array of shape {value.shape} with byte strides {value.strides}"
        strides = tuple(s // size for s in value.strides)
        return f"{value.dtype} array of shape {value.shape} with element strides {strides}"
    return f"{type(value).__name__} {value!r}"[:120]
