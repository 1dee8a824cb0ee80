"""The reference evaluator's scalar semantics: arith, cmp, cast and constants, against
independent Python / numpy formulas, including the integer edge cases the language defines."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_helpers import DTYPES, run, same_bits, scalar_out

INT_TYPES = ("i8", "i16", "i32", "i64", "index")
FLOAT_TYPES = ("f16", "bf16", "f32", "f64")
BITS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64, "index": 64}


def binary(op: str, ty: str, a: object, b: object) -> np.generic:
    out = scalar_out(ty)
    text = f"""func @k(%a: {ty}, %b: {ty}, %out: memref<{ty}>) {{
        %r = arith.{op} %a, %b : {ty}
        store %r, %out[] : memref<{ty}>
    }}"""
    run(text, a, b, out)
    return out[()]


def unary(op: str, ty: str, a: object) -> np.generic:
    out = scalar_out(ty)
    text = f"""func @k(%a: {ty}, %out: memref<{ty}>) {{
        %r = arith.{op} %a : {ty}
        store %r, %out[] : memref<{ty}>
    }}"""
    run(text, a, out)
    return out[()]


def compare(cond: str, ty: str, a: object, b: object) -> bool:
    out = scalar_out("i1")
    text = f"""func @k(%a: {ty}, %b: {ty}, %out: memref<i1>) {{
        %r = cmp.{cond} %a, %b : {ty}
        store %r, %out[] : memref<i1>
    }}"""
    run(text, a, b, out)
    return bool(out[()])


def cast(src: str, dst: str, a: object) -> np.generic:
    out = scalar_out(dst)
    text = f"""func @k(%a: {src}, %out: memref<{dst}>) {{
        %r = cast %a : {src} -> {dst}
        store %r, %out[] : memref<{dst}>
    }}"""
    run(text, np.asarray(a, dtype=DTYPES[src])[()], out)
    return out[()]


def signed(value: int, bits: int) -> int:
    """Independent two's complement reading of the low `bits` bits."""
    value %= 1 << bits
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def c_div(a: int, b: int, bits: int) -> int:
    if b == 0:
        return -1
    q = a // b if (a < 0) == (b < 0) else -(-a // b)
    return signed(q, bits)


def c_rem(a: int, b: int, bits: int) -> int:
    if b == 0:
        return a
    return signed(int(math.fmod(a, b)) if abs(a) < 2**52 else a - b * c_div(a, b, 999), bits)


def ints(ty: str) -> st.SearchStrategy[int]:
    bits = BITS[ty]
    edges = st.sampled_from([0, 1, -1, 2, bits, bits + 1, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1])
    return edges | st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


# -- integers -------------------------------------------------------------------------------


@pytest.mark.parametrize("ty", INT_TYPES)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_integer_ops_wrap_like_numpy(ty: str, data: st.DataObject) -> None:
    a, b = data.draw(ints(ty)), data.draw(ints(ty))
    dtype = DTYPES[ty]
    x, y = np.array([a], dtype), np.array([b], dtype)
    for op, expected in [("add", x + y), ("sub", x - y), ("mul", x * y), ("and", x & y),
                         ("or", x | y), ("xor", x ^ y)]:  # fmt: skip
        assert same_bits(binary(op, ty, a, b), expected[0]), op


@pytest.mark.parametrize("ty", INT_TYPES)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_integer_div_rem_shift(ty: str, data: st.DataObject) -> None:
    a, b = data.draw(ints(ty)), data.draw(ints(ty))
    bits = BITS[ty]
    assert int(binary("div", ty, a, b)) == c_div(a, b, bits)
    assert int(binary("rem", ty, a, b)) == c_rem(a, b, bits)
    assert int(binary("shl", ty, a, b)) == signed(a << (b % bits), bits)
    assert int(binary("shr", ty, a, b)) == a >> (b % bits)


@pytest.mark.parametrize("ty", INT_TYPES)
def test_integer_edge_cases(ty: str) -> None:
    bits = BITS[ty]
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    assert int(binary("div", ty, 7, 0)) == -1
    assert int(binary("div", ty, lo, 0)) == -1
    assert int(binary("div", ty, lo, -1)) == lo
    assert int(binary("div", ty, -7, 2)) == -3
    assert int(binary("div", ty, 7, -2)) == -3
    assert int(binary("rem", ty, 7, 0)) == 7
    assert int(binary("rem", ty, lo, -1)) == 0
    assert int(binary("rem", ty, -7, 2)) == -1
    assert int(binary("rem", ty, 7, -2)) == 1
    assert int(binary("add", ty, hi, 1)) == lo
    assert int(binary("shl", ty, 1, bits)) == 1
    assert int(binary("shl", ty, 1, bits + 1)) == 2
    assert int(binary("shl", ty, 1, bits - 1)) == lo
    assert int(binary("shr", ty, -8, 1)) == -4
    assert int(binary("shr", ty, -8, bits + 1)) == -4
    assert int(binary("shr", ty, lo, -1)) == -1
    assert int(unary("neg", ty, lo)) == lo
    assert int(unary("neg", ty, 5)) == -5
    assert int(unary("not", ty, 0)) == -1
    assert int(unary("not", ty, hi)) == lo


def test_boolean_ops() -> None:
    for a in (False, True):
        assert bool(unary("not", "i1", a)) is (not a)
        for b in (False, True):
            assert bool(binary("and", "i1", a, b)) is (a and b)
            assert bool(binary("or", "i1", a, b)) is (a or b)
            assert bool(binary("xor", "i1", a, b)) is (a != b)


def test_integer_constants_wrap_and_may_be_unsigned() -> None:
    out = scalar_out("i8")
    text = """func @k(%out: memref<i8>) {
        %r = arith.add 255, 1 : i8
        %s = arith.add %r, 127 : i8
        store %s, %out[] : memref<i8>
    }"""
    run(text, out)
    assert int(out[()]) == 127


# -- floats ---------------------------------------------------------------------------------


def floats(ty: str) -> st.SearchStrategy[float]:
    width = 64 if ty == "f64" else 32
    special = st.sampled_from([0.0, -0.0, 1.0, -1.5, math.inf, -math.inf, math.nan, 1e-40, 3e38])
    return special | st.floats(width=width, allow_nan=True, allow_infinity=True)


def float_expected(op: str, ty: str, a: np.generic, b: np.generic) -> np.generic:
    """f32/f64 in their own precision; f16/bf16 in f32, rounded once at the end."""
    work = np.float32 if ty in ("f16", "bf16") else DTYPES[ty].type
    x, y = np.array([work(a)]), np.array([work(b)])
    with np.errstate(all="ignore"):
        result = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y, "rem": np.fmod(x, y)}
    return result[op].astype(DTYPES[ty])[0]


@pytest.mark.parametrize("ty", FLOAT_TYPES)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_float_ops(ty: str, data: st.DataObject) -> None:
    with np.errstate(over="ignore"):  # out of range for f16: inf
        a = DTYPES[ty].type(data.draw(floats(ty)))
        b = DTYPES[ty].type(data.draw(floats(ty)))
    for op in ("add", "sub", "mul", "div", "rem"):
        assert same_bits(binary(op, ty, a, b), float_expected(op, ty, a, b)), op
    assert same_bits(unary("neg", ty, a), -a)


def test_float_special_values() -> None:
    assert same_bits(binary("div", "f32", np.float32(1), np.float32(0)), np.float32(np.inf))
    assert same_bits(binary("div", "f32", np.float32(-1), np.float32(0)), np.float32(-np.inf))
    assert np.isnan(binary("div", "f64", 0.0, 0.0))
    assert np.isnan(binary("rem", "f64", 1.0, 0.0))
    assert same_bits(binary("rem", "f64", -7.5, 2.0), np.float64(-1.5))
    assert same_bits(binary("mul", "f32", np.float32(3e38), np.float32(10)), np.float32(np.inf))
    # f32 arithmetic is not done in f64: 1 + 2^-30 rounds to 1 in f32
    assert same_bits(binary("add", "f32", np.float32(1), np.float32(2**-30)), np.float32(1))
    # bf16: computed in f32 and rounded to nearest even: 1 + 2^-8 is a tie between 1 and 1+2^-7
    bf = ml_dtypes.bfloat16
    assert same_bits(binary("add", "bf16", bf(1), bf(2**-8)), bf(1))
    assert same_bits(binary("add", "bf16", bf(1 + 2**-7), bf(2**-8)), bf(1 + 2**-6))
    assert same_bits(unary("neg", "f64", 0.0), np.float64(-0.0))


@pytest.mark.parametrize("ty", INT_TYPES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_integer_compare_is_signed(ty: str, data: st.DataObject) -> None:
    a, b = data.draw(ints(ty)), data.draw(ints(ty))
    expected = {"eq": a == b, "ne": a != b, "gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b}
    for cond, value in expected.items():
        assert compare(cond, ty, a, b) is value, cond


@pytest.mark.parametrize("ty", FLOAT_TYPES)
def test_float_compare_ordered_except_ne(ty: str) -> None:
    make = DTYPES[ty].type
    nan, one, two = make(np.nan), make(1.0), make(2.0)
    for cond in ("eq", "gt", "ge", "lt", "le"):
        assert compare(cond, ty, nan, one) is False
        assert compare(cond, ty, one, nan) is False
        assert compare(cond, ty, nan, nan) is False
    assert compare("ne", ty, nan, nan) is True
    assert compare("ne", ty, nan, one) is True
    assert compare("ne", ty, one, one) is False
    assert compare("lt", ty, one, two) is True
    assert compare("eq", ty, make(0.0), make(-0.0)) is True


def test_boolean_compare_reads_true_as_one() -> None:
    assert compare("gt", "i1", True, False) is True
    assert compare("lt", "i1", True, False) is False
    assert compare("eq", "i1", True, True) is True


# -- cast -----------------------------------------------------------------------------------

CAST_CASES = [
    # float -> int: toward zero, saturating, NaN -> 0
    ("f64", "i32", 3.7, 3),
    ("f64", "i32", -3.7, -3),
    ("f64", "i32", math.nan, 0),
    ("f64", "i32", math.inf, 2**31 - 1),
    ("f64", "i32", -math.inf, -(2**31)),
    ("f64", "i32", 1e10, 2**31 - 1),
    ("f64", "i32", -1e10, -(2**31)),
    ("f64", "i8", 200.0, 127),
    ("f64", "i8", -128.9, -128),
    ("f32", "i64", 9.3e18, 2**63 - 1),
    ("f32", "i64", -9.3e18, -(2**63)),
    ("f64", "i64", 2.0**63, 2**63 - 1),
    ("f64", "i64", -(2.0**63), -(2**63)),
    ("f64", "index", 1e300, 2**63 - 1),
    ("f16", "i16", 65504.0, 32767),
    ("bf16", "i32", -3.0e38, -(2**31)),
    # int -> int: truncation, sign extension; i1 zero-extends
    ("i32", "i8", 300, 44),
    ("i32", "i8", 255, -1),
    ("i8", "i64", -1, -1),
    ("i64", "i16", -(2**63), 0),
    ("i1", "i32", True, 1),
    ("i1", "i64", False, 0),
    # anything -> i1 is x != 0
    ("i32", "i1", 2, True),
    ("i32", "i1", 0, False),
    ("i8", "i1", -128, True),
    ("f64", "i1", math.nan, True),
    ("f64", "i1", -0.0, False),
    ("f32", "i1", 0.25, True),
    # int -> float, rounding to nearest even (one rounding for f32/f64)
    ("i1", "f32", True, 1.0),
    ("i64", "f32", 2**60 + 2**36 + 1, float(2**60 + 2**37)),
    ("i64", "f64", 2**53 + 1, float(2**53)),
    ("i64", "f64", -(2**63), -(2.0**63)),
    ("i32", "f16", 70000, math.inf),
    # int -> bf16 goes through f32 (two roundings, the documented decision)
    ("i64", "bf16", 2**24 + 2**16 + 1, float(2**24)),
    # float -> float
    ("f64", "f32", 1e300, math.inf),
    ("f64", "f16", 65520.0, math.inf),
    ("f64", "f16", 65519.0, 65504.0),
    ("f64", "bf16", 1 + 2**-8 + 2**-40, 1 + 2**-7),  # one rounding, not via f32
    ("f64", "bf16", 1 + 2**-8, 1.0),
    ("f32", "bf16", 1 + 2**-8 + 2**-20, 1 + 2**-7),
    ("bf16", "f16", 2.0**20, math.inf),
    ("f16", "bf16", 1 + 2**-10, 1.0),
    ("f64", "f32", -0.0, -0.0),
]


@pytest.mark.parametrize(("src", "dst", "value", "expected"), CAST_CASES)
def test_cast(src: str, dst: str, value: object, expected: object) -> None:
    assert same_bits(cast(src, dst, value), np.asarray(expected, DTYPES[dst]))


def exact_bf16(x: float) -> float:
    """Correctly rounded (nearest, ties to even) bf16 value of a finite double, by brute force
    over the bf16 neighbours of a first guess."""
    guess = np.array([x]).astype(ml_dtypes.bfloat16)
    bits = int(guess.view(np.uint16)[0])
    candidates = []
    for b in (bits - 1, bits, bits + 1):
        value = float(np.array([b & 0xFFFF], np.uint16).view(ml_dtypes.bfloat16)[0])
        if math.isfinite(value):
            candidates.append((abs(Fraction(value) - Fraction(x)), b & 1, value))
    return min(candidates)[2]


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=-1e38, max_value=1e38, allow_nan=False))
def test_f64_to_bf16_rounds_once(x: float) -> None:
    result = float(cast("f64", "bf16", x))
    expected = exact_bf16(x)
    assert result == expected or (result == 0.0 and expected == 0.0)


@settings(max_examples=100, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1))
def test_int_to_float_is_correctly_rounded(n: int) -> None:
    f64 = float(cast("i64", "f64", n))
    assert f64 == float(n)  # Python's int -> float rounds correctly
    f32 = float(cast("i64", "f32", n))
    neighbours = {float(np.float32(f64)), float(np.nextafter(np.float32(f64), np.float32(0)))}
    neighbours |= {float(np.nextafter(np.float32(f64), np.float32(np.inf)))}
    best = min(neighbours, key=lambda v: (abs(Fraction(v) - n), np.float32(v).view(np.uint32) & 1))
    assert f32 == best


def test_float_constants_are_rounded_to_their_type() -> None:
    out = scalar_out("f64")
    text = """func @k(%out: memref<f64>) {
        %r = cast 0.1 : f32 -> f64
        store %r, %out[] : memref<f64>
    }"""
    run(text, out)
    assert out[()] == float(np.float32(0.1))
