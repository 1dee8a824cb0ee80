"""Rules of the collective linear-algebra instructions: operand kinds, orders and shapes of
axpby, gemm, gemv, ger, hadamard and sum, the scalar types of alpha and beta, and that a
gemm's or gemv's output is not one of its operands."""

from __future__ import annotations

from nanotc.check.context import CheckContext, is_scalar, unknown
from nanotc.check.scalar_rules import rule
from nanotc.diagnostics import ErrorKind
from nanotc.ir.core import Instruction
from nanotc.ir.instructions import (
    Axpby,
    BlasInstruction,
    Gemm,
    Gemv,
    Ger,
    Hadamard,
    Sum,
    Transpose,
)
from nanotc.ir.types import DYNAMIC, I1, Extent, MemRefType
from nanotc.ir.values import Value


def compatible(a: Extent, b: Extent) -> bool:
    return a is DYNAMIC or b is DYNAMIC or a == b


def op_shape(t: MemRefType, trans: Transpose) -> tuple[Extent, ...]:
    """Shape of op(X): transposed for `.t` on a matrix, unchanged otherwise."""
    return t.shape[::-1] if trans is Transpose.T and t.order == 2 else t.shape


def _operands_ok(inst: BlasInstruction, ctx: CheckContext, memrefs: tuple[str, ...]) -> bool:
    """alpha and beta are scalars of one type, the rest memrefs; nothing boolean."""
    fields = inst.fields
    if unknown(fields["alpha"], fields["beta"], *(fields[m] for m in memrefs)):
        return False
    ok = True
    for name in ("alpha", "beta"):
        if not is_scalar(fields[name]):
            ctx.error(ErrorKind.EXPECTED_SCALAR, inst, name)
            ok = False
    for name in memrefs:
        if not isinstance(fields[name].type, MemRefType):
            ctx.error(ErrorKind.EXPECTED_MEMREF, inst, name)
            ok = False
    if not ok:
        return False
    alpha, beta = fields["alpha"].type, fields["beta"].type
    if alpha != beta:
        ctx.error(ErrorKind.SCALAR_MISMATCH, inst, "beta", f"alpha is {alpha}, beta {beta}")
        return False
    if fields["alpha"].type == I1 or any(fields[m].type.element == I1 for m in memrefs):
        ctx.error(ErrorKind.BOOL_UNSUPPORTED, inst)
        return False
    return True


def _require_order(
    inst: Instruction, ctx: CheckContext, name: str, orders: tuple[int, ...], kind: ErrorKind
) -> bool:
    if inst.fields[name].type.order in orders:
        return True
    ctx.error(kind, inst, name)
    return False


def _shapes_match(inst: BlasInstruction, ctx: CheckContext) -> None:
    """The extents of `inst.matching_modes()` agree where they are static (the launch tests
    dynamic ones on parameters' arrays: `nanotc.runtime.extents`)."""
    for (x, i), (y, j) in inst.matching_modes():
        if not compatible(x.type.shape[i], y.type.shape[j]):
            first = _role(inst, x)
            second = _role(inst, y, besides=first)
            detail = (f"mode {i} of {first.upper()} is {x.type.shape[i]}, "
                      f"mode {j} of {second.upper()} is {y.type.shape[j]}")  # fmt: skip
            ctx.error(ErrorKind.INCOMPATIBLE_SHAPES, inst, None, detail)
            return


def _role(inst: BlasInstruction, value: Value, besides: str | None = None) -> str:
    """The operand (a, b, c, ...) that `value` is, other than `besides` where it is both
    (`axpby 1.0, %A, 0.0, %A`)."""
    names = [name for name, v in inst.fields.items() if v is value]
    return next((name for name in names if name != besides), names[0])


def _output_not_operand(
    inst: Instruction, ctx: CheckContext, output: str, operands: tuple[str, ...]
) -> None:
    """The output may not be the very value of an operand: a gemm writes C tile by tile
    while it still reads A and B, so `gemm.n.n 1.0, %A, %C, 0.0, %C` would read elements it
    already wrote. (Distinct parameters sharing memory are refused at launch:
    `nanotc.runtime.writes`.)"""
    for name in operands:
        if inst.fields[name] is inst.fields[output]:
            ctx.error(ErrorKind.OUTPUT_IS_OPERAND, inst, output, output.upper(), name.upper())


@rule(Axpby)
def _axpby(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, Axpby)
    if not _operands_ok(inst, ctx, ("a", "b")):
        return
    if not _require_order(inst, ctx, "a", (1, 2), ErrorKind.EXPECTED_VECTOR_OR_MATRIX):
        return
    a, b = op_shape(inst.a.type, inst.trans), inst.b.type.shape
    if len(a) != len(b):
        detail = f"op(A) is of order {len(a)}, B of order {len(b)}"
        ctx.error(ErrorKind.INCOMPATIBLE_SHAPES, inst, None, detail)
        return
    _shapes_match(inst, ctx)
    square = len(a) == 2 and (a[0] == a[1] or DYNAMIC in a)  # else: their shapes differ
    if inst.trans is Transpose.T and square:  # element (i, j) is written from (j, i)
        _output_not_operand(inst, ctx, "b", ("a",))


@rule(Gemm)
def _gemm(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, Gemm)
    if not _operands_ok(inst, ctx, ("a", "b", "c")):
        return
    if not all(_require_order(inst, ctx, n, (2,), ErrorKind.EXPECTED_MATRIX) for n in "abc"):
        return
    _shapes_match(inst, ctx)
    _output_not_operand(inst, ctx, "c", ("a", "b"))


@rule(Gemv)
def _gemv(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, Gemv)
    if not _operands_ok(inst, ctx, ("a", "b", "c")):
        return
    orders_ok = [
        _require_order(inst, ctx, "a", (2,), ErrorKind.EXPECTED_MATRIX),
        _require_order(inst, ctx, "b", (1,), ErrorKind.EXPECTED_VECTOR),
        _require_order(inst, ctx, "c", (1,), ErrorKind.EXPECTED_VECTOR),
    ]
    if all(orders_ok):
        _shapes_match(inst, ctx)
        _output_not_operand(inst, ctx, "c", ("b",))


@rule(Ger)
def _ger(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, Ger)
    if not _operands_ok(inst, ctx, ("a", "b", "c")):
        return
    orders_ok = [
        _require_order(inst, ctx, "a", (1,), ErrorKind.EXPECTED_VECTOR),
        _require_order(inst, ctx, "b", (1,), ErrorKind.EXPECTED_VECTOR),
        _require_order(inst, ctx, "c", (2,), ErrorKind.EXPECTED_MATRIX),
    ]
    if all(orders_ok):
        _shapes_match(inst, ctx)


@rule(Hadamard)
def _hadamard(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, Hadamard)
    if not _operands_ok(inst, ctx, ("a", "b", "c")):
        return
    if all(_require_order(inst, ctx, n, (1,), ErrorKind.EXPECTED_VECTOR) for n in "abc"):
        _shapes_match(inst, ctx)


@rule(Sum)
def _sum(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, Sum)
    if not _operands_ok(inst, ctx, ("a", "b")):
        return
    if not _require_order(inst, ctx, "a", (1, 2), ErrorKind.EXPECTED_VECTOR_OR_MATRIX):
        return
    if inst.a.type.order == 1:
        _require_order(inst, ctx, "b", (0,), ErrorKind.EXPECTED_SCALAR_MEMREF)
    elif _require_order(inst, ctx, "b", (1,), ErrorKind.EXPECTED_VECTOR):
        _shapes_match(inst, ctx)
