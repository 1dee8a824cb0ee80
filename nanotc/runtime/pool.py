"""The native thread pool that runs the chunks of a multi-threaded launch.

A launch over T threads hands T - 1 chunks of work-groups to the pool's workers and runs the
last one on the calling thread, all in one native call (`NativePool.run`), which releases the
GIL. The workers are native threads running `pool.ll`, compiled by the JIT once per process:
after each chunk a worker spins on its mailbox for about `SPIN_CYCLES` timestamp-counter
ticks, so a launch that follows soon after another starts without an operating-system
wakeup, then sleeps on a condition variable. The caller runs any chunk whose worker has not
claimed it by the time the caller's own chunk is done, so a worker that is asleep or has lost
its core to another process does not hold the launch up. (A `ThreadPoolExecutor` took 45 µs
more per two-thread launch than one thread did: a queue, a future and two thread wakeups.)

One process-wide pool serves every launch, one launch at a time; it grows when a launch asks
for more threads than it has. Native launches (`fast_launch`) use the pool `PUBLISHED` for
them only when no other launch has it and it has the workers they need; otherwise they
decline, and the launch takes the Python path here, which tries the same first
(`try_published`: no Python lock to take) and otherwise waits its turn. Its threads are
joined at exit, before the JIT frees their code. The code is compiled once per process and
kept: a child process forked from this one starts threads of its own on the code it
inherited, and neither frees the parent's pool nor calls into LLVM to do so (another parent
thread may have held llvmlite's lock at the fork, and the child would wait on it forever).
Ctrl-C waits until a start or stop is done and recorded (`interrupts.interrupts_held`), so
the workers running always match the pool's count.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
from functools import lru_cache
from importlib import resources

import llvmlite.binding as llvm
import numpy as np

from nanotc import targets
from nanotc.runtime import cache as kernel_cache
from nanotc.runtime.interrupts import interrupts_held, uninterrupted

# About 100 µs at this machine's 2.6 GHz timestamp counter: covers the Python work (argument
# binding, the caller's own loop) between the launches of a loop of small kernels.
SPIN_CYCLES = 1 << 18
_MAILBOX_BYTES = 128  # as in pool.ll
_POOL_BYTES = 256

_START = ctypes.CFUNCTYPE(
    ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p
)
_STOP = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)
_RUN = ctypes.CFUNCTYPE(
    ctypes.c_int32,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_int64,
)


class PoolError(RuntimeError):
    """The operating system would not start the pool's threads."""


def pool_source(spin_cycles: int = SPIN_CYCLES) -> str:
    """pool.ll with a spin budget and this host's spin-wait hint filled in."""
    text = resources.files(__package__).joinpath("pool.ll").read_text()
    x86 = llvm.get_process_triple().startswith(("x86_64", "i386", "i686"))
    pause = 'call void asm sideeffect "pause", ""()' if x86 else ""
    return text.replace("@SPIN_CYCLES@", str(spin_cycles)).replace("@PAUSE@", pause)


class _PoolCode:
    """pool.ll's machine code and its three entry points."""

    def __init__(self, spin_cycles: int):
        self.module = kernel_cache.runtime_module("pool.ll", pool_source(spin_cycles),
                                                  targets.host())  # fmt: skip
        self.start = _START(self.module.address("nanotc_pool_start"))
        self.stop = _STOP(self.module.address("nanotc_pool_stop"))
        self.run = _RUN(self.module.address("nanotc_pool_run"))
        self.try_run_address = self.module.address("nanotc_pool_try_run")
        self.try_run = _RUN(self.try_run_address)


@lru_cache
@uninterrupted
def _pool_code(spin_cycles: int) -> _PoolCode:
    """Compiled once per process and spin budget, kept until exit (and in forked children)."""
    return _PoolCode(spin_cycles)


class NativePool:
    """`workers` native threads; `run` executes one launch's chunks on them. Workers spin for
    `spin_cycles` after each chunk (0: they always sleep)."""

    def __init__(self, workers: int, spin_cycles: int = SPIN_CYCLES):
        self.workers = workers
        self._code = _pool_code(spin_cycles)
        self._state = _aligned_zeros(_POOL_BYTES)
        self._boxes = _aligned_zeros(_MAILBOX_BYTES * max(workers, 1))
        self._threads = np.zeros(max(workers, 1), dtype=np.uint64)
        # addresses read once: reading `.ctypes.data` costs microseconds at every launch
        self._state_at, self._boxes_at = self._state.ctypes.data, self._boxes.ctypes.data
        self._run = self._code.run
        self._lock = threading.Lock()
        try:
            with interrupts_held():
                self._start()
        except KeyboardInterrupt:  # noted during the start: the workers run, stop them
            self.stop()
            raise

    def run(self, entry: int, slots: int, bounds: int, chunks: int, size: int) -> int | None:
        """Runs work-groups [bounds[2c], bounds[2c + 1]) (int64 at address `bounds`) of a
        launch of `size` work-groups for each chunk c < `chunks` through the packed entry
        point at `entry`; returns the bitwise or of its return codes. None, having run
        nothing, when the pool has fewer than chunks - 1 workers: another thread stopped it
        (to grow the process's pool) since this one was handed it."""
        assert chunks >= 1
        with self._lock:
            if chunks > self.workers + 1:
                return None
            return self._run(self._state_at, self._boxes_at, entry, slots, bounds, chunks, size)

    @uninterrupted
    def stop(self) -> None:
        """Joins the workers; waits for a launch in progress to finish first."""
        with self._lock:
            self._call_stop(self.workers)
            self.workers = 0

    def _start(self) -> None:
        started = self._code.start(
            self._state_at, self._boxes_at, self.workers, self._threads.ctypes.data
        )
        if started < self.workers:
            self._call_stop(started)
            raise PoolError(f"could not start {self.workers} worker threads (started {started})")

    def _call_stop(self, workers: int) -> None:
        self._code.stop(self._state_at, self._boxes_at, workers, self._threads.ctypes.data)


def _aligned_zeros(size: int, alignment: int = 128) -> np.ndarray:
    """`size` zero bytes starting on an `alignment` boundary (mailboxes own whole lines)."""
    raw = np.zeros(size + alignment, dtype=np.uint8)
    skip = -raw.ctypes.data % alignment
    return raw[skip : skip + size]


_pool_lock = threading.Lock()
_pool: NativePool | None = None

PUBLISHED = (ctypes.c_int64 * 3)()
"""The process's pool for native launches (`fast_launch.ll`): the addresses of its state, its
mailboxes and `nanotc_pool_try_run`; zeros while there is none."""
_published: list[NativePool] = []  # never freed: a native launch may hold one's addresses


# `PUBLISHED` for `try_published`: its try_run as a callable, the state's and the mailboxes'
# addresses (reading them from PUBLISHED took a third of a microsecond)
_published_try_run: tuple[ctypes._CFuncPtr, int, int] | None = None


def _publish(pool: NativePool | None) -> None:
    global _published_try_run
    if pool is None:
        PUBLISHED[:] = [0, 0, 0]
        _published_try_run = None
        return
    _published.append(pool)
    PUBLISHED[:] = [pool._state_at, pool._boxes_at, pool._code.try_run_address]
    _published_try_run = (pool._code.try_run, pool._state_at, pool._boxes_at)


def pool_for(chunks: int) -> NativePool:
    """The process's pool, started or grown so that it runs `chunks` chunks at once."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool.workers < chunks - 1:
            with interrupts_held():  # Ctrl-C after the new pool is recorded, not before
                _publish(None)
                if _pool is not None:
                    _pool.stop()
                _pool = NativePool(chunks - 1)
                _publish(_pool)
        return _pool


def try_published(entry: int, slots: int, bounds: int, chunks: int, size: int) -> int | None:
    """The chunks run as a native launch runs them (`nanotc_pool_try_run` on the pool
    `PUBLISHED`), without Python's locks: the return code, or None, having run nothing,
    where there is no published pool, another launch has it or it has too few workers
    (`run_chunks` then waits its turn, or grows the pool). Saves a prepared launch of two
    chunks about a microsecond of the three its locks and calls took."""
    published = _published_try_run
    if published is None:
        return None
    try_run, state, boxes = published
    code = try_run(state, boxes, entry, slots, bounds, chunks, size)
    return None if code < 0 else code


def run_chunks(entry: int, slots: int, bounds: int, chunks: int, size: int) -> int:
    """`NativePool.run` on the process's pool, started or grown as needed; looked up again
    when another Python thread replaced it between the lookup and the run."""
    while True:
        code = pool_for(chunks).run(entry, slots, bounds, chunks, size)
        if code is not None:
            return code


def _shutdown() -> None:
    global _pool
    with _pool_lock:
        _publish(None)
        if _pool is not None:
            _pool.stop()
            _pool = None


_inherited: list[NativePool] = []  # the parent's pools, never freed in a forked child


def _forget_in_child() -> None:
    """A forked child has none of the parent's threads: its launches start a new pool. The
    parent's stays referenced, as freeing it could free LLVM objects of the parent's."""
    global _pool, _pool_lock
    _publish(None)
    if _pool is not None:
        _inherited.append(_pool)
    _pool, _pool_lock = None, threading.Lock()


atexit.register(_shutdown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
