"""Setting the thread count of numpy's BLAS (OpenBLAS) inside this process.

threadpoolctl does it when installed. Without it, the OpenBLAS that numpy has already loaded is
found in /proc/self/maps and its `openblas_set_num_threads` entry (under the names numpy's
wheels and distributions export) is called through ctypes. When neither works the count is left
alone and `blas_threads` yields False, which `blas_threads_note` turns into the workloads' note:
set OPENBLAS_NUM_THREADS before starting Python instead.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np  # noqa: F401  (loads numpy's BLAS so it shows up in /proc/self/maps)

_NAMES = (
    ("openblas_set_num_threads", "openblas_get_num_threads"),
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
)


@dataclass(frozen=True)
class OpenBlas:
    set_threads: Callable[[int], Any]
    get_threads: Callable[[], int]
    path: str


@cache
def loaded_openblas() -> OpenBlas | None:
    """numpy's OpenBLAS as loaded in this process (its path and thread-count entries), or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {ln.split()[-1] for ln in maps if "openblas" in ln.lower() and "/" in ln}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _NAMES:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                setter, getter = getattr(lib, set_name), getattr(lib, get_name)
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                return OpenBlas(setter, getter, path)
    return None


@contextmanager
def blas_threads(count: int) -> Iterator[bool]:
    """Run the body with numpy's BLAS on `count` threads; yields whether that could be set."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    if threadpool_limits is not None:
        with threadpool_limits(limits=count, user_api="blas"):
            yield True
        return
    blas = loaded_openblas()
    if blas is None:
        yield False
        return
    before = blas.get_threads()
    blas.set_threads(count)
    try:
        yield blas.get_threads() == count
    finally:
        blas.set_threads(before)


def blas_threads_note(count: int) -> str:
    """The note a workload prints when `blas_threads(count)` cannot set numpy's BLAS to `count`
    threads (numpy then runs with its default count), else ''."""
    with blas_threads(count) as controlled:
        return "" if controlled else "numpy BLAS threads not set (install threadpoolctl)"
