"""The memory-bandwidth references, timed in C (bench/peers/memory_driver.c): the C library's
memcpy (W5's copy rows) and a stream with the traffic of a sweep of batched gemms (W2's memory
rows).

Built with the C compiler on first use (`cbuild`); `load()` returns the reason instead when it
cannot be, and the workloads then report no reference.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import numpy as np

from bench.peers.cbuild import Unavailable, compile_shared

SOURCE = Path(__file__).with_name("memory_driver.c")


class MemoryDriver:
    def __init__(self, path: Path):
        library = ctypes.CDLL(str(path))
        self._copy = library.bench_memcpy
        self._copy.restype = ctypes.c_double
        self._copy.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_longlong] * 2 + [ctypes.c_int]
        self._stream = library.bench_stream
        self._stream.restype = ctypes.c_double
        self._stream.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_longlong] * 5 + [ctypes.c_int]

    def copy(self, src: np.ndarray, dst: np.ndarray, reps: int, threads: int) -> float:
        """Seconds to copy `src` into `dst` `reps` times, one slice per thread."""
        if src.nbytes != dst.nbytes or not (src.flags.contiguous and dst.flags.contiguous):
            raise ValueError("memcpy: src and dst must be contiguous and of the same size")
        return _seconds(self._copy(dst.ctypes.data, src.ctypes.data, src.nbytes, reps, threads))

    def stream(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, reps: int, threads: int) -> float:
        """Seconds to stream the batches A, B and C (members along the last axis, each member
        contiguous: Fortran order) `reps` times, one slice of members per thread: A's and B's
        members read, C's read and written back unchanged."""
        members = c.shape[-1]
        if any(x.shape[-1] != members or not x.flags.f_contiguous for x in (a, b, c)):
            raise ValueError("stream: A, B and C must be Fortran-ordered batches of one size")
        sizes = [x.nbytes // members for x in (a, b, c)]
        data = [x.ctypes.data for x in (a, b, c)]
        return _seconds(self._stream(*data, *sizes, members, reps, threads))


def _seconds(measured: float) -> float:
    if measured < 0:
        raise RuntimeError("memory driver: thread creation failed")
    return float(measured)


@cache
def load() -> MemoryDriver | str:
    try:
        flags = ["-O3", "-march=native", "-fPIC", "-shared"]
        return MemoryDriver(compile_shared(SOURCE, flags, [["-lpthread"]]))
    except (Unavailable, OSError) as error:
        return str(error)
