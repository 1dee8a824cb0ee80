"""The instructions of the tensor language (reference v0.3), each declared once.

A declaration lists the fields in the order the text spells them, the syntax (see
`nanotc.ir.syntax`), whether the instruction is collective, and how result types follow from
operands and attributes. The result-type rules here are the ones the reference states for
subview, expand, fuse, load and size; every other rule is verified in `nanotc.check`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

from nanotc.diagnostics import ErrorKind
from nanotc.ir.core import (
    ConstKind,
    Flag,
    Instruction,
    IntAttr,
    IRError,
    Kind,
    MemRefTypeAttr,
    RegionKind,
    ScalarTypeAttr,
    ScalarTypeListAttr,
    Suffix,
    attribute,
    operand,
    operands,
    optional_operand,
    region,
)
from nanotc.ir.types import (
    DYNAMIC,
    I1,
    INDEX,
    Extent,
    GroupType,
    MemRefType,
    Type,
    UnknownType,
    product,
)
from nanotc.ir.values import Constant, OpResult, Value

INT_INDEX = dict(constants=ConstKind.INT, const_type=INDEX)


class Transpose(enum.Enum):
    N = "n"
    T = "t"


class BinaryOp(enum.Enum):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    REM = "rem"
    SHL = "shl"
    SHR = "shr"
    AND = "and"
    OR = "or"
    XOR = "xor"

    @property
    def integer_only(self) -> bool:
        return self in (BinaryOp.SHL, BinaryOp.SHR, BinaryOp.AND, BinaryOp.OR, BinaryOp.XOR)


class UnaryOp(enum.Enum):
    NEG = "neg"
    NOT = "not"

    @property
    def integer_only(self) -> bool:
        return self is UnaryOp.NOT


class CmpCond(enum.Enum):
    EQ = "eq"
    NE = "ne"
    GT = "gt"
    GE = "ge"
    LT = "lt"
    LE = "le"


def memref_of(value: Value, operand_name: str) -> MemRefType:
    """The memref type of an operand, or IRError(EXPECTED_MEMREF) blaming that operand."""
    if isinstance(value.type, MemRefType):
        return value.type
    raise IRError(ErrorKind.EXPECTED_MEMREF, operand=operand_name)


def no_such_mode(mode: int, t: MemRefType) -> str:
    """The detail of OUT_OF_BOUNDS for a mode number a memref does not have."""
    return f"mode {mode} of a memref of order {t.order} (modes 0 to {t.order - 1})"


def _static(value: Value | None) -> int | None:
    """The value of an integer literal operand, None for SSA values and wildcards."""
    return value.value if isinstance(value, Constant) and isinstance(value.value, int) else None


def _unknown_on_error(source: Value) -> bool:
    return isinstance(source.type, UnknownType)


# -- replicated scalar instructions ---------------------------------------------------------


class ArithBinary(Instruction):
    name = "arith"
    op = attribute(Suffix(BinaryOp))
    lhs = operand(ConstKind.NUMBER)
    rhs = operand(ConstKind.NUMBER)
    syntax = "{op} $lhs, $rhs : type($lhs, $rhs)"

    def result_types(self) -> Sequence[Type]:
        return (self.lhs.type,)


class ArithUnary(Instruction):
    name = "arith"
    op = attribute(Suffix(UnaryOp))
    a = operand(ConstKind.NUMBER)
    syntax = "{op} $a : type($a)"

    def result_types(self) -> Sequence[Type]:
        return (self.a.type,)


class Cast(Instruction):
    name = "cast"
    a = operand(ConstKind.NUMBER)
    to = attribute(ScalarTypeAttr())
    syntax = "$a : type($a) -> {to}"

    def result_types(self) -> Sequence[Type]:
        return (self.to,)


class Cmp(Instruction):
    name = "cmp"
    cond = attribute(Suffix(CmpCond))
    lhs = operand(ConstKind.NUMBER)
    rhs = operand(ConstKind.NUMBER)
    syntax = "{cond} $lhs, $rhs : type($lhs, $rhs)"

    def result_types(self) -> Sequence[Type]:
        return (I1,)


class GroupId(Instruction):
    name = "group_id"

    def result_types(self) -> Sequence[Type]:
        return (INDEX,)


def is_group_id(value: object) -> bool:
    """Whether `value` is the result of a `group_id` instruction."""
    return isinstance(value, OpResult) and isinstance(value.owner, GroupId)


class GroupSize(Instruction):
    name = "group_size"

    def result_types(self) -> Sequence[Type]:
        return (INDEX,)


# -- views and memory -----------------------------------------------------------------------


class Alloca(Instruction):
    name = "alloca"
    kind = Kind.COLLECTIVE
    memref = attribute(MemRefTypeAttr())
    syntax = "-> {memref}"

    def result_types(self) -> Sequence[Type]:
        return (self.memref,)


class Load(Instruction):
    name = "load"
    source = operand()
    indices = operands(**INT_INDEX)
    syntax = "$source [ $indices ] : type($source)"

    def result_types(self) -> Sequence[Type]:
        t = self.source.type
        if isinstance(t, MemRefType):
            return (t.element,)
        if isinstance(t, GroupType):
            return (t.memref,)
        if isinstance(t, UnknownType):
            return (t,)
        raise IRError(ErrorKind.EXPECTED_MEMREF_OR_GROUP, operand="source")


class Store(Instruction):
    name = "store"
    value = operand()
    target = operand()
    indices = operands(**INT_INDEX)
    syntax = "$value , $target [ $indices ] : type($target)"


class Size(Instruction):
    name = "size"
    source = operand()
    mode = attribute(IntAttr())
    syntax = "$source [ {mode} ] : type($source)"

    def result_types(self) -> Sequence[Type]:
        return (INDEX,)


class Subview(Instruction):
    """A view: each mode takes an offset and a size (None: the mode is dropped, `?`: to end)."""

    name = "subview"
    source = operand()
    offsets = operands(**INT_INDEX)
    sizes = operands(constants=ConstKind.INT | ConstKind.WILDCARD, const_type=INDEX, holes=True)
    syntax = "$source [ custom<slices> ] : type($source)"

    def result_types(self) -> Sequence[Type]:
        if _unknown_on_error(self.source):
            return (self.source.type,)
        t = memref_of(self.source, "source")
        if len(self.offsets) != t.order:
            raise IRError(ErrorKind.NUMBER_OF_INDICES, len(self.offsets), t)
        shape: list[Extent] = []
        stride: list[Extent] = []
        for mode, (offset, size) in enumerate(zip(self.offsets, self.sizes)):
            if size is None:
                continue
            shape.append(_slice_extent(t.shape[mode], offset, size))
            stride.append(t.stride[mode])
        return (MemRefType(t.element, tuple(shape), tuple(stride)),)


def _slice_extent(mode_size: Extent, offset: Value, size: Value) -> Extent:
    if isinstance(size, Constant) and size.is_wildcard:
        start = _static(offset)
        if mode_size is DYNAMIC or start is None:
            return DYNAMIC
        return max(mode_size - start, 0)  # a start past the end is the checker's to report
    return _static(size)


class Expand(Instruction):
    """View one mode as several; `shape` entries are literals, `?` or index values."""

    name = "expand"
    source = operand()
    mode = attribute(IntAttr())
    shape = operands(constants=ConstKind.INT | ConstKind.WILDCARD, const_type=INDEX)
    syntax = "$source [ {mode} -> custom<expand_shape> ] : type($source)"

    def result_types(self) -> Sequence[Type]:
        if _unknown_on_error(self.source):
            return (self.source.type,)
        t = memref_of(self.source, "source")
        if not 0 <= self.mode < t.order:
            raise IRError(ErrorKind.OUT_OF_BOUNDS, no_such_mode(self.mode, t))
        if len(self.shape) < 2:
            raise IRError(ErrorKind.EXPAND_TOO_SMALL)
        if sum(1 for v in self.shape if _is_wildcard(v)) > 1:
            raise IRError(ErrorKind.EXPAND_TOO_MANY_DYNAMIC)
        entries = self.expanded_extents(t.shape[self.mode])
        strides: list[Extent] = []
        current = t.stride[self.mode]
        for e in entries:
            strides.append(current)
            current = DYNAMIC if current is DYNAMIC or e is DYNAMIC else current * e
        m = self.mode
        shape = t.shape[:m] + tuple(entries) + t.shape[m + 1 :]
        stride = t.stride[:m] + tuple(strides) + t.stride[m + 1 :]
        return (MemRefType(t.element, shape, stride),)

    def expanded_extents(self, mode_size: Extent) -> list[Extent]:
        """Static extents of the new modes; the `?` entry is inferred when possible."""
        known = [None if _is_wildcard(v) else _static(v) for v in self.shape]
        if not any(_is_wildcard(v) for v in self.shape):
            return known
        others = [k for k, v in zip(known, self.shape) if not _is_wildcard(v)]
        rest = product(others)
        if mode_size is DYNAMIC or rest is DYNAMIC or rest == 0 or mode_size % rest != 0:
            inferred: Extent = DYNAMIC
        else:
            inferred = mode_size // rest
        return [inferred if _is_wildcard(v) else k for k, v in zip(known, self.shape)]


def _is_wildcard(value: Value) -> bool:
    return isinstance(value, Constant) and value.is_wildcard


class Fuse(Instruction):
    name = "fuse"
    source = operand()
    first = attribute(IntAttr())
    last = attribute(IntAttr())
    syntax = "$source [ {first} , {last} ] : type($source)"

    def result_types(self) -> Sequence[Type]:
        if _unknown_on_error(self.source):
            return (self.source.type,)
        t = memref_of(self.source, "source")
        i, j = self.first, self.last
        if not 0 <= i < j < t.order:
            order = t.order
            raise IRError(ErrorKind.OUT_OF_BOUNDS, f"modes {i} to {j} of a memref of order "
                          f"{order} (fused: first < last, both from 0 to {order - 1})")  # fmt: skip
        shape = t.shape[:i] + (product(t.shape[i : j + 1]),) + t.shape[j + 1 :]
        stride = t.stride[: i + 1] + t.stride[j + 1 :]
        return (MemRefType(t.element, shape, stride),)


class LifetimeStop(Instruction):
    name = "lifetime_stop"
    target = operand()
    syntax = "$target"


class Barrier(Instruction):
    name = "barrier"
    kind = Kind.COLLECTIVE


# -- control flow ---------------------------------------------------------------------------


class If(Instruction):
    name = "if"
    cond = operand(constants=ConstKind.INT, const_type=I1)
    returns = attribute(ScalarTypeListAttr(), default=())
    then = region()
    otherwise = region(optional=True)
    syntax = "$cond ( -> '(' {returns} ')' )? $then ( else $otherwise )?"

    def result_types(self) -> Sequence[Type]:
        return tuple(self.returns)


class For(Instruction):
    name = "for"
    start = operand(constants=ConstKind.INT, const_type="loop_type")
    stop = operand(constants=ConstKind.INT, const_type="loop_type")
    step = optional_operand(constants=ConstKind.INT, const_type="loop_type")
    loop_type = attribute(ScalarTypeAttr(), default=INDEX)
    body = region()
    syntax = "$body.param = $start , $stop ( , $step )? ( : {loop_type} )? $body"

    @classmethod
    def region_param_types(cls, attrs: Mapping[str, Any], region_name: str) -> Sequence[Type]:
        return (attrs["loop_type"],)


class Foreach(Instruction):
    name = "foreach"
    start = operand(constants=ConstKind.INT, const_type="loop_type")
    stop = operand(constants=ConstKind.INT, const_type="loop_type")
    loop_type = attribute(ScalarTypeAttr(), default=INDEX)
    body = region(RegionKind.SPMD)
    syntax = "$body.param = $start , $stop ( : {loop_type} )? $body"

    @classmethod
    def region_param_types(cls, attrs: Mapping[str, Any], region_name: str) -> Sequence[Type]:
        return (attrs["loop_type"],)


class Yield(Instruction):
    name = "yield"
    terminates_region = True
    values = operands(constants=ConstKind.NUMBER)
    syntax = "$values : types($values)"


# -- collective linear algebra --------------------------------------------------------------

_SCALAR = ConstKind.NUMBER
_BLAS_TYPES_3 = "type($alpha), type($a), type($beta), type($b)"
_BLAS_TYPES_4 = "type($alpha), type($a), type($b), type($beta), type($c)"


class BlasInstruction(Instruction):
    """Common shape of the collective linear-algebra instructions: alpha, inputs, beta, output."""

    kind = Kind.COLLECTIVE
    atomic: bool

    def inputs(self) -> list[Value]:
        raise NotImplementedError

    def output(self) -> Value:
        raise NotImplementedError

    def matching_modes(self) -> list[tuple[Mode, Mode]]:
        """Pairs of operand modes whose extents must be equal, for operands of the orders the
        checker requires."""
        raise NotImplementedError


Mode = tuple[Value, int]  # an operand and one of its modes


def _order(v: Value) -> int:
    return v.type.order if isinstance(v.type, MemRefType) else 0


def _op_modes(m: Value, trans: Transpose) -> tuple[Mode, Mode]:
    """The modes of matrix m that op(m) has as rows and columns."""
    return ((m, 1), (m, 0)) if trans is Transpose.T else ((m, 0), (m, 1))


class Axpby(BlasInstruction):
    """B := alpha * op(A) + beta * B"""

    name = "axpby"
    trans = attribute(Suffix(Transpose))
    atomic = attribute(Flag("atomic"), default=False)
    alpha = operand(_SCALAR)
    a = operand()
    beta = operand(_SCALAR)
    b = operand()
    syntax = "{trans}{atomic} ( , )? $alpha , $a , $beta , $b : " + _BLAS_TYPES_3

    def inputs(self) -> list[Value]:
        return [self.a]

    def output(self) -> Value:
        return self.b

    def matching_modes(self) -> list[tuple[Mode, Mode]]:
        if _order(self.a) == 2:
            return list(zip(_op_modes(self.a, self.trans), ((self.b, 0), (self.b, 1))))
        return [((self.a, 0), (self.b, 0))]


class Gemm(BlasInstruction):
    """C := alpha * op(A) op(B) + beta * C"""

    name = "gemm"
    trans_a = attribute(Suffix(Transpose))
    trans_b = attribute(Suffix(Transpose))
    atomic = attribute(Flag("atomic"), default=False)
    alpha = operand(_SCALAR)
    a = operand()
    b = operand()
    beta = operand(_SCALAR)
    c = operand()
    syntax = "{trans_a}{trans_b}{atomic} ( , )? $alpha , $a , $b , $beta , $c : " + _BLAS_TYPES_4

    def inputs(self) -> list[Value]:
        return [self.a, self.b]

    def output(self) -> Value:
        return self.c

    def matching_modes(self) -> list[tuple[Mode, Mode]]:
        (m, k), (k2, n) = _op_modes(self.a, self.trans_a), _op_modes(self.b, self.trans_b)
        return [(k, k2), (m, (self.c, 0)), (n, (self.c, 1))]


class Gemv(BlasInstruction):
    """c := alpha * op(A) b + beta * c"""

    name = "gemv"
    trans_a = attribute(Suffix(Transpose))
    atomic = attribute(Flag("atomic"), default=False)
    alpha = operand(_SCALAR)
    a = operand()
    b = operand()
    beta = operand(_SCALAR)
    c = operand()
    syntax = "{trans_a}{atomic} ( , )? $alpha , $a , $b , $beta , $c : " + _BLAS_TYPES_4

    def inputs(self) -> list[Value]:
        return [self.a, self.b]

    def output(self) -> Value:
        return self.c

    def matching_modes(self) -> list[tuple[Mode, Mode]]:
        m, k = _op_modes(self.a, self.trans_a)
        return [(k, (self.b, 0)), (m, (self.c, 0))]


class Ger(BlasInstruction):
    """C := alpha * a b^T + beta * C"""

    name = "ger"
    atomic = attribute(Flag("atomic"), default=False)
    alpha = operand(_SCALAR)
    a = operand()
    b = operand()
    beta = operand(_SCALAR)
    c = operand()
    syntax = "{atomic} $alpha , $a , $b , $beta , $c : " + _BLAS_TYPES_4

    def inputs(self) -> list[Value]:
        return [self.a, self.b]

    def output(self) -> Value:
        return self.c

    def matching_modes(self) -> list[tuple[Mode, Mode]]:
        return [((self.a, 0), (self.c, 0)), ((self.b, 0), (self.c, 1))]


class Hadamard(BlasInstruction):
    """c := alpha * a .* b + beta * c (the reference also spells it `hadamard_product`)"""

    name = "hadamard"
    aliases = ("hadamard_product",)
    atomic = attribute(Flag("atomic"), default=False)
    alpha = operand(_SCALAR)
    a = operand()
    b = operand()
    beta = operand(_SCALAR)
    c = operand()
    syntax = "{atomic} $alpha , $a , $b , $beta , $c : " + _BLAS_TYPES_4

    def inputs(self) -> list[Value]:
        return [self.a, self.b]

    def output(self) -> Value:
        return self.c

    def matching_modes(self) -> list[tuple[Mode, Mode]]:
        return [((self.a, 0), (self.c, 0)), ((self.b, 0), (self.c, 0))]


class Sum(BlasInstruction):
    """b := alpha * op(A) 1 + beta * b (matrix A), b := alpha * sum(a) + beta * b (vector a)"""

    name = "sum"
    trans = attribute(Suffix(Transpose))
    atomic = attribute(Flag("atomic"), default=False)
    alpha = operand(_SCALAR)
    a = operand()
    beta = operand(_SCALAR)
    b = operand()
    syntax = "{trans}{atomic} ( , )? $alpha , $a , $beta , $b : " + _BLAS_TYPES_3

    def inputs(self) -> list[Value]:
        return [self.a]

    def output(self) -> Value:
        return self.b

    def matching_modes(self) -> list[tuple[Mode, Mode]]:
        if _order(self.a) == 2:
            return [(_op_modes(self.a, self.trans)[0], (self.b, 0))]
        return []  # a vector's sum is a scalar


LANGUAGE: tuple[type[Instruction], ...] = (
    Alloca, ArithBinary, ArithUnary, Cast, Cmp, Expand, Fuse, GroupId, GroupSize, Load, Size,
    Subview, If, Axpby, Barrier, For, Foreach, Gemm, Gemv, Ger, Hadamard, LifetimeStop, Store,
    Sum, Yield,
)  # fmt: skip
