"""Rules of the replicated scalar and memory instructions: arith, cmp, cast, load, store,
size, subview, expand, fuse, alloca, lifetime_stop."""

from __future__ import annotations

from collections.abc import Callable

from nanotc.check.context import CheckContext, is_scalar, shown, unknown
from nanotc.diagnostics import ErrorKind
from nanotc.ir.core import Instruction
from nanotc.ir.instructions import (
    Alloca,
    ArithBinary,
    ArithUnary,
    BinaryOp,
    Cast,
    Cmp,
    Expand,
    Fuse,
    LifetimeStop,
    Load,
    Size,
    Store,
    Subview,
    UnaryOp,
    no_such_mode,
)
from nanotc.ir.types import (
    DYNAMIC,
    I1,
    INDEX,
    INDEX_MAX,
    GroupType,
    MemRefType,
    memref_errors,
    product,
)
from nanotc.ir.values import Constant, OpResult, Value

Rule = Callable[[Instruction, CheckContext], None]
RULES: dict[type[Instruction], Rule] = {}


def rule(cls: type[Instruction]) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        RULES[cls] = fn
        return fn

    return register


def static_int(value: Value | None) -> int | None:
    if isinstance(value, Constant) and isinstance(value.value, int):
        return value.value
    return None


def check_index(ctx: CheckContext, inst: Instruction, name: str) -> bool:
    """Every value of the variadic operand `name` must have index type."""
    ok = True
    for i, v in enumerate(inst.fields[name]):
        if v is None or unknown(v) or _wild(v):
            continue
        if v.type != INDEX:
            ctx.error(ErrorKind.EXPECTED_INDEX, inst, f"{name}[{i}]")
            ok = False
    return ok


@rule(ArithBinary)
def _arith_binary(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, ArithBinary)
    if _same_scalar_operands(inst, ctx):
        t = inst.lhs.type
        if inst.op.integer_only and t.is_float:
            ctx.error(ErrorKind.FP_UNSUPPORTED, inst)
        elif t == I1 and inst.op not in _BOOLEAN_OPS:
            ctx.error(ErrorKind.BOOL_UNSUPPORTED, inst)


_BOOLEAN_OPS = (BinaryOp.AND, BinaryOp.OR, BinaryOp.XOR)
ADDRESSABLE_BYTES = 1 << 48  # the virtual address space of x86-64 (four-level paging)


@rule(Cmp)
def _cmp(inst: Instruction, ctx: CheckContext) -> None:
    _same_scalar_operands(inst, ctx)


def _same_scalar_operands(inst: Instruction, ctx: CheckContext) -> bool:
    lhs, rhs = inst.fields["lhs"], inst.fields["rhs"]
    if unknown(lhs, rhs):
        return False
    if not is_scalar(lhs):
        ctx.error(ErrorKind.EXPECTED_SCALAR, inst, "lhs")
        return False
    if lhs.type != rhs.type:
        both = f"{shown(lhs, 'lhs')} is {lhs.type}, {shown(rhs, 'rhs')} is {rhs.type}"
        ctx.error(ErrorKind.SCALAR_MISMATCH, inst, None, both)
        return False
    return True


@rule(ArithUnary)
def _arith_unary(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, ArithUnary)
    if unknown(inst.a):
        return
    if not is_scalar(inst.a):
        ctx.error(ErrorKind.EXPECTED_SCALAR, inst, "a")
    elif inst.op is UnaryOp.NOT and inst.a.type.is_float:
        ctx.error(ErrorKind.FP_UNSUPPORTED, inst)
    elif inst.op is UnaryOp.NEG and inst.a.type == I1:
        ctx.error(ErrorKind.BOOL_UNSUPPORTED, inst)


@rule(Cast)
def _cast(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, Cast)
    if not unknown(inst.a) and not is_scalar(inst.a):
        ctx.error(ErrorKind.EXPECTED_SCALAR, inst, "a")


def _check_indices(ctx: CheckContext, inst: Instruction, t: MemRefType | GroupType) -> None:
    indices: list[Value] = inst.fields["indices"]
    expected = 1 if isinstance(t, GroupType) else t.order
    if len(indices) != expected:
        ctx.error(ErrorKind.NUMBER_OF_INDICES, inst, None, len(indices), t)
        return
    check_index(ctx, inst, "indices")
    sizes = t.shape if isinstance(t, MemRefType) else (DYNAMIC,)  # a group's size is a launch's
    for i, (v, size) in enumerate(zip(indices, sizes)):
        k = static_int(v)
        if k is not None and (k < 0 or (size is not DYNAMIC and k >= size)):
            detail = (
                f"index {k} of mode {i} is negative" if k < 0 else _outside(f"index {k}", i, size)
            )
            ctx.error(ErrorKind.OUT_OF_BOUNDS, inst, f"indices[{i}]", detail)


def _outside(what: str, mode: int, size: int) -> str:
    """Why an index, size or slice reaches past a static mode."""
    return f"{what} of mode {mode}, whose size is {size}"


@rule(Load)
def _load(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, Load)
    t = inst.source.type
    if isinstance(t, MemRefType | GroupType):
        _check_indices(ctx, inst, t)


@rule(Store)
def _store(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, Store)
    if unknown(inst.target, inst.value):
        return
    t = inst.target.type
    if not isinstance(t, MemRefType):
        ctx.error(ErrorKind.EXPECTED_MEMREF, inst, "target")
        return
    if inst.value.type != t.element:
        into = shown(inst.target, "target")
        stored = f"{shown(inst.value, 'value')} is {inst.value.type}, {into}'s elements {t.element}"
        ctx.error(ErrorKind.SCALAR_MISMATCH, inst, "value", stored)
    _check_indices(ctx, inst, t)


@rule(Size)
def _size(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, Size)
    if unknown(inst.source):
        return
    if not isinstance(inst.source.type, MemRefType):
        ctx.error(ErrorKind.EXPECTED_MEMREF, inst, "source")
    elif not 0 <= inst.mode < inst.source.type.order:
        ctx.error(ErrorKind.OUT_OF_BOUNDS, inst, None, no_such_mode(inst.mode, inst.source.type))


@rule(Subview)
def _subview(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, Subview)
    t = inst.source.type
    if not isinstance(t, MemRefType) or len(inst.offsets) != t.order:
        return  # reported when the result type was inferred
    check_index(ctx, inst, "offsets")
    check_index(ctx, inst, "sizes")
    for mode, (offset, size) in enumerate(zip(inst.offsets, inst.sizes)):
        start, extent = static_int(offset), static_int(size)
        where = f"offsets[{mode}]"
        if (start is not None and start < 0) or (extent is not None and extent <= 0):
            ctx.error(ErrorKind.INVALID_SLICE, inst, where)
            continue
        bound = t.shape[mode]
        if bound is DYNAMIC:
            continue
        if start is None:  # at offset 0 at best
            if extent is not None and extent > bound:
                detail = _outside(f"size {extent}", mode, bound)
                ctx.error(ErrorKind.OUT_OF_BOUNDS, inst, f"sizes[{mode}]", detail)
            continue
        if extent is not None:
            outside = start + extent > bound
        else:  # a dropped mode, a value size and `?` all need start < bound, but `:` (`0:?`)
            # of an empty mode is all of it
            whole_of_empty = start == bound == 0 and isinstance(size, Constant) and size.is_wildcard
            outside = start >= bound and not whole_of_empty
        if outside:
            sliced = f"offset {start}" if extent is None else f"slice {start}:{extent}"
            ctx.error(ErrorKind.OUT_OF_BOUNDS, inst, where, _outside(sliced, mode, bound))


@rule(Expand)
def _expand(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, Expand)
    t = inst.source.type
    if not isinstance(t, MemRefType) or not 0 <= inst.mode < t.order:
        return  # reported when the result type was inferred
    if not check_index(ctx, inst, "shape"):
        return
    statics = [static_int(v) for v in inst.shape]
    if any(s is not None and s < 0 for s in statics):
        ctx.error(ErrorKind.INVALID_SHAPE, inst)
        return
    mode_size = t.shape[inst.mode]
    wildcards = sum(1 for v in inst.shape if isinstance(v, Constant) and v.is_wildcard)
    if mode_size is DYNAMIC or wildcards > 1:
        return
    known = product([s for s in statics if s is not None])
    has_values = any(s is None for s, v in zip(statics, inst.shape) if not _wild(v))
    if known is DYNAMIC:
        return
    # run-time entries (and `?`) make the rest: the known entries must divide the mode
    exact = wildcards == 0 and not has_values
    if exact and known != mode_size:
        detail = f"the entries multiply to {known}, mode {inst.mode} has size {mode_size}"
        ctx.error(ErrorKind.EXPAND_PRODUCT, inst, None, detail)
    elif not exact and not _divides(known, mode_size):
        detail = f"the static entries multiply to {known}, which does not divide {mode_size}"
        ctx.error(ErrorKind.EXPAND_PRODUCT, inst, None, f"{detail}, the size of mode {inst.mode}")


def _divides(factor: int, size: int) -> bool:
    """Whether `?` times `factor` can make `size` (a zero entry only fits an empty mode)."""
    return size % factor == 0 if factor else size == 0


def _wild(v: Value) -> bool:
    return isinstance(v, Constant) and v.is_wildcard


@rule(Fuse)
def _fuse(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, Fuse)
    t = inst.source.type
    if not isinstance(t, MemRefType) or not 0 <= inst.first < inst.last < t.order:
        return  # reported when the result type was inferred
    sizes = t.shape[inst.first : inst.last + 1]
    if DYNAMIC not in sizes and product(sizes) > INDEX_MAX:  # type: ignore[operator]
        ctx.error(ErrorKind.INTEGER_OVERFLOW, inst)
    for k in range(inst.first, inst.last):
        stride, size, next_stride = t.stride[k], t.shape[k], t.stride[k + 1]
        if DYNAMIC in (stride, size, next_stride):
            continue
        if stride * size != next_stride:
            ctx.error(ErrorKind.FUSE_ILLEGAL, inst, None, k + 1, k)
            return


@rule(Alloca)
def _alloca(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, Alloca)
    if not inst.memref.is_static:
        ctx.error(ErrorKind.ALLOCA_DYNAMIC, inst)
    elif inst.memref.size_in_bytes() > ADDRESSABLE_BYTES:  # its byte count would wrap in i64
        ctx.error(ErrorKind.ALLOCA_TOO_LARGE, inst, None, inst.memref.size_in_bytes(),
                  ADDRESSABLE_BYTES)  # fmt: skip
    if inst.loc is None:  # a parsed type was checked where it is written (frontend.types)
        for kind in memref_errors(inst.memref):
            ctx.error(kind, inst)


@rule(LifetimeStop)
def _lifetime_stop(inst: Instruction, ctx: CheckContext) -> None:
    assert isinstance(inst, LifetimeStop)
    target = inst.target
    if unknown(target):
        return
    if not (isinstance(target, OpResult) and isinstance(target.owner, Alloca)):
        ctx.error(ErrorKind.LIFETIME_STOP_NOT_ALLOCA, inst, "target")
