"""The C library's memcpy as the copy-bandwidth reference (bench/peers/memcpy_driver.c).

Built with the C compiler on first use (`cbuild`); `load()` returns the reason instead when it
cannot be, and W5 then reports no `% copy`.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import numpy as np

from bench.peers.cbuild import Unavailable, compile_shared

SOURCE = Path(__file__).with_name("memcpy_driver.c")


class Memcpy:
    def __init__(self, path: Path):
        self._copy = ctypes.CDLL(str(path)).bench_memcpy
        self._copy.restype = ctypes.c_double
        self._copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_longlong] * 2
        self._copy.argtypes += [ctypes.c_int]

    def copy(self, src: np.ndarray, dst: np.ndarray, reps: int, threads: int) -> float:
        """Seconds to copy `src` into `dst` `reps` times, one slice per thread."""
        if src.nbytes != dst.nbytes or not (src.flags.contiguous and dst.flags.contiguous):
            raise ValueError("memcpy: src and dst must be contiguous and of the same size")
        seconds = self._copy(dst.ctypes.data, src.ctypes.data, src.nbytes, reps, threads)
        if seconds < 0:
            raise RuntimeError("memcpy driver: thread creation failed")
        return float(seconds)


@cache
def load() -> Memcpy | str:
    try:
        return Memcpy(compile_shared(SOURCE, ["-O2", "-fPIC", "-shared"], [["-lpthread"]]))
    except (Unavailable, OSError) as error:
        return str(error)
