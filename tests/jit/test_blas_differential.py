"""The collective instructions (axpby, gemm, gemv, ger, hadamard, sum) natively against the
reference evaluator and the numpy formula: random shapes 1..70 with the primes, every
transpose, alpha and beta in {0, 1, other} as launch arguments and as literals (a NaN- or
garbage-filled output when beta is 0, which must never be read), dynamic sizes, strided,
row-major, negative-stride and subviewed layouts, f32 / f64, integer types with wrap-around,
and mixed element types. The key tests run on the host, avx2 and generic targets."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from nanotc.runtime.arguments import ArgumentError

from .blas_cases import INSTRUCTIONS, LAYOUTS, STATIC_LAYOUTS, Case, declare, depth_of, run_case
from .helpers import SHAPES, TARGETS, check, compiled

KINDS = tuple(INSTRUCTIONS)
GEMM_LIKE = ("gemm", "ger")
"""Lowered through the GEMM nanokernels: on dynamic layouts they compile to much more code, so
the tests give them static layouts wherever the layout is not what is being tested."""


def random_sizes(rng: np.random.Generator, count: int) -> list[tuple[int, int, int]]:
    """(m, n, k) drawn from 1..70 (primes, powers of two and their neighbours); the first is
    all ones, the smallest case."""
    sizes = [(1, 1, 1)]
    sizes += [tuple(int(x) for x in rng.choice(SHAPES, 3)) for _ in range(count - 1)]
    return sizes  # type: ignore[return-value]


def transposes(kind: str) -> list[tuple[str, ...]]:
    count = INSTRUCTIONS[kind].transposes
    return [t + ("n",) * (2 - count) for t in itertools.product("nt", repeat=count)]


def operands(kind: str) -> int:
    return len(INSTRUCTIONS[kind].orders)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", ["f32", "f64"])
@pytest.mark.parametrize("kind", KINDS)
def test_random_shapes(kind: str, ty: str, target: str, rng) -> None:
    """Every transpose, sizes from 1 to 70, alpha and beta 0 / 1 / other as arguments, all
    sizes dynamic (one kernel for every size). gemm on dynamic sizes compiles to much more
    code, so it takes static sizes (one kernel per size) except for one dynamic kernel per
    type on the host; test_gemm_nanokernels covers its dynamic forms on every target."""
    n = operands(kind)
    for i, trans in enumerate(transposes(kind)):
        if kind != "gemm":
            case = Case(kind, trans, (ty,) * n, ty, ("dynamic",) * n)
            run_case(case, target, rng, random_sizes(rng, 4))
            continue
        for mnk in random_sizes(rng, 2):
            case = Case(kind, trans, (ty,) * n, ty, ("packed",) * n, static_shape=mnk)
            run_case(case, target, rng, [mnk])
        if target == "host" and i == (0 if ty == "f32" else 3):
            case = Case(kind, trans, (ty,) * n, ty, ("dynamic",) * n)
            run_case(case, target, rng, random_sizes(rng, 4))


LAYOUT_PARAMS = [
    (kind, variant, target)
    for kind in KINDS
    for variant in range(3)
    for target in TARGETS
    if target == "host" or variant == TARGETS.index(target)
]


@pytest.mark.parametrize(("kind", "variant", "target"), LAYOUT_PARAMS)
def test_layouts(kind: str, variant: int, target: str, rng) -> None:
    """Operands in every layout (each operand cycles through LAYOUTS across the variants; the
    host runs every variant, the other targets one each), the whole memory around each view
    compared, so writes outside a view show. gemm and ger take the dynamic layouts on the host
    only (see GEMM_LIKE)."""
    n = operands(kind)
    choices = LAYOUTS if kind not in GEMM_LIKE or target == "host" else STATIC_LAYOUTS
    layouts = tuple(choices[(variant * n + i * 3 + variant) % len(choices)] for i in range(n))
    trans = transposes(kind)[variant % len(transposes(kind))]
    ty = ("f64", "f32", "f64")[variant]
    mnk = tuple(int(x) for x in rng.choice(SHAPES, 3))
    statics = any(lay in STATIC_LAYOUTS for lay in layouts)
    case = Case(kind, trans, (ty,) * n, ty, layouts, static_shape=mnk if statics else None)
    run_case(case, target, rng, [mnk] if statics else random_sizes(rng, 3))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_layout_of_the_output(kind: str, target: str, rng) -> None:
    """The output in each layout in turn (two of them off the host), the inputs dynamic
    (static for gemm off the host)."""
    n = operands(kind)
    ty = "f32"
    if target != "host":
        output_layouts: tuple[str, ...] = ("strided", "sstrided")
    elif kind in GEMM_LIKE:  # large code on dynamic layouts: the key ones
        output_layouts = ("rowmajor", "subview", "sstrided")
    else:
        output_layouts = ("strided", "rowmajor", "reversed", "subview", "sstrided")
    for lay in output_layouts:
        if kind == "sum_vector" and lay not in ("subview", "sstrided"):
            continue  # an order-0 output has no layout of its own
        mnk = tuple(int(x) for x in rng.choice(SHAPES, 3))
        if kind in GEMM_LIKE and (target != "host" or lay in STATIC_LAYOUTS):
            if lay not in STATIC_LAYOUTS:
                continue
            layouts = ("packed",) * (n - 1) + (lay,)
        else:
            layouts = ("dynamic",) * (n - 1) + (lay,)
        static = mnk if any(x in STATIC_LAYOUTS for x in layouts) else None
        case = Case(kind, transposes(kind)[-1], (ty,) * n, ty, layouts, static_shape=static)
        run_case(case, target, rng, [mnk])


INT_CASES = ["i32", "i8", "i64", "i16", "index"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", KINDS)
def test_integer_types(kind: str, target: str, rng) -> None:
    """Integer outputs compute in their own type and wrap (i8 products overflow); alpha and
    beta 0 / 1 / other; the integer results must match exactly."""
    n = operands(kind)
    for k, ty in enumerate(INT_CASES[:2] if target != "host" else INT_CASES):
        trans = transposes(kind)[k % len(transposes(kind))]
        case = Case(kind, trans, (ty,) * n, ty, ("dynamic",) * n)
        run_case(case, target, rng, random_sizes(rng, 3))


MIXED = [
    # (input types, output type, alpha/beta type)
    (("f32", "f32"), "f64", "f64"),
    (("f64", "f64"), "f32", "f32"),
    (("f16", "f16"), "f32", "f32"),
    (("f32", "f64"), "f64", "f32"),
    (("i8", "i8"), "i32", "i32"),
    (("i16", "i32"), "i64", "i64"),
    (("i32", "i32"), "f64", "f64"),
    (("f32", "f32"), "i32", "i32"),
    (("f64", "f64"), "f16", "f32"),
]


MIXED_PARAMS = [
    (kind, mixed, target)
    for kind in KINDS
    for mixed in range(len(MIXED))
    for target in TARGETS
    if target == "host" or mixed % 3 == 0
]


@pytest.mark.parametrize(("kind", "mixed", "target"), MIXED_PARAMS)
def test_mixed_types(kind: str, mixed: int, target: str, rng) -> None:
    """Inputs, alpha/beta and output of different types: everything converted to the output's
    compute type first (f16 outputs compute in f32), the result rounded or wrapped. Every mix
    on the host, every third on the other targets."""
    ins, out, ts = MIXED[mixed]
    n = operands(kind)
    types = (ins + ins)[: n - 1] + (out,)
    trans = transposes(kind)[mixed % len(transposes(kind))]
    if kind in GEMM_LIKE:  # static sizes (see GEMM_LIKE)
        mnk = tuple(int(x) for x in rng.choice(SHAPES, 3))
        case = Case(kind, trans, types, ts, ("packed",) * n, static_shape=mnk)
        run_case(case, target, rng, [mnk])
        return
    case = Case(kind, trans, types, ts, ("dynamic",) * n)
    run_case(case, target, rng, random_sizes(rng, 3))


LITERALS = [(1.0, 0.0), (2.5, 1.0), (-0.5, 1.5), (1.0, 1.0), (0.0, 2.0)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", KINDS)
def test_literal_alpha_beta_and_static_shapes(kind: str, target: str, rng) -> None:
    """alpha and beta as literals select specialised code (beta 0: the output is only written,
    beta 1: no multiply); with static packed shapes of random primes. The other targets take
    the first two literal pairs."""
    n = operands(kind)
    pairs = LITERALS if target == "host" else LITERALS[:2]
    for i, (alpha, beta) in enumerate(pairs):
        ty = "f64" if i % 2 else "f32"
        mnk = tuple(int(x) for x in rng.choice(SHAPES, 3))
        trans = transposes(kind)[i % len(transposes(kind))]
        case = Case(
            kind, trans, (ty,) * n, ty, ("packed",) * n, alpha=alpha, beta=beta, static_shape=mnk
        )
        run_case(case, target, rng, [mnk])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_literal_beta_zero_in_the_compute_type_never_reads_the_output(
    kind: str, target: str, rng
) -> None:
    """An f64 beta of 1e-50 is 0 in f32: the output (garbage) is not read, as the reference
    decides on the converted beta."""
    n = operands(kind)
    mnk = (5, 3, 4)
    trans = transposes(kind)[0]
    case = Case(kind, trans, ("f32",) * n, "f64", ("packed",) * n, alpha=1.5, beta=1e-50,
                static_shape=mnk)  # fmt: skip
    run_case(case, target, rng, [mnk])


@pytest.mark.parametrize("kind", ["gemm", "axpby", "sum"])
@pytest.mark.parametrize(
    ("element", "scalar", "beta"),
    [("i32", "f64", 1e10), ("i8", "f32", 300.0), ("i32", "i64", 2**40 + 3), ("i8", "i8", 255)],
)
def test_literal_beta_past_an_integer_compute_type_converts_as_a_cast(
    kind: str, element: str, scalar: str, beta: float, rng
) -> None:
    """A literal beta that does not fit the integer compute type saturates (from a float) or
    wraps (from an integer, `255 : i8` is -1) as a cast does; compiling it crashed."""
    n = operands(kind)
    case = Case(kind, transposes(kind)[0], (element,) * n, scalar, ("packed",) * n, alpha=1,
                beta=beta, static_shape=(3, 2, 2))  # fmt: skip
    args, _ = case.arguments((3, 2, 2), 1, 1, rng)  # the %beta argument is unused
    check(case.text(), args, target="host", depth=depth_of(kind, 3, 2, 2))  # against the reference


@pytest.mark.parametrize("kind", ["gemm", "gemv", "axpby", "sum"])
def test_integer_literal_alpha_beta(kind: str, rng) -> None:
    n = operands(kind)
    for alpha, beta in [(1, 0), (3, 1), (-2, 5)]:
        case = Case(
            kind,
            transposes(kind)[-1],
            ("i32",) * n,
            "i32",
            ("dynamic",) * n,
            alpha=alpha,
            beta=beta,
        )
        run_case(case, "host", rng, random_sizes(rng, 2))


def grouped(case: Case) -> str:
    """The case's kernel with every memref operand taken from a group at the group id."""
    text = case.text()
    loads = ["%gid = group_id"]
    for spec in case.specs():
        t = declare(spec, (1, 1)).type_text
        text = text.replace(f"%{spec.name}: {t}", f"%{spec.name}_g: group<{t}>")
        loads.append(f"%{spec.name} = load %{spec.name}_g[%gid] : group<{t}>")
    head, body = text.split("{\n", 1)
    return head + "{\n    " + "\n    ".join(loads) + "\n" + body


@pytest.mark.parametrize("kind", KINDS)
def test_groups_split_over_two_threads(kind: str, rng) -> None:
    """Nine work-groups, each on its own group members: two threads give the one-thread
    result bit for bit, and both match the reference."""
    n = operands(kind)
    case = Case(kind, transposes(kind)[-1], ("f64",) * n, "f64", ("dynamic",) * n)
    text = grouped(case)
    groups = 9
    members: list[list[np.ndarray]] = [[] for _ in range(n)]
    for _ in range(groups):
        mnk = tuple(int(x) for x in rng.choice(SHAPES, 3))
        _, views = case.arguments(mnk, 1.5, 0.5, rng)
        for k in range(n):
            members[k].append(views[k])
    scalars = [np.float64(1.5), np.float64(0.5)]
    one = [[m.copy(order="F") for m in ms] for ms in members]
    kernel = compiled(text)["k"]
    kernel(*one, *scalars, group_size=groups, num_threads=1)
    check(text, [*members, *scalars], group_size=groups, num_threads=2, depth=70)
    for a, b in zip(one[-1], members[-1]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("kind", "shapes"),
    [
        ("axpby_vector", [(1,), (5,)]),
        ("hadamard", [(5,), (1,), (5,)]),
        ("gemm", [(3, 4), (5, 2), (3, 2)]),
        ("gemv", [(3, 4), (3,), (3,)]),
        ("ger", [(3,), (2,), (3, 3)]),
        ("sum", [(3, 4), (4,)]),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_reference_refuses_mismatched_dynamic_shapes(kind: str, shapes) -> None:
    """Dynamic sizes that disagree would make the native code read out of bounds: a launch
    refuses parameters' arrays that disagree (`nanotc.runtime.extents`), in the oracle as
    natively, instead of broadcasting a size-1 operand into a result."""
    from .helpers import random_array, run_reference

    n = operands(kind)
    case = Case(kind, ("n", "n"), ("f64",) * n, "f64", ("dynamic",) * n)
    rng = np.random.default_rng(0)
    arrays = [random_array(rng, shape, "f64") for shape in shapes]
    with pytest.raises(ArgumentError, match="expected size"):
        run_reference(case.text(), [*arrays, np.float64(1), np.float64(0)])


def test_reference_refuses_computed_sizes_that_disagree() -> None:
    """Sizes the program computes (slices) are not known at launch: the oracle raises where
    they meet an instruction that pairs them."""
    from nanotc.reference import EvaluationError

    from .helpers import run_reference

    v = "memref<f64x?>"
    text = f"""func @k(%x: {v}, %y: {v}, %n: index) {{
    %xs = subview %x[0:%n] : {v}
    axpby.n 1.0, %xs, 0.0, %y : f64, {v}, f64, {v}
}}"""
    with pytest.raises(EvaluationError, match="incompatible shapes"):
        run_reference(text, [np.zeros(8), np.zeros(5), 3])
