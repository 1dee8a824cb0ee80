"""Conversions between scalar types, vectorised over numpy arrays: the `cast` instruction and the
conversion of the inputs, alpha, beta and results of mixed-type collective instructions; and
the value a literal has in its type (`from_python`). The reference evaluator computes with
them, and the compiler folds literals with them, so both round a literal the same way.

Values of a type live in numpy arrays of the type's dtype (`nanotc.runtime.arguments.numpy_dtype`):
bool for i1, int8..int64 (index is int64), float16, ml_dtypes.bfloat16, float32, float64.

`convert(x, src, dst)` follows the language's cast rules:

- int -> int: two's complement truncation or sign extension (wraps modulo 2^bits). An i1 source
  is zero-extended: true -> 1.
- anything -> i1: `x != 0`; a NaN is non-zero, so NaN -> true.
- float -> int: rounds toward zero and saturates to the target's range; NaN -> 0.
- int -> f32 / f64: signed conversion rounding to nearest even (one rounding).
- int -> f16 / bf16: converted to f32 first (rounding to nearest even), then rounded to the
  target: f16 and bf16 are computed in f32 everywhere (decision: this double rounding is what
  LLVM's promotion of half types does; it differs from one rounding only for |x| > 2^24 with bf16).
- float -> float: exact when widening; narrowing rounds once to nearest even. f64 -> bf16 is
  rounded once as well (ml_dtypes before 0.7 goes through f32 and rounds twice, so it is done
  here by rounding to odd in f32 first, which makes the second rounding exact). Numbers bound
  to a bf16 parameter are rounded the same way, from their double.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from nanotc.ir.types import ScalarType, numpy_dtype

HALF_TYPES = (ScalarType.F16, ScalarType.BF16)
"""Float types narrower than f32: stored in 16 bits, computed in f32."""


def wrap(value: int, t: ScalarType) -> int:
    """The two's complement value of `value` modulo 2^bits of integer type `t` (i1: 0 or 1)."""
    if t is ScalarType.I1:
        return value & 1
    bits = t.bits
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def convert(x: np.ndarray, src: ScalarType, dst: ScalarType) -> np.ndarray:
    """Values `x` of type `src` converted to type `dst` (x itself when the dtypes agree)."""
    if src is dst or numpy_dtype(src) == numpy_dtype(dst):
        return x
    if dst is ScalarType.I1:
        return _widen_float(x, src) != 0
    if src.is_int and dst.is_int:
        return x.astype(np.int64).astype(numpy_dtype(dst))
    if src.is_int:
        return _int_to_float(x, dst)
    if dst.is_int:
        return _float_to_int(_widen_float(x, src), dst)
    return _float_to_float(x, src, dst)


def _widen_float(x: np.ndarray, src: ScalarType) -> np.ndarray:
    """f16 and bf16 values exactly as f32 (numpy has no arithmetic for bf16); others unchanged."""
    return x.astype(np.float32) if src in HALF_TYPES else x


def _int_to_float(x: np.ndarray, dst: ScalarType) -> np.ndarray:
    ints = x.astype(np.int64)  # i1 becomes 0 / 1
    if dst in HALF_TYPES:
        return ints.astype(np.float32).astype(numpy_dtype(dst))
    return ints.astype(numpy_dtype(dst))


def _float_to_int(x: np.ndarray, dst: ScalarType) -> np.ndarray:
    """Round toward zero and saturate; NaN becomes 0."""
    limit = 2.0 ** (dst.bits - 1)  # exact in f64 for every width
    t = np.trunc(x.astype(np.float64))
    in_range = (t >= -limit) & (t < limit)  # false for NaN
    ints = np.where(in_range, t, 0.0).astype(np.int64)
    ints = np.where(t >= limit, int(limit) - 1, ints)
    ints = np.where(t < -limit, -int(limit), ints)
    return ints.astype(numpy_dtype(dst))


def _float_to_float(x: np.ndarray, src: ScalarType, dst: ScalarType) -> np.ndarray:
    if src is ScalarType.F64 and dst is ScalarType.BF16:
        return _round_to_odd_f32(x).astype(ml_dtypes.bfloat16)
    return _widen_float(x, src).astype(numpy_dtype(dst))


def _round_to_odd_f32(x: np.ndarray) -> np.ndarray:
    """f64 values rounded to f32 with round-to-odd: truncate toward zero, then set the last
    mantissa bit when the result is inexact. Rounding that to bf16 (16 fewer mantissa bits)
    to nearest even gives the correctly rounded bf16 of x."""
    with np.errstate(invalid="ignore"):  # a signalling NaN is quieted, as a cast does
        nearest = x.astype(np.float32)
    back = nearest.astype(np.float64)
    inexact = (back != x) & ~np.isnan(x)
    toward_zero = np.where(
        inexact & (np.abs(back) > np.abs(x)), np.nextafter(nearest, np.float32(0)), nearest
    )
    bits = toward_zero.view(np.uint32)
    return np.where(inexact, bits | np.uint32(1), bits).astype(np.uint32).view(np.float32)


def convert_scalar(value: Any, src: ScalarType, dst: ScalarType) -> np.generic:
    """One scalar value of type `src` converted to a numpy scalar of type `dst`."""
    return convert(np.asarray(value, dtype=numpy_dtype(src)), src, dst)[()]


def from_python(value: int | float, t: ScalarType) -> np.generic:
    """A Python number as a value of type `t`: integers wrap (so a literal may be written in
    its unsigned reading, `255 : i8` is -1), floats are rounded once from double precision."""
    if t.is_int:
        return numpy_dtype(t).type(wrap(int(value), t))
    with np.errstate(over="ignore"):  # 1e10 : f16 is an infinity, as f16 arithmetic makes it
        return convert_scalar(float(value), ScalarType.F64, t)
