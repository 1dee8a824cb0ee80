"""Native launches on argument layouts seen before: a launch of a few microseconds in Python
becomes one native call (`fast_launch.ll`).

A kernel launch that binding has accepted teaches the launcher its layouts
(`launcher.KnownLayouts`); this module turns such a combination into a record of words that
native code compares a later launch's arguments against: each array's type object, dtype
object, rank, shape, strides and writeability, each scalar's type and range, the byte ranges of
arrays that must not share memory, the most work-groups and how launcher.py splits them into
chunks. A launch that matches runs from native code with the GIL released; any other declines,
having changed nothing, and takes the Python path, which checks and reports. One record per
kernel is in use: the combination last learned or last launched through the Python path.
Work-groups split into several chunks run on the process's thread pool where no other launch
has it (`pool.PUBLISHED`).

The native code reads Python objects at fixed offsets (CPython with the GIL, numpy's array
struct and scalars). They are checked on probe objects once per process: where one differs
(another interpreter, a free-threaded build, a numpy of another layout) there is no native
path and every launch takes the Python one; where a numpy scalar type's differs, its scalars
take the Python path.
"""

from __future__ import annotations

import ctypes
import platform
import sys
import sysconfig
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from typing import Any, NamedTuple

import llvmlite.binding as llvm
import ml_dtypes
import numpy as np

from nanotc import targets
from nanotc.ir.core import Function
from nanotc.ir.types import ScalarType
from nanotc.runtime import cache as kernel_cache
from nanotc.runtime import pool
from nanotc.runtime.interrupts import uninterrupted
from nanotc.runtime.jit import JitModule, ObjectModule

_HEADER_WORDS = 24
_MEMREF_WORDS = 6  # fast_launch.ll's memref entries; its scalar and pair entries are 6 too
_KIND = {ScalarType.F64: 0, ScalarType.F32: 1, ScalarType.F16: 3, ScalarType.BF16: 4}
_INTEGER_KIND = 2
_PYTHON_API = ("PyEval_SaveThread", "PyEval_RestoreThread", "PyLong_AsLongLongAndOverflow")
# the GIL held while it checks; ctypes then raises any error native code left set (none)
_NATIVE_CALL = ctypes.PYFUNCTYPE(
    ctypes.c_int32, ctypes.c_void_p, ctypes.py_object, ctypes.py_object, ctypes.py_object
)


def integer_range(t: ScalarType) -> tuple[int, int, int]:
    """The lowest and highest value of an integer type, and the mask of its slot's bits."""
    if t is ScalarType.I1:
        return 0, 1, 1
    return -(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1, (1 << t.bits) - 1


class Memref(NamedTuple):
    """A memref parameter as a record describes it: its index, its data slot, and whether the
    kernel writes it."""

    param: int
    slot: int
    written: bool


class Scalar(NamedTuple):
    """A scalar parameter: its index, its slot and its type."""

    param: int
    slot: int
    type: ScalarType


DisjointSlots = tuple[int, int, tuple[int, int], tuple[int, int]]
"""Two data slots whose arrays must not share memory, and their byte ranges relative to the
data addresses."""


class Record(NamedTuple):
    """A layout record's words, their address, and the dtype objects whose addresses they
    hold (kept alive, so that no other object takes those addresses)."""

    words: np.ndarray
    address: int
    dtypes: tuple[np.dtype, ...]


class FastLaunch:
    """One kernel's native launch: `call(holder_at, args, group_size, num_threads)` (the
    launch's own arguments, a tuple and two objects) runs a launch whose arguments match the
    record in use and returns the kernel's code, or returns -1 for the Python path."""

    def __init__(self, func: Function, entry: int, fewest_groups: int, default_threads: int,
                 memrefs: Sequence[Memref], scalars: Sequence[Scalar]):  # fmt: skip
        self.call = _NATIVE_CALL(native_code().address("nanotc_fast_launch"))
        self._argument_count = len(func.arguments)
        self._entry = entry
        self._fewest_groups = fewest_groups  # launcher.default_split's arguments
        self._default_threads = default_threads
        self._memrefs = tuple(memrefs)
        self._scalars = tuple(scalars)
        self._holder = ctypes.c_void_p(0)
        self.holder_at = ctypes.addressof(self._holder)
        self._in_use: Record | None = None

    def use(self, record: Record | None) -> None:
        """Launches from now on match against `record` (None: all take the Python path)."""
        self._in_use = record  # before the holder points at it: never at freed words
        self._holder.value = None if record is None else record.address

    def record(self, args: Sequence[Any], slots: list[int], disjoint: Sequence[DisjointSlots],
               max_groups: int) -> Record:  # fmt: skip
        """The record of the layouts of `args` (numpy arrays binding accepted): launches with
        `slots` but for the data addresses and scalars, the pairs of `disjoint` apart, and at
        most `max_groups` work-groups."""
        memrefs, extents = self._memref_words(args)
        scalars = [w for s in self._scalars for w in _scalar_words(s)]
        pairs = [w for x, y, (xl, xh), (yl, yh) in disjoint for w in (x, y, xl, xh, yl, yh)]
        at_memrefs = _HEADER_WORDS
        at_scalars = at_memrefs + len(memrefs)
        at_pairs = at_scalars + len(scalars)
        at_template = at_pairs + len(pairs)
        at_extents = at_template + len(slots)
        header = [
            self._argument_count, len(slots), self._entry, max_groups, self._fewest_groups,
            len(self._memrefs), at_memrefs, len(self._scalars), at_scalars,
            len(disjoint), at_pairs, at_template,
            id(np.ndarray), id(float), id(int), id(None), self._default_threads,
            ctypes.addressof(pool.PUBLISHED), *numpy_scalar_types(),
        ]  # fmt: skip
        for m in range(len(self._memrefs)):  # extents' offsets: relative until now
            memrefs[m * _MEMREF_WORDS + 5] += at_extents
        unsigned = [*header, *memrefs, *scalars, *pairs, *slots, *extents]
        as_signed = [w - (1 << 64) if w >= 1 << 63 else w for w in unsigned]
        dtypes = tuple(args[m.param].dtype for m in self._memrefs)
        words = np.array(as_signed, dtype=np.int64)
        return Record(words, words.ctypes.data, dtypes)

    def _memref_words(self, args: Sequence[Any]) -> tuple[list[int], list[int]]:
        """The memref entries (extents' offsets relative to the extents' words) and extents."""
        entries: list[int] = []
        extents: list[int] = []
        for m in self._memrefs:
            array = args[m.param]
            entries += [m.param, m.slot, id(array.dtype), array.ndim, int(m.written), len(extents)]
            extents += [*array.shape, *array.strides]
        return entries, extents


def _scalar_words(scalar: Scalar) -> list[int]:
    if scalar.type in _KIND:
        return [scalar.param, scalar.slot, _KIND[scalar.type], 0, 0, 0]
    return [scalar.param, scalar.slot, _INTEGER_KIND, *integer_range(scalar.type)]


@lru_cache(maxsize=1)
@uninterrupted
def native_code() -> ObjectModule | JitModule:
    """fast_launch.ll's machine code (from the kernel cache), loaded once per process with the
    Python API it calls bound."""
    for name in _PYTHON_API:
        llvm.add_symbol(name, ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value)
    text = resources.files(__package__).joinpath("fast_launch.ll").read_text()
    return kernel_cache.runtime_module("fast_launch.ll", text, targets.host())


@lru_cache(maxsize=1)
def available() -> bool:
    """Whether this interpreter's objects have the layouts fast_launch.ll reads."""
    if platform.python_implementation() != "CPython" or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return False
    if ctypes.sizeof(ctypes.c_void_p) != 8 or sys.byteorder != "little":
        return False
    return _objects_as_expected() and _arrays_as_expected()


def _word(address: int) -> int:
    return ctypes.c_int64.from_address(address).value


def _objects_as_expected() -> bool:
    probes = (1.5, -0.0, (1, "a", None), (), 7)
    if any(_word(id(p) + 8) != id(type(p)) for p in probes):
        return False
    for t in ((1.5, 2), (), (None,)):
        if _word(id(t) + 16) != len(t) or any(_word(id(t) + 24 + 8 * i) != id(v) for i, v in
                                               enumerate(t)):  # fmt: skip
            return False
    return all(ctypes.c_double.from_address(id(f) + 16).value == f for f in (1.5, -3e300))


# the scalar types whose values native launches read, in the record's order
_SCALAR_PROBES = (
    np.float64(-1.5),
    np.float32(-1.5),
    np.float16(-1.5),
    np.int64(-7 << 40),
    np.int32(-7),
    ml_dtypes.bfloat16(-1.5),
)


@lru_cache(maxsize=1)
def numpy_scalar_types() -> tuple[int, ...]:
    """The addresses of numpy's float64, float32, float16, int64 and int32 scalar types and of
    ml_dtypes' bfloat16, as fast_launch.ll's record holds them: 0 for a type whose probe does
    not hold its value where the native code reads it (its scalars take the Python path)."""
    return tuple(id(type(probe)) if _holds_at_16(probe) else 0 for probe in _SCALAR_PROBES)


def _holds_at_16(probe: np.generic) -> bool:
    """Whether a numpy scalar's object has its type at 8 and its value's bytes at 16."""
    value = np.array(probe).tobytes()
    return (
        _word(id(probe) + 8) == id(type(probe))
        and ctypes.string_at(id(probe) + 16, len(value)) == value
    )


def _arrays_as_expected() -> bool:
    read_only = np.arange(6.0).reshape(2, 3)[:, 1:]
    read_only.flags.writeable = False
    for array in (np.zeros((3, 2), order="F")[1:], np.empty(5, np.float32), read_only):
        at = id(array)
        shape_at, strides_at = _word(at + 32), _word(at + 40)
        if (
            _word(at + 16) != array.ctypes.data
            or ctypes.c_int32.from_address(at + 24).value != array.ndim
            or _word(at + 56) != id(array.dtype)
            or bool(ctypes.c_int32.from_address(at + 64).value & 0x400) != array.flags.writeable
            or [_word(shape_at + 8 * i) for i in range(array.ndim)] != list(array.shape)
            or [_word(strides_at + 8 * i) for i in range(array.ndim)] != list(array.strides)
        ):
            return False
    return True
