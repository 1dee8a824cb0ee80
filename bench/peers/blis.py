"""BLIS as a peer for large GEMMs (W1, W3): libblis's typed API called through ctypes.

`bli_?gemm` takes a row and a column stride per operand, so column-major numpy arrays are passed
as they are. One call is one whole GEMM, so the Python call overhead (microseconds) is noise
next to the milliseconds of work. Debian: `apt-get install libblis-dev`; $NANOTC_BLIS names a
specific libblis.so. Unavailable libraries make `load()` return the reason.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import numpy as np

_DIM = ctypes.c_int64  # dim_t and inc_t (gint_t) in BLIS's default 64-bit integer build
_NO_TRANSPOSE = 0


class Blis:
    """A loaded libblis: C = alpha A B + beta C for fp32/fp64 column-major (or any strided)."""

    def __init__(self, path: str):
        lib = ctypes.CDLL(path)
        lib.bli_info_get_version_str.restype = ctypes.c_char_p
        if lib.bli_info_get_int_type_size() != 64:
            raise OSError("libblis built with 32-bit dim_t (not supported here)")
        lib.bli_arch_query_id.restype = ctypes.c_int
        lib.bli_arch_string.restype = ctypes.c_char_p
        lib.bli_arch_string.argtypes = [ctypes.c_int]
        lib.bli_thread_set_num_threads.argtypes = [_DIM]
        lib.bli_thread_get_num_threads.restype = _DIM
        for name, scalar in (("bli_sgemm", ctypes.c_float), ("bli_dgemm", ctypes.c_double)):
            fn = getattr(lib, name)
            fn.restype = None
            operand = [ctypes.c_void_p, _DIM, _DIM]
            fn.argtypes = (
                [ctypes.c_int, ctypes.c_int, _DIM, _DIM, _DIM, ctypes.POINTER(scalar)]
                + operand * 2
                + [ctypes.POINTER(scalar)]
                + operand
            )
        self._lib = lib
        self.path = path
        self.version: str = lib.bli_info_get_version_str().decode()
        self.arch: str = lib.bli_arch_string(lib.bli_arch_query_id()).decode()

    def describe(self) -> str:
        return f"{self.version} ({self.arch} kernels)"

    @contextmanager
    def threads(self, count: int) -> Iterator[None]:
        before = self._lib.bli_thread_get_num_threads()
        self._lib.bli_thread_set_num_threads(count)
        try:
            yield
        finally:
            self._lib.bli_thread_set_num_threads(max(1, before))

    def gemm(
        self, a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float = 1.0, beta: float = 0.0
    ) -> None:
        """C = alpha A B + beta C for 2-d fp32 or fp64 arrays of any element strides."""
        dtype = c.dtype
        if a.dtype != dtype or b.dtype != dtype or dtype not in (np.float32, np.float64):
            raise TypeError("blis gemm: operands must all be fp32 or all fp64")
        (m, k), (k2, n) = a.shape, b.shape
        if k2 != k or c.shape != (m, n):
            raise ValueError(f"shapes do not match: {a.shape} {b.shape} {c.shape}")
        scalar = ctypes.c_float if dtype == np.float32 else ctypes.c_double
        fn = self._lib.bli_sgemm if dtype == np.float32 else self._lib.bli_dgemm

        def operand(x: np.ndarray) -> list[int]:
            return [x.ctypes.data, x.strides[0] // x.itemsize, x.strides[1] // x.itemsize]

        fn(
            _NO_TRANSPOSE, _NO_TRANSPOSE, m, n, k, ctypes.byref(scalar(alpha)),
            *operand(a), *operand(b), ctypes.byref(scalar(beta)), *operand(c),
        )  # fmt: skip


@cache
def load() -> Blis | str:
    """libblis, or why it is not available."""
    path = os.environ.get("NANOTC_BLIS") or ctypes.util.find_library("blis")
    if not path:
        return "libblis not found (Debian: apt-get install libblis-dev)"
    try:
        with _affinity_kept():
            return Blis(path)
    except (OSError, AttributeError) as error:
        return f"{path} unusable ({error})"


@contextmanager
def _affinity_kept() -> Iterator[None]:
    """The calling thread's CPUs as they were before: Debian's OpenMP libblis, initialised after
    the libxsmm driver is loaded, binds it to CPU 0, and every thread it starts later (nanotc's
    pool workers, the next peer's) would share that one core (the tests after tests/bench ran
    on one core, and benchmarks on two threads would have)."""
    if not hasattr(os, "sched_getaffinity"):
        yield
        return
    cpus = os.sched_getaffinity(0)
    try:
        yield
    finally:
        os.sched_setaffinity(0, cpus)
