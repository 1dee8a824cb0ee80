"""Shared helpers of the reference evaluator's tests: kernels from text, random arrays in the
language's (column-major) layout, and comparisons that treat NaNs as equal."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

import nanotc
from nanotc.ir.core import Program
from nanotc.ir.types import ScalarType, numpy_dtype
from nanotc.reference import evaluate

DTYPES = {t.value: numpy_dtype(t) for t in ScalarType}

PRIMES_AND_SMALL = (1, 2, 3, 5, 7, 8, 13, 16, 17)


@cache
def load(text: str) -> Program:
    return nanotc.load(text)


def run(text: str, *args: Any, group_size: int = 1) -> None:
    """Evaluate the only function of `text` on `args`."""
    program = load(text)
    evaluate(program, program.functions[0].name, args, group_size)


def random_array(rng: np.random.Generator, shape: tuple[int, ...], ty: str) -> np.ndarray:
    """A Fortran-ordered array of type `ty` (the language's default layout) with small values."""
    dtype = DTYPES[ty]
    if dtype.kind in "iu":
        values = rng.integers(-100, 100, size=shape)
    elif dtype.kind == "b":
        values = rng.integers(0, 2, size=shape)
    else:
        values = rng.uniform(-2.0, 2.0, size=shape)
    return np.asfortranarray(values.astype(dtype))


def nan_array(shape: tuple[int, ...], ty: str) -> np.ndarray:
    return np.full(shape, np.nan, DTYPES[ty], order="F")


def scalar_out(ty: str) -> np.ndarray:
    """An order-0 output, pre-filled with garbage."""
    value = np.nan if DTYPES[ty].kind == "f" else 0x55
    return np.array(value if DTYPES[ty].kind != "b" else True, dtype=DTYPES[ty])


def same_bits(actual: Any, expected: Any) -> bool:
    """Equal values of the same dtype, NaN equal to NaN (any payload), -0.0 != 0.0."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.dtype != e.dtype:
        return False
    if a.dtype.kind in "fV" or a.dtype == DTYPES["bf16"]:
        a64, e64 = a.astype(np.float64), e.astype(np.float64)
        both_nan = np.isnan(a64) & np.isnan(e64)
        same = (a64 == e64) & (np.signbit(a64) == np.signbit(e64))
        return bool(np.all(both_nan | same))
    return bool(np.array_equal(a, e))


TOLERANCE = {"f16": 2e-2, "bf16": 5e-2, "f32": 1e-4, "f64": 1e-11}


def assert_close(actual: np.ndarray, expected: np.ndarray, ty: str) -> None:
    """Elementwise closeness for floats (relative to the magnitude of the data), equality for
    integers; NaN only where NaN is expected."""
    actual64 = np.asarray(actual).astype(np.float64)
    expected64 = np.asarray(expected).astype(np.float64)
    if ty not in TOLERANCE:
        np.testing.assert_array_equal(np.asarray(actual), np.asarray(expected))
        return
    scale = max(1.0, float(np.nanmax(np.abs(expected64), initial=0.0)))
    np.testing.assert_allclose(actual64, expected64, rtol=TOLERANCE[ty], atol=TOLERANCE[ty] * scale)
