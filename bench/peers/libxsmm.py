"""libxsmm as a peer: bench/peers/libxsmm_driver.c, compiled on first use and called via ctypes.

The driver is built with the C compiler ($CC, default gcc) against the installed libxsmm
(Debian: `apt-get install libxsmm-dev`, which ships static libraries; $LIBXSMM_ROOT points at
another install with include/ and lib/). The shared object is cached under
bench/results/.build/ (gitignored; a temporary directory if that is not writable) and rebuilt
when the source, the command or the headers change. Anything missing makes `load()` return the
reason instead, and the workloads skip the peer with that note.

Run `python -m bench.peers.libxsmm` to build, check every entry against numpy and print rates.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from bench.peers.cbuild import BUILD, Unavailable, compile_shared

SOURCE = Path(__file__).with_name("libxsmm_driver.c")
_ERRORS = {
    -1: "libxsmm dispatched no kernel",
    -2: "thread creation failed",
    -3: "not supported by this libxsmm",
}


def _flags() -> tuple[list[str], list[list[str]]]:
    """Compiler flags and, in order of preference, the link flags to try."""
    cflags = ["-O2", "-fPIC", "-shared", "-Wl,--no-undefined"]
    libs = ["-lxsmm", "-lpthread", "-lrt", "-ldl", "-lm"]
    root = os.environ.get("LIBXSMM_ROOT")
    if root:
        cflags += [f"-I{root}/include", f"-L{root}/lib", f"-Wl,-rpath,{root}/lib"]
    elif shutil.which("pkg-config"):
        found = subprocess.run(
            ["pkg-config", "--cflags", "--libs", "libxsmm"], capture_output=True, text=True
        )
        if found.returncode == 0 and found.stdout.strip():
            libs = found.stdout.split()
    # libxsmm.a refers to BLAS for its fallbacks; libxsmmnoblas stubs them out.
    return cflags, [[*libs, "-lxsmmnoblas"], libs]


def _header_stamp(cflags: list[str]) -> str:
    dirs = [f[2:] for f in cflags if f.startswith("-I")] + ["/usr/include", "/usr/local/include"]
    for d in dirs:
        header = Path(d) / "libxsmm.h"
        if header.exists():
            stat = header.stat()
            return f"{header}:{stat.st_size}:{stat.st_mtime_ns}"
    return ""


def build(directory: Path = BUILD) -> Path:
    """Compile the driver (or reuse a cached build); raise `Unavailable` with the reason."""
    cflags, link_options = _flags()
    try:
        return compile_shared(SOURCE, cflags, link_options, _header_stamp(cflags), directory)
    except Unavailable as error:
        raise Unavailable(f"driver did not build against libxsmm ({error})") from None


def _array(name: str, value: np.ndarray, dtype: Any, ndim: int) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.dtype != np.dtype(dtype) or value.ndim != ndim:
        raise TypeError(f"{name}: expected a {ndim}-d {np.dtype(dtype)} array")
    if not value.flags.f_contiguous:
        raise ValueError(f"{name}: expected a Fortran-ordered (column-major) array")
    return value


class Libxsmm:
    """The loaded driver: batched small GEMM (fp32, fp64) and bf16 batch-reduce GEMM."""

    def __init__(self, path: Path):
        self.path = path
        lib = ctypes.CDLL(str(path))
        lib.bench_xsmm_version.restype = ctypes.c_char_p
        lib.bench_xsmm_target.restype = ctypes.c_char_p
        lib.bench_xsmm_gemm_batch.restype = ctypes.c_double
        lib.bench_xsmm_gemm_batch.argtypes = (
            [ctypes.c_int] * 4
            + [ctypes.c_void_p] * 3
            + [ctypes.c_longlong] * 2
            + [ctypes.c_int] * 2
        )
        lib.bench_xsmm_bf16_brgemm.restype = ctypes.c_double
        lib.bench_xsmm_bf16_brgemm.argtypes = (
            [ctypes.c_int] * 3 + [ctypes.c_void_p] * 3 + [ctypes.c_longlong] * 2
        )
        self._lib = lib
        self.version: str = lib.bench_xsmm_version().decode()
        self.target: str = lib.bench_xsmm_target().decode()

    def describe(self) -> str:
        return f"{self.version} (JIT target {self.target})"

    @staticmethod
    def _seconds(result: float) -> float:
        if result < 0:
            raise RuntimeError(f"libxsmm driver: {_ERRORS.get(int(result), f'error {result}')}")
        return result

    def gemm_batch(
        self,
        a: np.ndarray,
        b: np.ndarray,
        c: np.ndarray,
        *,
        reps: int = 1,
        threads: int = 1,
        prefetch: bool = False,
    ) -> float:
        """C_i += A_i B_i over the batch (last axis), swept `reps` times; returns seconds.

        a: (M, K, batch), b: (K, N, batch), c: (M, N, batch); Fortran-ordered, fp32 or fp64."""
        dtype = np.dtype(c.dtype)
        if dtype not in (np.float32, np.float64):
            raise TypeError("libxsmm batch: fp32 or fp64 only")
        _array("c", c, dtype, 3)
        m, n, batch = c.shape
        k = _array("a", a, dtype, 3).shape[1]
        if a.shape != (m, k, batch) or _array("b", b, dtype, 3).shape != (k, n, batch):
            raise ValueError(f"shapes do not match: {a.shape} {b.shape} {c.shape}")
        code = 1 if dtype == np.float64 else 0
        result = self._lib.bench_xsmm_gemm_batch(
            code, m, n, k, a.ctypes.data, b.ctypes.data, c.ctypes.data, batch, reps, threads,
            int(prefetch),
        )  # fmt: skip
        return self._seconds(result)

    @staticmethod
    def vnni_pack(a: np.ndarray) -> np.ndarray:
        """bf16 (M, K, count) batch -> the driver's VNNI-2 layout, (2, M, K/2, count) F-order:
        element (m, k) of matrix i at ((k/2)*M + m)*2 + k%2 within matrix i."""
        m, k, count = a.shape
        if k % 2:
            raise ValueError("VNNI-2 packing needs an even K")
        pairs = a.reshape(m, 2, k // 2, count, order="F")  # (m, k%2, k/2, i)
        return np.asfortranarray(pairs.transpose(1, 0, 2, 3))

    def bf16_brgemm_missing(self, m: int, n: int, k: int) -> str | None:
        """Why libxsmm has no bf16 batch-reduce kernel of this shape for this CPU, or None
        where it has one: libxsmm 1.17 JITs them from AVX-512 on (not for its `hsw` target,
        a Zen 3's). Dispatches the kernel without calling it."""
        result = self._lib.bench_xsmm_bf16_brgemm(m, n, k, None, None, None, 1, 0)
        if result >= 0:
            return None
        return f"{_ERRORS.get(int(result), f'error {result}')} for bf16 (JIT target {self.target})"

    def bf16_brgemm(
        self, a_vnni: np.ndarray, b: np.ndarray, c: np.ndarray, *, reps: int = 1
    ) -> float:
        """C += sum_i A_i B_i (bf16 inputs, fp32 C), repeated `reps` times; returns seconds.

        a_vnni: `vnni_pack` of an (M, K, count) batch; b: (K, N, count); c: (M, N) fp32."""
        bf16 = ml_dtypes.bfloat16
        _array("c", c, np.float32, 2)
        m, n = c.shape
        two, m_a, half_k, count = _array("a_vnni", a_vnni, bf16, 4).shape
        k = 2 * half_k
        if (two, m_a) != (2, m) or _array("b", b, bf16, 3).shape != (k, n, count):
            raise ValueError(f"shapes do not match: {a_vnni.shape} {b.shape} {c.shape}")
        result = self._lib.bench_xsmm_bf16_brgemm(
            m, n, k, a_vnni.ctypes.data, b.ctypes.data, c.ctypes.data, count, reps
        )
        return self._seconds(result)


@cache
def load() -> Libxsmm | str:
    """The driver, built and loaded, or why it is not available."""
    try:
        return Libxsmm(build())
    except (Unavailable, OSError) as error:
        return str(error)


def self_check() -> list[str]:
    """Check every entry against numpy; lines describing results and rates."""
    driver = load()
    if isinstance(driver, str):
        return [f"libxsmm: unavailable: {driver}"]
    lines = [f"libxsmm {driver.describe()}, driver {driver.path}"]
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        for m, n, k in ((8, 8, 8), (35, 9, 35), (64, 64, 64)):
            batch, reps = 256, 50
            a, b, c = (
                np.asfortranarray(rng.random(s, dtype))
                for s in ((m, k, batch), (k, n, batch), (m, n, batch))
            )
            expected = c + np.einsum("mkb,knb->mnb", a.astype(np.float64), b.astype(np.float64))
            driver.gemm_batch(a, b, c, reps=1)
            error = float(np.abs(c - expected).max())
            seconds = driver.gemm_batch(a, b, c, reps=reps)
            rate = 2 * m * n * k * batch * reps / seconds / 1e9
            lines.append(
                f"  {np.dtype(dtype).name} {m}x{n}x{k}: max error {error:.2g}, {rate:.1f} GFLOP/s"
            )
    m, n, k, count = 32, 32, 32, 64
    a = np.asfortranarray(rng.random((m, k, count), np.float32).astype(ml_dtypes.bfloat16))
    b = np.asfortranarray(rng.random((k, n, count), np.float32).astype(ml_dtypes.bfloat16))
    c = np.zeros((m, n), np.float32, order="F")
    missing = driver.bf16_brgemm_missing(m, n, k)
    if missing is not None:
        lines.append(f"  bf16 batch-reduce: {missing}")
        return lines
    driver.bf16_brgemm(driver.vnni_pack(a), b, c)
    expected = np.einsum("mki,kni->mn", a.astype(np.float64), b.astype(np.float64))
    error = float(np.abs(c - expected).max() / np.abs(expected).max())
    seconds = driver.bf16_brgemm(driver.vnni_pack(a), b, c, reps=2000)
    rate = 2 * m * n * k * count * 2000 / seconds / 1e9
    lines.append(
        f"  bf16 batch-reduce {m}x{n}x{k} x{count}: relative error {error:.2g}, {rate:.1f} GFLOP/s"
    )
    return lines


def main() -> None:
    lines = self_check()
    print("\n".join(lines))
    sys.exit(1 if "unavailable" in lines[0] else 0)


if __name__ == "__main__":
    main()
