"""Building differential cases of the collective linear-algebra instructions: operands in many
layouts (packed static, dynamic sizes, dynamic strides, row-major, a static leading dimension,
a subview taken inside the kernel), alpha and beta as literals or launch arguments, and the
numpy formula each instruction computes.

A `Case` is one kernel text plus a way to make its arguments for given sizes; the same text is
reused for many sizes and scalar values wherever the types are dynamic, so it compiles once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nanotc.targets import Target

from .helpers import (
    DTYPES,
    INT_TYPES,
    assert_match,
    check,
    fill_garbage,
    literal,
    random_array,
)

LAYOUTS = ("packed", "dynamic", "strided", "rowmajor", "ld", "subview", "reversed", "sstrided")
"""packed: static sizes, default layout. dynamic: `?` sizes, default layout. strided: `?`
sizes and strides, a view with gaps. rowmajor: `?` sizes and strides, a C-ordered array
(reversed for vectors: a negative stride). ld: static sizes with a static leading dimension or
vector stride. subview: a static-size block of a larger dynamic argument at run-time offsets.
reversed: `?` strides with negative steps. sstrided: static sizes and static strides with
gaps in every mode (every other row)."""

STATIC_LAYOUTS = ("packed", "ld", "subview", "sstrided")
"""Layouts whose instruction-side types have static sizes: gemms on them compile much faster
than on dynamic ones, so most gemm cases use these."""


@dataclass(frozen=True)
class OperandSpec:
    name: str
    ty: str
    order: int
    layout: str


@dataclass
class Bound:
    """One operand of one launch: its parameters' values and the view the instruction sees."""

    args: list[Any]
    view: np.ndarray


@dataclass
class Operand:
    spec: OperandSpec
    params: list[str] = field(default_factory=list)
    prologue: list[str] = field(default_factory=list)
    type_text: str = ""


def _dims(shape: Sequence[int | None]) -> str:
    return "".join(f"x{'?' if n is None else n}" for n in shape)


def declare(spec: OperandSpec, shape: Sequence[int]) -> Operand:
    """Parameters, prologue and the instruction-side type of an operand. Static layouts embed
    `shape`; dynamic ones do not (any shape binds)."""
    n, ty, order, lay = spec.name, spec.ty, spec.order, spec.layout
    op = Operand(spec)
    if order == 0:
        op.params, op.type_text = [f"%{n}: memref<{ty}>"], f"memref<{ty}>"
        return op
    dyn = _dims([None] * order)
    if lay == "packed":
        op.type_text = f"memref<{ty}{_dims(shape)}>"
    elif lay == "dynamic":
        op.type_text = f"memref<{ty}{dyn}>"
    elif lay in ("strided", "rowmajor", "reversed"):
        op.type_text = f"memref<{ty}{dyn},strided<{','.join('?' * order)}>>"
    elif lay == "ld":
        strides = "2" if order == 1 else f"1,{shape[0] + 3}"
        op.type_text = f"memref<{ty}{_dims(shape)},strided<{strides}>>"
    elif lay == "sstrided":
        strides = "3" if order == 1 else f"2,{2 * shape[0] + 3}"
        op.type_text = f"memref<{ty}{_dims(shape)},strided<{strides}>>"
    elif lay == "subview":
        offsets = [f"%{n}_o{k}" for k in range(order)]
        op.params = [f"%{n}_big: memref<{ty}{dyn}>"] + [f"{o}: index" for o in offsets]
        slices = ",".join(f"{o}:{s}" for o, s in zip(offsets, shape))
        op.prologue = [f"%{n} = subview %{n}_big[{slices}] : memref<{ty}{dyn}>"]
        strides = "" if order == 1 else ",strided<1,?>"
        op.type_text = f"memref<{ty}{_dims(shape)}{strides}>"
        return op
    else:
        raise ValueError(lay)
    op.params = [f"%{n}: {op.type_text}"]
    return op


def bind(
    spec: OperandSpec, shape: tuple[int, ...], rng: np.random.Generator, integral: bool = False
) -> Bound:
    """Random data for one operand in its layout."""
    ty, lay = spec.ty, spec.layout
    if spec.order == 0:
        view = random_array(rng, (), ty, integral)
        return Bound([view], view)
    if lay in ("packed", "dynamic"):
        view = random_array(rng, shape, ty, integral)
        return Bound([view], view)
    if lay == "strided":
        steps = (2,) if spec.order == 1 else (2, 3)
        return _from_base(rng, ty, shape, steps, integral)
    if lay == "reversed":
        steps = (-1,) if spec.order == 1 else (-2, 1)
        return _from_base(rng, ty, shape, steps, integral)
    if lay == "rowmajor":
        if spec.order == 1:
            return _from_base(rng, ty, shape, (-3,), integral)
        view = np.ascontiguousarray(random_array(rng, shape, ty, integral))
        return Bound([view], view)
    if lay == "ld":
        big_shape = (2 * shape[0],) if spec.order == 1 else (shape[0] + 3, shape[1])
        big = random_array(rng, big_shape, ty, integral)
        view = big[::2] if spec.order == 1 else big[: shape[0], :]
        return Bound([view], view)
    if lay == "sstrided":
        big_shape = (3 * shape[0],) if spec.order == 1 else (2 * shape[0] + 3, shape[1])
        big = random_array(rng, big_shape, ty, integral)
        view = big[1::3] if spec.order == 1 else big[1 : 1 + 2 * shape[0] : 2, :]
        return Bound([view], view)
    assert lay == "subview"
    offsets = [int(rng.integers(0, 4)) for _ in shape]
    big = random_array(
        rng, [n + o + int(rng.integers(0, 3)) for n, o in zip(shape, offsets)], ty, integral
    )
    view = big[tuple(slice(o, o + n) for o, n in zip(offsets, shape))]
    return Bound([big, *offsets], view)


def _from_base(rng, ty: str, shape, steps, integral: bool) -> Bound:
    outer = [abs(s) * n + 3 for s, n in zip(steps, shape)]
    base = random_array(rng, outer, ty, integral)
    index = tuple(
        slice(1, 1 + s * n, s) if s > 0 else slice(1 + abs(s) * n - 1, 0, s)
        for s, n in zip(steps, shape)
    )
    view = base[index]
    assert view.shape == tuple(shape), (view.shape, shape)
    return Bound([view], view)


# -- instructions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Instr:
    """One collective instruction: operand orders and how their shapes follow from (m, n, k)."""

    name: str
    transposes: int
    orders: tuple[int, ...]  # inputs..., output


INSTRUCTIONS = {
    "axpby": Instr("axpby", 1, (2, 2)),
    "axpby_vector": Instr("axpby", 1, (1, 1)),
    "gemm": Instr("gemm", 2, (2, 2, 2)),
    "gemv": Instr("gemv", 1, (2, 1, 1)),
    "ger": Instr("ger", 0, (1, 1, 2)),
    "hadamard": Instr("hadamard", 0, (1, 1, 1)),
    "sum": Instr("sum", 1, (2, 1)),
    "sum_vector": Instr("sum", 1, (1, 0)),
}


def shapes_of(kind: str, trans: Sequence[str], m: int, n: int, k: int) -> list[tuple[int, ...]]:
    """Operand shapes (as memrefs) for sizes m, n, k: the output is m x n (or m)."""

    def op_shape(rows: int, cols: int, t: str) -> tuple[int, int]:
        return (cols, rows) if t == "t" else (rows, cols)

    if kind == "axpby":
        return [op_shape(m, n, trans[0]), (m, n)]
    if kind == "axpby_vector":
        return [(m,), (m,)]
    if kind == "gemm":
        return [op_shape(m, k, trans[0]), op_shape(k, n, trans[1]), (m, n)]
    if kind == "gemv":
        return [op_shape(m, k, trans[0]), (k,), (m,)]
    if kind == "ger":
        return [(m,), (n,), (m, n)]
    if kind == "hadamard":
        return [(m,), (m,), (m,)]
    if kind == "sum":
        return [op_shape(m, k, trans[0]), (m,)]
    assert kind == "sum_vector"
    return [(k,), ()]


def depth_of(kind: str, m: int, n: int, k: int) -> int:
    return k if kind in ("gemm", "gemv", "sum", "sum_vector") else 1


@dataclass
class Case:
    """A kernel around one instruction; `scalars` are literals (text) or None (arguments)."""

    kind: str
    trans: tuple[str, ...]
    types: tuple[str, ...]  # element types: inputs..., output
    scalar_type: str
    layouts: tuple[str, ...]
    alpha: float | None = None  # None: a launch argument
    beta: float | None = None
    atomic: bool = False
    static_shape: tuple[int, int, int] | None = None  # sizes of static layouts

    def specs(self) -> list[OperandSpec]:
        instr = INSTRUCTIONS[self.kind]
        names = ["a", "b", "c"][: len(instr.orders)]
        return [
            OperandSpec(nm, ty, order, lay)
            for nm, ty, order, lay in zip(names, self.types, instr.orders, self.layouts)
        ]

    def text(self) -> str:
        m, n, k = self.static_shape or (4, 4, 4)
        shapes = shapes_of(self.kind, self.trans, m, n, k)
        operands = [declare(s, sh) for s, sh in zip(self.specs(), shapes)]
        params = [p for o in operands for p in o.params]
        ts = self.scalar_type
        alpha = "%alpha" if self.alpha is None else literal(self.alpha, ts)
        beta = "%beta" if self.beta is None else literal(self.beta, ts)
        params += [f"%alpha: {ts}", f"%beta: {ts}"]
        instr = INSTRUCTIONS[self.kind]
        mods = "".join(f".{t}" for t in self.trans[: instr.transposes])
        mods += ".atomic" if self.atomic else ""
        values = [f"%{o.spec.name}" for o in operands]
        types = [o.type_text for o in operands]
        *inputs, out = values
        *in_types, out_type = types
        operand_list = ", ".join([alpha, *inputs, beta, out])
        type_list = ", ".join([ts, *in_types, ts, out_type])
        name = instr.name
        body = [line for o in operands for line in o.prologue]
        body.append(f"{name}{mods} {operand_list}\n        : {type_list}")
        return "func @k(" + ", ".join(params) + ") {\n    " + "\n    ".join(body) + "\n}"

    def arguments(
        self, mnk: tuple[int, int, int], alpha: float, beta: float, rng: np.random.Generator
    ) -> tuple[list[Any], list[np.ndarray]]:
        """Launch arguments and the views the instruction sees (inputs..., output)."""
        shapes = shapes_of(self.kind, self.trans, *mnk)
        integral = any(t in INT_TYPES for t in self.types)
        args: list[Any] = []
        views = []
        for spec, shape in zip(self.specs(), shapes):
            bound = bind(spec, shape, rng, integral)
            args += bound.args
            views.append(bound.view)
        if as_compute(beta, self.scalar_type, self.types[-1]) == 0:  # 1e-50 is 0 in f32
            fill_garbage(views[-1])
        scalar = DTYPES[self.scalar_type].type
        args += [scalar(alpha), scalar(beta)]
        return args, views


# -- the numpy formula --------------------------------------------------------------------------


def compute_type(out_ty: str) -> str:
    return "f32" if out_ty in ("f16", "bf16") else out_ty


def as_compute(x: Any, src_ty: str, out_ty: str) -> np.ndarray:
    """Values of type src_ty converted to the output's compute type, held in f64 or i64."""
    ct = compute_type(out_ty)
    x = np.asarray(x)
    if ct in INT_TYPES:
        if src_ty.startswith("f"):
            x = np.trunc(x.astype(np.float64))  # inputs of these tests are in range
        return x.astype(np.int64).astype(DTYPES[ct]).astype(np.int64)
    with np.errstate(over="ignore"):
        return x.astype(DTYPES[ct]).astype(np.float64)


def op(x: np.ndarray, t: str) -> np.ndarray:
    return x.T if t == "t" and x.ndim == 2 else x


def expected(case: Case, views: Sequence[np.ndarray], alpha: float, beta: float) -> np.ndarray:
    """out := alpha * P + beta * out in f64 (or wrapping i64), as the instruction defines."""
    out_ty = case.types[-1]
    *ins, out = [as_compute(v, t, out_ty) for v, t in zip(views, case.types)]
    kind, trans = case.kind, case.trans
    if kind in ("axpby", "axpby_vector"):
        product = op(ins[0], trans[0])
    elif kind == "gemm":
        product = op(ins[0], trans[0]) @ op(ins[1], trans[1])
    elif kind == "gemv":
        product = op(ins[0], trans[0]) @ ins[1]
    elif kind == "ger":
        product = np.multiply.outer(ins[0], ins[1])
    elif kind == "hadamard":
        product = ins[0] * ins[1]
    elif kind == "sum":
        product = op(ins[0], trans[0]).sum(axis=1)
    else:
        product = np.asarray(ins[0].sum())
    a = as_compute(alpha, case.scalar_type, out_ty)
    b = as_compute(beta, case.scalar_type, out_ty)
    with np.errstate(over="ignore"):  # int64 arithmetic wraps like every narrower type
        result = a * product
        if b != 0:
            result = result + b * out
    if compute_type(out_ty) in INT_TYPES:
        return np.asarray(result).astype(np.int64).astype(DTYPES[out_ty]).astype(np.int64)
    return result


ALPHAS = {"float": (1.0, 0.0, -0.75, 2.5), "int": (1, 0, 3, -2)}
BETAS = {"float": (0.0, 1.0, 1.5, -0.5), "int": (0, 1, -3, 2)}


def scalar_values(case: Case) -> list[tuple[float, float]]:
    """(alpha, beta) pairs: the literal ones, or 0 / 1 / other for each launch argument."""
    kind = "int" if case.scalar_type in INT_TYPES else "float"
    alphas = [case.alpha] if case.alpha is not None else list(ALPHAS[kind][:3])
    betas = [case.beta] if case.beta is not None else list(BETAS[kind][:3])
    return [(a, b) for a in alphas for b in betas]


def run_case(
    case: Case,
    target: str | Target,
    rng: np.random.Generator,
    sizes: Sequence[tuple],
    num_threads: int = 1,
) -> None:
    """For each size (and each alpha/beta pair when they are arguments): native == reference
    (whole memory of every argument) and output == the numpy formula."""
    text = case.text()
    pairs = scalar_values(case)
    for i, mnk in enumerate(sizes):
        for alpha, beta in pairs if i == 0 else [pairs[(i * 5) % len(pairs)]]:
            args, views = case.arguments(mnk, alpha, beta, rng)
            before = [v.copy() for v in views]
            depth = depth_of(case.kind, *mnk)
            check(text, args, target=target, depth=depth, num_threads=num_threads)
            want = expected(case, before, alpha, beta)
            got = views[-1]
            out_ty = case.types[-1]
            if compute_type(out_ty) in INT_TYPES:
                np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64))
            else:
                rounded = np.asarray(want).astype(DTYPES[out_ty])
                assert_match(np.asarray(got), rounded, max(depth, 1) * 4)
