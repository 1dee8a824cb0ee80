"""The level-1 and level-2 CBLAS routines of numpy's own OpenBLAS, called through ctypes.

numpy has no in-place axpby, gemv with beta or ger, so the memory-bound workload (W5) calls the
BLAS numpy already loaded (found by `threads`, which sets its thread count) for them. Wheels
export the routines under prefixed names with 64-bit integers (`scipy_cblas_saxpby64_`),
distributions under plain ones (`cblas_saxpby`); both are tried. Matrices are column-major.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cache

import numpy as np

from bench.peers.threads import loaded_openblas

COL_MAJOR, NO_TRANS, TRANS = 102, 111, 112  # CBLAS enum values
_PATTERNS = (("scipy_cblas_{}64_", ctypes.c_int64), ("cblas_{}64_", ctypes.c_int64))
_PATTERNS += (("cblas_{}", ctypes.c_int),)


@dataclass(frozen=True)
class Cblas:
    """CBLAS entry points of one library; `call(name, dtype)` picks the s or d routine."""

    lib: ctypes.CDLL
    pattern: str
    integer: type[ctypes.c_int] | type[ctypes.c_int64]
    path: str

    def routine(self, name: str, dtype: np.dtype) -> ctypes._CFuncPtr:
        prefix = {np.dtype(np.float32): "s", np.dtype(np.float64): "d"}[np.dtype(dtype)]
        return getattr(self.lib, self.pattern.format(prefix + name))

    def _scalar(self, dtype: np.dtype, value: float) -> ctypes.c_float | ctypes.c_double:
        return (ctypes.c_float if np.dtype(dtype) == np.float32 else ctypes.c_double)(value)

    def copy(self, x: np.ndarray, y: np.ndarray) -> None:
        """y := x."""
        i = self.integer
        self.routine("copy", x.dtype)(i(x.size), _ptr(x), i(1), _ptr(y), i(1))

    def axpby(self, alpha: float, x: np.ndarray, beta: float, y: np.ndarray) -> None:
        """y := alpha x + beta y (OpenBLAS's extension of CBLAS)."""
        i, s = self.integer, self._scalar
        a, b = s(x.dtype, alpha), s(x.dtype, beta)
        self.routine("axpby", x.dtype)(i(x.size), a, _ptr(x), i(1), b, _ptr(y), i(1))

    def gemv(self, trans: bool, a: np.ndarray, x: np.ndarray, beta: float, y: np.ndarray) -> None:
        """y := op(a) x + beta y with a column-major (Fortran-ordered) `a`."""
        i, s = self.integer, self._scalar
        m, n = a.shape
        self.routine("gemv", a.dtype)(
            ctypes.c_int(COL_MAJOR), ctypes.c_int(TRANS if trans else NO_TRANS), i(m), i(n),
            s(a.dtype, 1.0), _ptr(a), i(m), _ptr(x), i(1), s(a.dtype, beta), _ptr(y), i(1),
        )  # fmt: skip

    def ger(self, x: np.ndarray, y: np.ndarray, a: np.ndarray) -> None:
        """a += x y^T with a column-major (Fortran-ordered) `a`."""
        i = self.integer
        m, n = a.shape
        self.routine("ger", a.dtype)(
            ctypes.c_int(COL_MAJOR), i(m), i(n), self._scalar(a.dtype, 1.0),
            _ptr(x), i(1), _ptr(y), i(1), _ptr(a), i(m),
        )  # fmt: skip


def _ptr(array: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(array.ctypes.data)


@cache
def load() -> Cblas | str:
    """numpy's CBLAS, or why it cannot be used."""
    blas = loaded_openblas()
    if blas is None:
        return "numpy's OpenBLAS not found in this process"
    lib = ctypes.CDLL(blas.path)
    for pattern, integer in _PATTERNS:
        if hasattr(lib, pattern.format("saxpby")):
            return Cblas(lib, pattern, integer, blas.path)
    return f"no CBLAS axpby in {blas.path}"
