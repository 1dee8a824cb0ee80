"""Launching kernels from Python: argument marshalling and the thread pool.

`kernel(*args, group_size=N, num_threads=T)` binds and checks every argument, packs the native
arguments into 8-byte slots (see `nanotc.codegen.abi`), splits work-groups 0..N-1 into T
contiguous chunks and runs them in one native call that releases the GIL: one chunk on the
calling thread, the others on the workers of the native pool (`nanotc.runtime.pool`).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
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
        self._native = abi.flatten(func)
        self._bind = ArgumentBinder(func)
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
        slots, keepalive = pack_slots(self._native, bound)
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

    def __init__(self, kernel: Kernel, slots: np.ndarray, keepalive: list[Any],
                 chunks: list[tuple[int, int]]):  # fmt: skip
        self.kernel = kernel
        self.group_size = chunks[-1][1]
        self._keepalive = (slots, keepalive)
        self._chunks = chunks
        self._bounds = np.array(chunks, dtype=np.int64)
        # addresses read once: reading `.ctypes.data` costs microseconds at every launch
        self._slots_at, self._bounds_at = slots.ctypes.data, self._bounds.ctypes.data

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


def pack_slots(
    native: Sequence[abi.NativeArg], bound: Sequence[BoundArgument]
) -> tuple[np.ndarray, list[Any]]:
    """One 8-byte slot per native argument, plus the arrays the slots point into."""
    keepalive: list[Any] = [bound]
    values = [_slot(arg, bound[arg.param], keepalive) for arg in native]
    return np.array(values or [0], dtype=np.uint64), keepalive


def _slot(arg: abi.NativeArg, value: BoundArgument, keepalive: list[Any]) -> int:
    slot = arg.slot
    if slot is abi.Slot.DATA:
        return value.address  # type: ignore[union-attr]
    if slot is abi.Slot.SCALAR:
        assert isinstance(value, np.generic)
        return int(np.array(value).view(f"u{value.itemsize}"))
    if slot is abi.Slot.SHAPE:
        return _as_u64(value.shape[arg.mode])  # type: ignore[union-attr]
    if slot is abi.Slot.STRIDE:
        return _as_u64(value.strides[arg.mode])  # type: ignore[union-attr]
    assert isinstance(value, GroupView)
    if slot is abi.Slot.OFFSET:
        return _as_u64(value.offset)
    if slot is abi.Slot.MEMBERS:
        table = value.addresses
    elif slot is abi.Slot.MEMBER_SHAPES:
        table = np.ascontiguousarray(value.shapes[:, arg.mode])
    else:
        table = np.ascontiguousarray(value.strides[:, arg.mode])
    if table.size == 0:
        table = np.zeros(1, dtype=table.dtype)  # a valid address even for an empty group
    keepalive.append(table)
    return table.ctypes.data


def _as_u64(value: int) -> int:
    return value & 0xFFFF_FFFF_FFFF_FFFF
