"""bf16 and f16 (nanotc extensions) in native code, against the reference evaluator:
arithmetic rounded to the type after every operation, casts from and to every type (an f64
rounds to bf16 once), scalar arguments, loads and stores, and the collective instructions with
16-bit inputs and outputs (computed in f32)."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from tests.jit.helpers import TARGETS, check, run_both

SIXTEEN = ("f16", "bf16")
NP16 = {"f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}
EDGES = [0.0, -0.0, 1.0, -1.5, 3.0e-3, 65504.0, 1e5, 3.0e38, 1e-8, np.inf, -np.inf, np.nan]


def bits16(values: np.ndarray) -> np.ndarray:
    """Bit patterns, with every NaN made the same (payloads are not specified)."""
    out = values.view(np.uint16).copy()
    out[np.isnan(values.astype(np.float32))] = 0x7FFF
    return out


def values16(ty: str, rng: np.random.Generator, n: int = 64) -> np.ndarray:
    with np.errstate(over="ignore"):
        edges = np.array(EDGES, dtype=np.float64).astype(NP16[ty])
        random = (rng.standard_normal(n) * rng.choice([1e-3, 1, 100], n)).astype(NP16[ty])
    return np.concatenate([edges, random])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", SIXTEEN)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "rem"])
def test_arithmetic_rounds_every_result(ty: str, op: str, target: str, rng) -> None:
    text = f"""func @k(%a: memref<{ty}x?>, %b: memref<{ty}x?>, %c: memref<{ty}x?>) {{
  %n = size %a[0] : memref<{ty}x?>
  foreach %i = 0, %n {{
    %x = load %a[%i] : memref<{ty}x?>
    %y = load %b[%i] : memref<{ty}x?>
    %z = arith.{op} %x, %y : {ty}
    %w = arith.mul %z, %z : {ty}
    %r = arith.neg %w : {ty}
    store %r, %c[%i] : memref<{ty}x?>
  }}
}}"""
    a = values16(ty, rng)
    b = np.roll(values16(ty, rng), 3)
    out = run_both(text, [a, b, np.zeros_like(a)], target=target)
    np.testing.assert_array_equal(bits16(out.native[2]), bits16(out.reference[2]))


OTHER_TYPES = ["i1", "i8", "i16", "i32", "i64", "index", "f32", "f64", "f16", "bf16"]
SOURCES = {
    "i1": np.array([0, 1], dtype=np.bool_),
    "i8": np.array([0, -128, 127, 5], dtype=np.int8),
    "i16": np.array([0, -32768, 32767, 300], dtype=np.int16),
    "i32": np.array([0, -(2**31), 2**31 - 1, 16777217], dtype=np.int32),
    "i64": np.array([0, -(2**63), 2**63 - 1, 2**40 + 1], dtype=np.int64),
    "index": np.array([3, -7, 2**53 + 1, 1 << 62], dtype=np.int64),
    # f32 and f64 values between two bf16 numbers, some exactly halfway, some just above:
    # rounding f64 -> f32 -> bf16 twice would get those wrong
    "f32": np.array([1.00390625, 1.0039063, 3.4e38, -7e-39, np.nan, np.inf, 2.5], np.float32),
    "f64": np.array(
        [
            1.00390625,
            1.003906250000001,
            1.0039062499999,
            3.5e38,
            1e-45,
            np.nan,
            -0.0,
            65520.0,
            65519.99,
        ],
        np.float64,
    ),
}


def cast_kernel(src: str, dst: str) -> str:
    return f"""func @k(%a: memref<{src}x?>, %b: memref<{dst}x?>) {{
  %n = size %a[0] : memref<{src}x?>
  foreach %i = 0, %n {{
    %x = load %a[%i] : memref<{src}x?>
    %y = cast %x : {src} -> {dst}
    store %y, %b[%i] : memref<{dst}x?>
  }}
}}"""


@pytest.mark.parametrize(("src", "dst"), [
    (s, d) for s, d in itertools.product(OTHER_TYPES, OTHER_TYPES)
    if (s in SIXTEEN or d in SIXTEEN) and s != d
])  # fmt: skip
def test_casts_to_and_from_16_bit_floats(src: str, dst: str, rng) -> None:
    from tests.jit.helpers import DTYPES

    values = SOURCES[src] if src in SOURCES else values16(src, rng, 16)
    out = run_both(cast_kernel(src, dst), [values.copy(), np.zeros(len(values), DTYPES[dst])])
    native, reference = out.native[1], out.reference[1]
    if dst in SIXTEEN:
        np.testing.assert_array_equal(bits16(native), bits16(reference))
    else:
        np.testing.assert_array_equal(
            np.isnan(native.astype(np.float64)), np.isnan(reference.astype(np.float64))
        )
        ok = ~np.isnan(reference.astype(np.float64))
        np.testing.assert_array_equal(native[ok], reference[ok])


def test_f64_to_bf16_rounds_once() -> None:
    """1 + 2^-8 + 2^-30 is just above the halfway point between two bf16 numbers: rounded
    once it goes up; rounded to f32 first (1 + 2^-8 exactly, a tie) it would go down to 1, as
    ml_dtypes before 0.7 rounds it, so ml_dtypes is not the oracle here."""
    value = 1 + 2**-8 + 2**-30
    out = run_both(cast_kernel("f64", "bf16"), [np.array([value]), np.zeros(1, NP16["bf16"])])
    assert float(out.native[1][0]) == float(out.reference[1][0]) == 1.0078125


@pytest.mark.parametrize("ty", SIXTEEN)
def test_scalar_arguments_and_literals(ty: str) -> None:
    text = f"""func @k(%s: {ty}, %o: memref<{ty}x2>) {{
  %a = arith.add %s, 0.1 : {ty}
  store %a, %o[0] : memref<{ty}x2>
  %b = arith.mul %s, 300.0 : {ty}
  store %b, %o[1] : memref<{ty}x2>
}}"""
    out = run_both(text, [NP16[ty].type(1.25), np.zeros(2, NP16[ty])])
    np.testing.assert_array_equal(bits16(out.native[1]), bits16(out.reference[1]))


BLAS = {
    "axpby": (
        "axpby.n {alpha}, %x, {beta}, %o : {s}, memref<{i}x?>, {s}, memref<{o}x?>",
        ["x"],
        "v",
    ),
    "hadamard": (
        "hadamard {alpha}, %x, %y, {beta}, %o : {s}, memref<{i}x?>, memref<{i}x?>, {s}, memref<{o}x?>",
        ["x", "y"],
        "v",
    ),
    "sum": ("sum.n {alpha}, %x, {beta}, %s0 : {s}, memref<{i}x?>, {s}, memref<{o}>", ["x"], "s"),
    "gemv": (
        "gemv.{t} {alpha}, %A, %x, {beta}, %o : {s}, memref<{i}x?x?>, memref<{i}x?>, {s}, memref<{o}x?>",
        ["A", "x"],
        "v",
    ),
    "ger": (
        "ger {alpha}, %x, %y, {beta}, %C : {s}, memref<{i}x?>, memref<{i}x?>, {s}, memref<{o}x?x?>",
        ["x", "y"],
        "m",
    ),
    "gemm": (
        "gemm.{t}.n {alpha}, %A, %B, {beta}, %C : {s}, memref<{i}x?x?>, memref<{i}x?x?>, {s}, memref<{o}x?x?>",
        ["A", "B"],
        "m",
    ),
}


def blas_case(kind: str, inputs: str, output: str, trans: str, beta: str, rng) -> tuple[str, list]:
    n, m = 23, 17
    pattern, names, out_kind = BLAS[kind]
    body = pattern.format(alpha="%alpha", beta=beta, s="f32", i=inputs, o=output, t=trans)
    shapes = {"x": (n,), "y": (m if kind == "ger" else n,), "A": (n, n), "B": (n, m)}
    out_shape = {"v": (n,), "s": (), "m": (n, m)}[out_kind]
    args = [np.float32(0.75)]
    params = ["%alpha: f32"]
    for name in names:
        shape = shapes[name]
        args.append(np.asfortranarray(rng.standard_normal(shape)).astype(NP16.get(inputs, inputs)))
        params.append(f"%{name}: memref<{inputs}x{'x'.join('?' * len(shape))}>")
    out_name = {"v": "o", "s": "s0", "m": "C"}[out_kind]
    out_type = f"memref<{output}{''.join('x?' for _ in out_shape)}>"
    dtype = NP16.get(output, np.dtype(output.replace("f", "float")))
    out = np.asfortranarray(rng.standard_normal(out_shape)).astype(dtype)
    if beta == "0.0":
        out[...] = np.nan  # beta = 0 never reads the output
    args.append(out)
    params.append(f"%{out_name}: {out_type}")
    return f"func @k({', '.join(params)}) {{\n  {body}\n}}", args


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", sorted(BLAS))
@pytest.mark.parametrize(
    ("inputs", "output"), [("bf16", "f32"), ("f16", "f32"), ("bf16", "bf16"), ("f16", "f16")]
)
def test_collectives_with_16_bit_operands(
    kind: str, inputs: str, output: str, target: str, rng
) -> None:
    for trans, beta in (("n", "0.0"), ("t", "1.0")):
        text, args = blas_case(kind, inputs, output, trans, beta, rng)
        check(text, args, target=target, depth=23)
