"""Launching kernels from Python: argument marshalling and the thread pool.

`kernel(*args, group_size=N, num_threads=T)` binds and checks every argument, packs the native
arguments into 8-byte slots (see `nanotc.codegen.abi`), splits work-groups 0..N-1 into T
contiguous chunks and runs them in one native call that releases the GIL: one chunk on the
calling thread, the others on the workers of the native pool (`nanotc.runtime.pool`). Without
`num_threads`, a chunk per available core, but fewer where chunks would take too little work
to pay for a thread (`chunk_groups`). A call whose arrays all have layouts bound before skips
binding (`KnownLayouts`), and runs from native code altogether, pool included, when it
matches the last of them exactly (`fast_launch`); `prepare` binds once for any number of
launches on the same arguments.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

import numpy as np

from nanotc.codegen import abi
from nanotc.ir.core import Function
from nanotc.ir.types import ScalarType
from nanotc.runtime import fast_launch
from nanotc.runtime.arguments import (
    ArgumentBinder,
    ArgumentError,
    BoundArgument,
    GroupView,
    data_address,
)
from nanotc.runtime.fast_launch import (
    DisjointSlots,
    FastLaunch,
    Memref,
    Record,
    Scalar,
    integer_range,
)
from nanotc.runtime.pool import run_chunks, try_published
from nanotc.runtime.writes import byte_range
from nanotc.transforms.flops import gemm_work_per_group

_PACKED_ENTRY = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64
)


@cache
def default_threads() -> int:
    """The CPUs this process may run on when it first launches a kernel without
    `num_threads` (asked once: the system call cost a twentieth of a small launch)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Kernel:
    """A compiled kernel, callable with numpy arrays and numbers."""

    def __init__(self, func: Function, packed_address: int, owner: object):
        self.function = func
        self.name = func.name
        self._entry = _PACKED_ENTRY(packed_address)
        self._entry_address = packed_address
        native = abi.flatten(func)
        self._bind = ArgumentBinder(func)
        self._pack = SlotPacker(native)
        self._chunk_groups = chunk_groups(func)
        self._known = KnownLayouts(func, native, self._bind, packed_address, self._chunk_groups)
        self._fast = self._known.fast
        self._buffers = SlotBuffers(len(native))
        self._owner = owner  # keeps the machine code alive

    def __call__(self, *args: Any, group_size: int, num_threads: int | None = None) -> None:
        fast = self._fast
        if fast is not None:
            code = fast.call(fast.holder_at, args, group_size, num_threads)
            if code >= 0:  # run natively (`fast_launch`)
                _check_code(self, code)
                return
        plain = type(group_size) is int and (num_threads is None or type(num_threads) is int)
        threads_ok = plain and (num_threads is None or 1 <= num_threads <= MAX_THREADS)
        if threads_ok and 0 <= group_size <= _MAX_GROUPS:
            values = self._known.slot_values(args, group_size)
            if values is not None:  # every argument of a layout bound before: no binding
                if num_threads is None:
                    work = default_split(group_size, self._chunk_groups)
                else:
                    work = split(group_size, num_threads)
                buffer = self._buffers.take(values)
                try:
                    _run(self, buffer[1], work)
                finally:
                    self._buffers.give(buffer)
                return
        self.prepare(*args, group_size=group_size, num_threads=num_threads)()

    def prepare(self, *args: Any, group_size: int, num_threads: int | None = None) -> Launch:
        """Bind and check the arguments once; the returned Launch runs the kernel on them
        (reading and writing the arrays in place) each time it is called."""
        if not is_count(group_size) or not 0 <= group_size <= _MAX_GROUPS:
            raise ValueError(
                f"group_size must be an integer from 0 to {_MAX_GROUPS}, got {group_size!r}"
            )
        if num_threads is not None and (
            not is_count(num_threads) or not 1 <= num_threads <= MAX_THREADS
        ):
            raise ValueError(
                f"num_threads must be an integer from 1 to {MAX_THREADS}, got {num_threads!r}"
            )
        bound = self._bind(args, int(group_size))
        slots, keepalive = self._pack(bound)
        self._known.learn(args, bound)
        groups = int(group_size)
        if num_threads is None:
            work = default_split(groups, self._chunk_groups)
        else:
            work = split(groups, int(num_threads))
        return Launch(self, slots, keepalive, work)


_MAX_GROUPS = 2**63 - 1  # the native entry takes the group count as an int64
# the most threads a launch may ask for (fast_launch.ll declines more, as it must): beyond
# any core count, and the pool would otherwise start a thread per chunk, tens of thousands
# before the system refused
MAX_THREADS = 1024

# the f32 FLOPs of a chunk worth a thread of its own: about a microsecond at one core's f32
# peak, what handing a chunk to a worker costs (Zen 4, batched gemms in L2, prepared launches
# on one thread against two: f32 8^3 x 128 and 16^3 x 16 (131 kFLOP) 0.81-0.95x, f64 8^3 x
# 64 0.86x; f32 16^3 x 32 and 32^3 x 4 (262 kFLOP) 1.03x, f64 8^3 x 128 1.08x, 16^3 x 16
# 1.06x, f32 8^3 x 256 1.19x)
MIN_CHUNK_F32_FLOPS = 100_000


def chunk_groups(func: Function) -> int:
    """The fewest work-groups of a kernel that a thread of a launch that does not say
    `num_threads` takes: enough for MIN_CHUNK_F32_FLOPS of f32 work (an f64 FLOP counts
    twice, a 16-bit one half), where the kernel's work is known in FLOPs
    (`flops.gemm_work_per_group`); one for other kernels."""
    work = gemm_work_per_group(func)
    if work is None or not work[0]:
        return 1
    flops, element_bytes = work
    return max(1, math.ceil(MIN_CHUNK_F32_FLOPS * 4 / (flops * element_bytes)))


def is_count(value: object) -> bool:
    """A Python or numpy integer; not a bool (True is an int, but never meant as a count)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def chunk(group_size: int, threads: int) -> list[tuple[int, int]]:
    """Contiguous, nearly equal ranges of work-groups, at most one per thread."""
    parts = max(1, min(threads, group_size))
    return [(group_size * i // parts, group_size * (i + 1) // parts) for i in range(parts)]


@dataclass(frozen=True)
class Split:
    """A launch's work-groups 0..size-1 in chunks (`chunk`), with the chunks' bounds as the
    native pool reads them (int64 begin, end pairs at `bounds_at`)."""

    size: int
    chunks: tuple[tuple[int, int], ...]
    bounds: ctypes.Array[ctypes.c_int64]

    @property
    def bounds_at(self) -> int:
        return ctypes.addressof(self.bounds)


@lru_cache(maxsize=256)
def default_split(group_size: int, fewest_groups: int) -> Split:
    """The split of a launch that does not say `num_threads`: one chunk for each available
    core, but no more than give each at least `fewest_groups` work-groups (`chunk_groups`)."""
    threads = max(1, min(default_threads(), group_size // fewest_groups))
    return split(group_size, threads)


@lru_cache(maxsize=256)
def split(group_size: int, threads: int) -> Split:
    chunks = tuple(chunk(group_size, threads))
    bounds = (ctypes.c_int64 * (2 * len(chunks)))(*itertools.chain(*chunks))
    return Split(group_size, chunks, bounds)


def _run(kernel: Kernel, slots_at: int, work: Split) -> None:
    """All work-groups of one launch: one chunk on the calling thread, the others (if any) on
    the native pool's workers."""
    if len(work.chunks) == 1:
        ((lo, hi),) = work.chunks
        _check_code(kernel, kernel._entry(slots_at, lo, hi, work.size))
    else:
        _run_pooled(kernel, _pool_arguments(kernel, slots_at, work))


PoolArguments = tuple[int, int, int, int, int]
"""What the pool runs a launch's chunks from: the packed entry point, the slots, the chunks'
bounds (addresses), how many chunks and work-groups."""


def _pool_arguments(kernel: Kernel, slots_at: int, work: Split) -> PoolArguments:
    return kernel._entry_address, slots_at, work.bounds_at, len(work.chunks), work.size


def _run_pooled(kernel: Kernel, arguments: PoolArguments) -> None:
    """The chunks on the published pool where it is free, else on the process's pool in
    turn."""
    code = try_published(*arguments)
    if code is None:
        code = run_chunks(*arguments)
    _check_code(kernel, code)


def _check_code(kernel: Kernel, code: int) -> None:
    """Raises what a launch's native return code reports."""
    if code:
        raise MemoryError(f"@{kernel.name}: could not allocate scratch memory for its allocas")


class Launch:
    """A kernel with bound arguments; each call runs all its work-groups."""

    def __init__(self, kernel: Kernel, slots: ctypes.Array[ctypes.c_uint64],
                 keepalive: list[Any], work: Split):  # fmt: skip
        self.kernel = kernel
        self.group_size = work.size
        self._keepalive = (slots, keepalive)
        self._work = work
        self._slots_at = ctypes.addressof(slots)
        # read once: a launch of a few microseconds felt each lookup
        pooled = len(work.chunks) > 1
        self._pooled = _pool_arguments(kernel, self._slots_at, work) if pooled else None

    def __call__(self) -> None:
        if self._pooled is None:
            _run(self.kernel, self._slots_at, self._work)
        else:
            _run_pooled(self.kernel, self._pooled)


class SlotPacker:
    """Packs a launch's bound arguments into the 8-byte slots of the packed entry point (one
    per native argument). What each slot reads is derived once per kernel, as binding is."""

    def __init__(self, native: Sequence[abi.NativeArg]):
        self._readers = [(arg.param, _slot_reader(arg)) for arg in native]

    def __call__(
        self, bound: Sequence[BoundArgument]
    ) -> tuple[ctypes.Array[ctypes.c_uint64], list[Any]]:
        """The slots, and what must stay alive while they are used (the arrays they point to)."""
        keepalive: list[Any] = [bound]
        values = [read(bound[param], keepalive) for param, read in self._readers]
        return (ctypes.c_uint64 * max(len(values), 1))(*values), keepalive


class KnownLayouts:
    """An inline cache in front of binding and packing. A memref argument's slots are its data
    address and, from its layout (dtype, shape, strides), its dynamic sizes and strides. Once
    binding has accepted a launch's numpy arrays (of type ndarray itself, whose attributes
    are plain), the layouts of all of them together are remembered with the slots they give,
    so a later launch whose arrays have those layouts skips binding: one lookup, then it
    reads their addresses and scalars into a copy of the slots (a launch of a batched 8^3
    gemm on three arrays takes 4.9 us here, 5.4 with a lookup per array, 19-27 with
    binding; 1.1 natively, `fast_launch`, which these combinations feed). Anything else (a
    new combination, a group, a foreign array, an error to report) takes the binding path,
    which is the only one that checks, and learns from it.

    Binding's checks depend on nothing but the layouts (so sizes the kernel pairs,
    `nanotc.runtime.extents`, hold for a combination it accepted), the group_size and what
    the kernel's writes ask (`nanotc.runtime.writes`). So a launch here tests that group_size
    is within the extents of the modes every work-group indexes by its id, that the arrays it
    writes are writeable, and compares the byte ranges of arrays that must not share memory;
    ranges that meet take the binding path, which tests the arrays exactly."""

    _KEPT = 64  # combinations of layouts remembered before the memory is reset

    def __init__(self, func: Function, native: Sequence[abi.NativeArg], bind: ArgumentBinder,
                 entry: int, fewest_groups: int):  # fmt: skip
        params = [[a for a in native if a.param == i] for i in range(len(func.arguments))]
        first_slot: dict[int, int] = {}  # a parameter's first slot: a memref's data address
        for k, arg in enumerate(native):
            first_slot.setdefault(arg.param, k)
        self._count = len(params)
        self._slots = len(native)
        self._first_slot = first_slot
        tails = [_tail_readers(p) for p in params]
        scalars = [_scalar_slot(p, bind, i) for i, p in enumerate(params)]
        self._enabled = all(r is not None or s is not None for r, s in zip(tails, scalars))
        self._tail_readers = {i: readers for i, readers in enumerate(tails) if readers is not None}
        self._memrefs = tuple(self._tail_readers)
        self._pick = _picker(self._memrefs)
        self._data_slots = tuple((i, first_slot[i]) for i in self._memrefs)
        self._scalar_slots = tuple(
            (i, first_slot[i], read) for i, read in enumerate(scalars) if read is not None
        )
        self._written = tuple(bind.written)  # parameters whose arrays must be writeable
        self._disjoint = tuple((p.output, p.operand) for p in bind.disjoint)
        self._group_indexed = tuple((g.param, g.mode) for g in bind.group_indexed)
        self._known: dict[tuple[Any, ...], KnownLayout] = {}
        self.fast = self._fast_launch(func, entry, fewest_groups)

    def _fast_launch(self, func: Function, entry: int, fewest_groups: int) -> FastLaunch | None:
        """The kernel's native launch, where this interpreter and the parameters allow one."""
        scalars = [Scalar(p, slot, func.arguments[p].type) for p, slot, _ in self._scalar_slots]
        if not (self._enabled and fast_launch.available()):
            return None
        written = set(self._written)
        memrefs = [Memref(p, slot, p in written) for p, slot in self._data_slots]
        return FastLaunch(func, entry, fewest_groups, default_threads(), memrefs, scalars)

    def slot_values(self, args: Sequence[Any], group_size: int) -> list[int] | None:
        """The launch's slot values, or None if binding has to look at an argument."""
        if not self._enabled or len(args) != self._count:
            return None
        arrays = self._pick(args)
        for array in arrays:
            if type(array) is not np.ndarray:  # its attributes are not even asked for
                return None
        known = self._known.get(tuple(map(_layout, arrays)))
        if known is None or group_size > known.max_groups:
            return None  # a new combination, or fewer elements than work-groups
        values = known.slots.copy()
        for param, slot in self._data_slots:
            values[slot] = data_address(args[param])
        for param, slot, read in self._scalar_slots:
            bits = read(args[param])
            if bits is None:
                return None
            values[slot] = bits
        for param in self._written:
            if not args[param].flags.writeable:
                return None
        for x_slot, y_slot, (x_low, x_high), (y_low, y_high) in known.disjoint:
            at_x, at_y = values[x_slot], values[y_slot]
            if at_x + x_low < at_y + y_high and at_y + y_low < at_x + x_high:
                return None  # their ranges meet: binding tests whether they share memory
        if self.fast is not None:
            self.fast.use(known.native)  # the next launch like this one runs natively
        return values

    def learn(self, args: Sequence[Any], bound: Sequence[BoundArgument]) -> None:
        """Remembers the layouts of the memref arguments of a launch binding accepted."""
        if not self._enabled or any(type(args[i]) is not np.ndarray for i in self._memrefs):
            return
        if len(self._known) >= self._KEPT:
            if self.fast is not None:
                self.fast.use(None)  # its record is about to be freed
            self._known.clear()
        slots = [0] * self._slots
        spans: dict[int, tuple[int, int] | None] = {}
        for param, readers in self._tail_readers.items():
            first, value = self._first_slot[param], args[param]
            slots[first + 1 : first + 1 + len(readers)] = [r(bound[param], []) for r in readers]
            empty = value.size == 0
            spans[param] = None if empty else byte_range(0, value.shape, value.strides,
                                                         value.itemsize)  # fmt: skip
        disjoint = tuple(
            (self._first_slot[x], self._first_slot[y], spans[x], spans[y])
            for x, y in self._disjoint
            if spans.get(x) is not None and spans.get(y) is not None
        )
        max_groups = min((args[p].shape[m] for p, m in self._group_indexed), default=_MAX_GROUPS)
        key = tuple(map(_layout, self._pick(args)))
        native = None if self.fast is None else self.fast.record(args, slots, disjoint, max_groups)
        self._known[key] = KnownLayout(slots, disjoint, max_groups, native)
        if self.fast is not None:
            self.fast.use(native)


_layout = attrgetter("dtype", "shape", "strides")


def _picker(indices: tuple[int, ...]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """The arguments at `indices`, as a tuple (itemgetter returns one index's bare)."""
    if len(indices) == 1:
        (index,) = indices
        return lambda args: (args[index],)
    return itemgetter(*indices) if indices else lambda args: ()


class KnownLayout(NamedTuple):
    """A combination of layouts binding accepted: the launch's slots but for the data
    addresses and scalars, the byte ranges (relative to their data slots) of arrays that must
    not share memory, and the most work-groups its group-indexed modes allow."""

    slots: list[int]
    disjoint: tuple[DisjointSlots, ...]
    max_groups: int
    native: Record | None  # the same for native launches (`fast_launch`)


class SlotBuffers:
    """Reusable slot arrays for launches that skip binding: filling one costs a third of
    creating one. Each launch takes its own from a free list (list operations are atomic),
    so launches of one kernel from several Python threads never share one."""

    def __init__(self, count: int):
        self._type = ctypes.c_uint64 * max(count, 1)
        self._free: list[SlotBuffer] = []

    def take(self, values: list[int]) -> SlotBuffer:
        """A slot array holding `values`, and its address; `give` it back after the launch."""
        try:
            buffer = self._free.pop()
        except IndexError:
            slots = self._type()
            buffer = (slots, ctypes.addressof(slots))
        buffer[0][: len(values)] = values
        return buffer

    def give(self, buffer: SlotBuffer) -> None:
        self._free.append(buffer)


SlotBuffer = tuple[ctypes.Array[ctypes.c_uint64], int]


def _tail_readers(param: Sequence[abi.NativeArg]) -> list[SlotReader] | None:
    """A memref parameter's readers of its slots after the data pointer; None for others."""
    if not param or param[0].slot is not abi.Slot.DATA:
        return None
    return [_slot_reader(arg) for arg in param[1:]]


def _scalar_slot(
    param: Sequence[abi.NativeArg], bind: ArgumentBinder, index: int
) -> Callable[[Any], int | None] | None:
    """A scalar parameter's slot from a launch argument, or None where binding refuses it (so
    that binding reports the error); None for other parameters."""
    if len(param) != 1 or param[0].slot is not abi.Slot.SCALAR:
        return None
    bind_one, read = bind.binder(index), _slot_reader(param[0])
    plain = _plain_number_slot(bind.func.arguments[index].type)

    def slot(value: Any) -> int | None:
        if plain is not None:
            bits = plain(value)
            if bits is not None:
                return bits
        try:
            return read(bind_one(value, 0), [])
        except ArgumentError:
            return None

    return slot


# a Python float's bits in each float type: the C conversion, nearest even, as numpy's; packing
# raises OverflowError exactly where a finite value would round to an infinity, which binding
# refuses (bf16 has no struct format)
_FLOAT_BITS = {
    ScalarType.F16: (struct.Struct("<e").pack, struct.Struct("<H").unpack),
    ScalarType.F32: (struct.Struct("<f").pack, struct.Struct("<I").unpack),
    ScalarType.F64: (struct.Struct("<d").pack, struct.Struct("<Q").unpack),
}


def _plain_number_slot(t: Any) -> Callable[[Any], int | None] | None:
    """The slot of a Python float (float parameters) or int (integer ones) without binding,
    which costs twenty times as much and dominated small launches; None where binding must
    look: other types, values out of range, f16 NaNs (whose payloads struct does not keep)."""
    if not isinstance(t, ScalarType):
        return None
    if t.is_int:
        lo, hi, mask = integer_range(t)

        def integer(value: Any) -> int | None:
            if type(value) is int and lo <= value <= hi:
                return value & mask
            return None

        return integer
    if t not in _FLOAT_BITS:
        return None
    pack, unpack = _FLOAT_BITS[t]
    keeps_nan = t is not ScalarType.F16

    def real(value: Any) -> int | None:
        if type(value) is not float or not (keeps_nan or value == value):
            return None
        try:
            return unpack(pack(value))[0]
        except OverflowError:
            return None

    return real


SlotReader = Callable[[Any, list[Any]], int]
"""The slot value of one native argument, from its parameter's bound argument; tables it
points to are appended to the keep-alive list."""


def _slot_reader(arg: abi.NativeArg) -> SlotReader:
    slot, mode = arg.slot, arg.mode
    if slot is abi.Slot.DATA:
        return lambda value, _: value.address
    if slot is abi.Slot.SCALAR:
        return lambda value, _: int(np.array(value).view(f"u{value.itemsize}"))
    if slot is abi.Slot.SHAPE:
        return lambda value, _: _as_u64(value.shape[mode])
    if slot is abi.Slot.STRIDE:
        return lambda value, _: _as_u64(value.strides[mode])
    if slot is abi.Slot.OFFSET:
        return lambda value, _: _as_u64(value.offset)
    return lambda value, keepalive: _table_address(arg, value, keepalive)


def _table_address(arg: abi.NativeArg, value: GroupView, keepalive: list[Any]) -> int:
    """A group's member pointers, or one dynamic size or stride of every member."""
    if arg.slot is abi.Slot.MEMBERS:
        table = value.addresses
    elif arg.slot is abi.Slot.MEMBER_SHAPES:
        table = np.ascontiguousarray(value.shapes[:, arg.mode])
    else:
        table = np.ascontiguousarray(value.strides[:, arg.mode])
    if table.size == 0:
        table = np.zeros(1, dtype=table.dtype)  # a valid address even for an empty group
    keepalive.append(table)
    return table.ctypes.data


def _as_u64(value: int) -> int:
    return value & 0xFFFF_FFFF_FFFF_FFFF
