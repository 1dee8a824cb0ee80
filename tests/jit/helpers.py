"""Shared helpers of the native-backend tests: compile once per (text, target), run a kernel
natively and with the reference evaluator on identical copies of the same arguments, and
compare every array the kernel was given (its whole underlying memory, so writes outside a
view show up too).

Arguments are numpy arrays (any view: the copy rebuilds the same view on a copy of its root
array), lists of arrays (groups), `Group`s, or scalars.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import nanotc
from nanotc.api import Compilation
from nanotc.ir.types import ScalarType, numpy_dtype
from nanotc.reference import evaluate
from nanotc.runtime.arguments import Group, arrays_of
from nanotc.targets import MEASURED_RATES, Target, get, runs_on_host

TARGETS = ("host", "avx2", "generic")
"""The targets every key differential test runs on (all three execute on this machine)."""

SPLIT_FMA = replace(get("avx512"), name="avx512-split-fma", fma_unit_bits=256)
"""AVX-512 on 256-bit FMA units, as Zen 4: a tile's narrowed last vector computes narrow."""

ZEN4 = replace(
    get("avx512"), name="zen4", llvm_cpu="znver4", l1_bytes=32 * 1024, l1_ways=8,
    l2_bytes=1024 * 1024, **MEASURED_RATES[("znver4", 512)],
)  # fmt: skip
"""The Zen 4 host the AVX-512 rules were measured on, as `targets.host()` describes it there:
tests of those rules compile for it on any machine (and run its code where the host can)."""

ZEN3 = replace(
    get("avx2"), name="zen3", llvm_cpu="znver3", l2_bytes=512 * 1024,
    **MEASURED_RATES[("znver3", 256)],
)  # fmt: skip
"""The Zen 3 host (AVX2, 512 KiB of L2) as `targets.host()` describes it: its rules compile
for it on any machine."""


def runs_here(target: str | Target) -> bool:
    """Whether this machine executes code for `target` (the host has all its features)."""
    return runs_on_host(get(target))


def needs_host(target: str | Target) -> pytest.MarkDecorator:
    """Skip a test that runs code for `target` on a host lacking some of its features (its
    compile-only checks belong in a test of their own, which runs everywhere)."""
    name = target.name if isinstance(target, Target) else target
    return pytest.mark.skipif(not runs_here(target), reason=f"this host cannot run {name} code")


def runnable(*targets: str | Target) -> list[Any]:
    """`targets` as pytest parameters, each skipped where this host cannot run its code."""
    return [
        pytest.param(t, marks=needs_host(t), id=t.name if isinstance(t, Target) else t)
        for t in targets
    ]


DTYPES = {t.value: numpy_dtype(t) for t in ScalarType}
INT_TYPES = ("i8", "i16", "i32", "i64", "index")

SHAPES = (1, 2, 3, 5, 7, 8, 11, 13, 16, 17, 23, 31, 32, 37, 47, 53, 64, 67, 70)
"""Extents drawn by the random-shape tests: 1..70 with the primes, powers of two and their
neighbours (vector-width tails)."""

RTOL = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-5, "float64": 1e-12}
"""Relative tolerance of one floating-point result (by numpy dtype name), before scaling by
the reduction length: about one unit in the last place for the 16-bit types, whose results are
computed in f32 and may round either way after a different order of additions."""


@cache
def compiled(text: str, target: str | Target = "host") -> Compilation:
    return nanotc.compile(text, target=target)


@cache
def program(text: str) -> Any:
    return nanotc.load(text)


def kernel_name(text: str) -> str:
    return program(text).functions[0].name


# -- arguments ------------------------------------------------------------------------------


def root_of(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def clone_array(array: np.ndarray) -> np.ndarray:
    """The same view (shape, strides, offset) on a copy of the array's root memory."""
    root = root_of(array)
    assert root.flags.c_contiguous or root.flags.f_contiguous, "roots own contiguous memory"
    memory = np.empty(root.nbytes, np.uint8)  # bytes in memory order, strides kept as they are
    memory[:] = np.frombuffer(root.tobytes(order="A"), np.uint8)
    # as_strided's result has no ndarray base: it is the root of the copied views
    copy = as_strided(memory.view(root.dtype), root.shape, root.strides)
    if root is array:
        return copy
    offset = _address(array) - _address(root)
    return np.ndarray(array.shape, array.dtype, buffer=copy, offset=offset, strides=array.strides)


def clone(arg: Any) -> Any:
    if isinstance(arg, np.ndarray):
        return clone_array(arg)
    if isinstance(arg, Group):
        return Group(clone(arg.members), arg.offset)
    if isinstance(arg, list | tuple):
        return [clone(a) for a in arg]
    return arg


def random_array(
    rng: np.random.Generator, shape: Sequence[int], ty: str, integral: bool = False
) -> np.ndarray:
    """A Fortran-ordered array of `ty` (the default layout). Floats are uniform in [-1, 1]
    (integer-valued in [-4, 4] when `integral`); integers in [-100, 100) (i8: full range)."""
    dtype = DTYPES[ty]
    shape = tuple(shape)
    if dtype.kind == "b":
        values = rng.integers(0, 2, size=shape)
    elif dtype.kind in "iu":
        lo, hi = (-128, 128) if ty == "i8" else (-100, 100)
        values = rng.integers(lo, hi, size=shape)
    elif integral:
        values = rng.integers(-4, 5, size=shape)
    else:
        values = rng.uniform(-1.0, 1.0, size=shape)
    return fortran(values.astype(dtype))


def fortran(values: np.ndarray) -> np.ndarray:
    """A Fortran-ordered copy whose strides are the packed column-major ones in every mode,
    also modes of size 1 (numpy gives those any stride, and a dynamic stride that breaks
    S(k) * s(k) = S(k+1) makes `fuse` undefined)."""
    strides, stride = [], values.itemsize
    for n in values.shape:
        strides.append(stride)
        stride *= max(n, 1)
    memory = np.empty(max(values.size, 1) * values.itemsize, np.uint8).view(values.dtype)
    out = as_strided(memory, values.shape, tuple(strides))
    out[...] = values
    return out


def strided_view(
    rng: np.random.Generator, shape: Sequence[int], ty: str, steps: Sequence[int], pad: int = 2
) -> np.ndarray:
    """A view of `shape` into a larger random array: every `steps[k]`-th element along mode k,
    starting `pad` elements in (negative steps walk backwards)."""
    outer = [pad + abs(s) * n + pad for s, n in zip(steps, shape)]
    base = random_array(rng, outer, ty)
    index = tuple(
        slice(pad, pad + s * n, s) if s > 0 else slice(pad + abs(s) * n - 1, pad - 1, s)
        for s, n in zip(steps, shape)
    )
    view = base[index]
    assert view.shape == tuple(shape)
    return view


def fill_garbage(array: np.ndarray) -> np.ndarray:
    """Fill with NaN (floats) or 0x5A bytes (integers): what an output with beta = 0 holds."""
    if array.dtype.kind == "f" or array.dtype == DTYPES["bf16"]:
        array[...] = np.nan
    elif array.dtype.kind == "b":
        array[...] = True
    else:
        array[...] = np.full(1, 0x5A5A5A5A5A5A5A5A, np.uint64).view(np.uint8)[0]
    return array


def looped_bf16_members(m: int, n: int, k: int) -> str:
    """W4's batched form: for every member i of a loop (not the group id), C_i += A_i B_i,
    bf16 A and B into an f32 C."""
    return looped_members("f32", m, n, k, inputs="bf16")


def looped_members(ty: str, m: int, n: int, k: int, inputs: str | None = None) -> str:
    """C_i += A_i B_i for every member i of a loop in one work-group (a batch in cache);
    `inputs`: A's and B's type where it is not C's."""
    a_t, b_t, c_t, am, bm, cm = _member_types(ty, m, n, k, inputs)
    return f"""func @k(%A: {a_t}, %B: {b_t}, %C: {c_t}) {{
  %count = size %C[2] : {c_t}
  for %i = 0, %count {{
    %a = subview %A[:,:,%i] : {a_t}
    %b = subview %B[:,:,%i] : {b_t}
    %c = subview %C[:,:,%i] : {c_t}
    gemm.n.n 1.0, %a, %b, 1.0, %c : {ty}, {am}, {bm}, {ty}, {cm}
  }}
}}"""


def group_members(ty: str, m: int, n: int, k: int, inputs: str | None = None,
                  alpha: float = 1.0) -> str:  # fmt: skip
    """C_g += alpha A_g B_g on the views of work-group g (W2's batches from memory)."""
    a_t, b_t, c_t, am, bm, cm = _member_types(ty, m, n, k, inputs)
    return f"""func @k(%A: {a_t}, %B: {b_t}, %C: {c_t}) {{
  %g = group_id
  %a = subview %A[:,:,%g] : {a_t}
  %b = subview %B[:,:,%g] : {b_t}
  %c = subview %C[:,:,%g] : {c_t}
  gemm.n.n {alpha!r}, %a, %b, 1.0, %c : {ty}, {am}, {bm}, {ty}, {cm}
}}"""


def tile_shapes(text: str, target: Target = ZEN4) -> set[str]:
    """The register tiles ("mr x nr") of the kernel's tile instructions, compiled for `target`."""
    tiled = nanotc.compile(text, target=target, cache=False).tiled()
    return set(re.findall(r" tile (\d+ x \d+)", tiled))


def check_members(kernel: Any, ty: str, shape: tuple[int, int, int], rng: np.random.Generator,
                  batch: int, alpha: float = 1.0, group_size: int | None = None,
                  inputs: str | None = None) -> None:  # fmt: skip
    """Runs a kernel of `group_members` or `looped_members` (`group_size` 1) on `batch`
    random f32 or f64 members (A and B of type `inputs`, bf16 or f16, where given) and
    checks C against numpy's C + alpha A B in float64."""
    m, n, k = shape
    dtype = np.float64 if ty == "f64" else np.float32
    source = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}.get(inputs or "", dtype)
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k, batch)).astype(source))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n, batch)).astype(source))
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n, batch)).astype(dtype))
    want = c + alpha * np.einsum("mkg,kng->mng", a.astype(np.float64), b.astype(np.float64))
    kernel(a, b, c, group_size=batch if group_size is None else group_size)
    tolerance = 1e-12 if ty == "f64" else 1e-5
    np.testing.assert_allclose(c, want, rtol=tolerance, atol=tolerance * k)


def _member_types(ty: str, m: int, n: int, k: int, inputs: str | None) -> tuple[str, ...]:
    """The batched memrefs of A, B and C, then those of one member."""
    inputs = inputs or ty
    batched = tuple(f"memref<{t}x{r}x{s}x?>" for t, r, s in
                    ((inputs, m, k), (inputs, k, n), (ty, m, n)))  # fmt: skip
    return batched + tuple(t.replace("x?>", ">") for t in batched)


def literal(value: float | int, ty: str) -> str:
    """A constant operand for an instruction whose scalar type is `ty`."""
    if ty in INT_TYPES or ty == "i1":
        return str(int(value))
    text = repr(float(value))
    return text if "." in text or "e" in text else text + ".0"


# -- running and comparing ------------------------------------------------------------------


@dataclass
class Outcome:
    native: list[Any]
    reference: list[Any]


def run_native(
    text: str,
    args: Sequence[Any],
    group_size: int = 1,
    target: str | Target = "host",
    num_threads: int | None = 1,
    name: str | None = None,
) -> None:
    kernel = compiled(text, target)[name or kernel_name(text)]
    kernel(*args, group_size=group_size, num_threads=num_threads)


def run_reference(text: str, args: Sequence[Any], group_size: int = 1, name: str | None = None):
    evaluate(program(text), name or kernel_name(text), list(args), group_size)


def run_both(
    text: str,
    args: Sequence[Any],
    group_size: int = 1,
    target: str | Target = "host",
    num_threads: int | None = 1,
    name: str | None = None,
) -> Outcome:
    """Run natively on `args` themselves and with the reference on copies; returns both
    argument lists (the caller compares them, or uses `check`)."""
    expected = [clone(a) for a in args]
    run_reference(text, expected, group_size, name)
    run_native(text, args, group_size, target, num_threads, name)
    return Outcome(list(args), expected)


def check(
    text: str,
    args: Sequence[Any],
    group_size: int = 1,
    target: str | Target = "host",
    num_threads: int | None = 1,
    depth: int = 1,
    name: str | None = None,
) -> Outcome:
    """run_both, then every array argument's whole memory must match (`assert_match`)."""
    outcome = run_both(text, args, group_size, target, num_threads, name)
    for got, want in zip(outcome.native, outcome.reference):
        for g, w in zip(arrays_of(got), arrays_of(want)):
            assert_match(root_of(g), root_of(w), depth)
    return outcome


def assert_match(actual: np.ndarray, expected: np.ndarray, depth: int = 1) -> None:
    """Integers (and i1) exactly; floats with NaN exactly where NaN is expected and otherwise
    within RTOL * max(1, depth) relative to the largest magnitude of the result (for
    reductions of length `depth`, whose rounding error grows with it)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if actual.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected)
        return
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    bad = np.flatnonzero(nan_a != nan_e)
    assert bad.size == 0, f"NaN mismatch at flat indices {bad[:10]}: got {a.flat[bad[:10]]}"
    finite = np.isfinite(e)
    np.testing.assert_array_equal(a[~finite & ~nan_e], e[~finite & ~nan_e])  # infinities
    if not finite.any():
        return
    rtol = RTOL[actual.dtype.name]
    scale = max(1.0, float(np.max(np.abs(e[finite]))))
    tolerance = rtol * max(1, depth) * scale
    np.testing.assert_allclose(a[finite], e[finite], rtol=0, atol=tolerance)


def same_bits(actual: Any, expected: Any) -> bool:
    """Equal values of the same dtype, NaN equal to NaN (any payload), -0.0 != 0.0."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.dtype != e.dtype:
        return False
    if a.dtype.kind == "f":
        a64, e64 = a.astype(np.float64), e.astype(np.float64)
        both_nan = np.isnan(a64) & np.isnan(e64)
        same = (a64 == e64) & (np.signbit(a64) == np.signbit(e64))
        return bool(np.all(both_nan | same))
    return bool(np.array_equal(a, e))


def assert_same_bits(actual: Any, expected: Any, context: str = "") -> None:
    if same_bits(actual, expected):
        return
    a, e = np.asarray(actual), np.asarray(expected)
    with np.errstate(invalid="ignore"):
        diff = np.flatnonzero(~((a == e) | (np.isnan(a) & np.isnan(e))) | (a.dtype != e.dtype))
    if a.dtype.kind == "f":
        diff = np.union1d(diff, np.flatnonzero(np.signbit(a) != np.signbit(e)))
    raise AssertionError(
        f"{context}: native != reference at {diff[:8]}: "
        f"native {a.flat[diff[:8]]}, reference {e.flat[diff[:8]]}"
    )
