"""Launching kernels from Python: argument marshalling and the thread pool.

`kernel(*args, group_size=N, num_threads=T)` binds and checks every argument, packs the native
arguments into 8-byte slots (see `nanotc.codegen.abi`), splits work-groups 0..N-1 into T
contiguous chunks and runs them in one native call that releases the GIL: one chunk on the
calling thread, the others on the workers of the native pool (`nanotc.runtime.pool`).
"""

from __future__ import annotations

import ctypes
import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nanotc.codegen import abi
from nanotc.ir.core import Function
from nanotc.runtime.arguments import ArgumentBinder, BoundArgument, GroupView
from nanotc.runtime.pool import pool_for

_PACKED_ENTRY = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64
)


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Kernel:
    """A compiled kernel, callable with numpy arrays and numbers."""

    def __init__(self, func: Function, packed_address: int, owner: object):
        self.function = func
        self.name = func.name
        self._entry = _PACKED_ENTRY(packed_address)
        self._entry_address = packed_address
        self._bind = ArgumentBinder(func)
        self._pack = SlotPacker(abi.flatten(func))
        self._owner = owner  # keeps the machine code alive

    def __call__(self, *args: Any, group_size: int, num_threads: int | None = None) -> None:
        self.prepare(*args, group_size=group_size, num_threads=num_threads)()

    def prepare(self, *args: Any, group_size: int, num_threads: int | None = None) -> Launch:
        """Bind and check the arguments once; the returned Launch runs the kernel on them
        (reading and writing the arrays in place) each time it is called."""
        if not _is_count(group_size) or group_size < 0:
            raise ValueError(f"group_size must be a non-negative integer, got {group_size!r}")
        threads = default_threads() if num_threads is None else num_threads
        if not _is_count(threads) or threads < 1:
            raise ValueError(f"num_threads must be a positive integer, got {num_threads!r}")
        bound = self._bind(args, int(group_size))
        slots, keepalive = self._pack(bound)
        return Launch(self, slots, keepalive, chunk(int(group_size), int(threads)))


def _is_count(value: object) -> bool:
    """A Python or numpy integer; not a bool (True is an int, but never meant as a count)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def chunk(group_size: int, threads: int) -> list[tuple[int, int]]:
    """Contiguous, nearly equal ranges of work-groups, at most one per thread."""
    parts = max(1, min(threads, group_size))
    return [(group_size * i // parts, group_size * (i + 1) // parts) for i in range(parts)]


class Launch:
    """A kernel with bound arguments; each call runs all its work-groups."""

    def __init__(self, kernel: Kernel, slots: ctypes.Array[ctypes.c_uint64],
                 keepalive: list[Any], chunks: list[tuple[int, int]]):  # fmt: skip
        self.kernel = kernel
        self.group_size = chunks[-1][1]
        self._keepalive = (slots, keepalive)
        self._chunks = chunks
        self._slots_at = ctypes.addressof(slots)
        if len(chunks) > 1:  # the pool reads them
            self._bounds = (ctypes.c_int64 * (2 * len(chunks)))(*itertools.chain(*chunks))
            self._bounds_at = ctypes.addressof(self._bounds)

    def __call__(self) -> None:
        kernel, slots, size, chunks = self.kernel, self._slots_at, self.group_size, self._chunks
        if len(chunks) == 1:
            ((lo, hi),) = chunks
            code = kernel._entry(slots, lo, hi, size)
        else:
            pool = pool_for(len(chunks))
            code = pool.run(kernel._entry_address, slots, self._bounds_at, len(chunks), size)
        if code:
            raise MemoryError(
                f"@{self.kernel.name}: could not allocate scratch memory for its allocas"
            )


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
