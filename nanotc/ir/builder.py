"""Python API for building kernels without text.

    f = FunctionBuilder("scale", alpha=F32, x=MemRefType.packed(F32, [DYNAMIC]))
    b = f.body
    gid = b.group_id()
    with b.for_(0, b.size(f.args["x"], 0)) as (loop, i):
        v = loop.load(f.args["x"], [i])
        loop.store(loop.arith(BinaryOp.MUL, v, f.args["alpha"]), f.args["x"], [i])
    program = Program([f.finish()])

Every language instruction is available as `b.add(Class, **fields)`; the helpers below cover
the common ones. Python ints and floats are accepted where the operand's literal type is
fixed (indices, loop bounds) or given by a sibling operand; otherwise use `b.const(v, type)`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from nanotc.diagnostics import CompileError, Diagnostic
from nanotc.ir import instructions as ins
from nanotc.ir.core import Function, Instruction, IRError, Region, RegionKind
from nanotc.ir.types import INDEX, ScalarType, Type
from nanotc.ir.values import Constant, OpResult, Value

Operand = Value | int | float


class Builder:
    """Appends instructions to one region."""

    def __init__(self, region: Region):
        self.region = region

    @staticmethod
    def const(value: int | float, type: ScalarType) -> Constant:
        return Constant(value, type)

    def add(self, cls: type[Instruction], **fields: Any) -> Any:
        """Append `cls(**fields)`; returns its single result, a tuple of results, or None."""
        try:
            inst = cls(**_literals(cls, fields))
        except IRError as e:
            raise CompileError([Diagnostic(e.kind, None, e.args_)]) from None
        self.region.append(inst)
        if not inst.results:
            return None
        return inst.results[0] if len(inst.results) == 1 else inst.results

    # -- common instructions ----------------------------------------------------------------
    def group_id(self) -> OpResult:
        return self.add(ins.GroupId)

    def group_size(self) -> OpResult:
        return self.add(ins.GroupSize)

    def arith(self, op: ins.BinaryOp, lhs: Operand, rhs: Operand) -> OpResult:
        return self.add(ins.ArithBinary, op=op, lhs=lhs, rhs=rhs)

    def index(self, op: ins.BinaryOp, lhs: Value | int, rhs: Value | int) -> Value | int:
        """Index arithmetic for lowerings: folded when both sides are literals (index values
        there are sizes and offsets, never negative, so C and Python division agree)."""
        if isinstance(lhs, int) and isinstance(rhs, int):
            return _FOLD[op](lhs, rhs)
        return self.arith(op, _index_operand(lhs), _index_operand(rhs))

    def cast(self, a: Value, to: ScalarType) -> OpResult:
        return self.add(ins.Cast, a=a, to=to)

    def cmp(self, cond: ins.CmpCond, lhs: Operand, rhs: Operand) -> OpResult:
        return self.add(ins.Cmp, cond=cond, lhs=lhs, rhs=rhs)

    def load(self, source: Value, indices: Sequence[Operand]) -> OpResult:
        return self.add(ins.Load, source=source, indices=list(indices))

    def store(self, value: Value, target: Value, indices: Sequence[Operand]) -> None:
        self.add(ins.Store, value=value, target=target, indices=list(indices))

    def size(self, source: Value, mode: int) -> OpResult:
        return self.add(ins.Size, source=source, mode=mode)

    def subview(
        self, source: Value, offsets: Sequence[Operand], sizes: Sequence[Operand | None]
    ) -> OpResult:
        """`sizes[i]` None drops mode i; `"?"` takes the rest of the mode."""
        wild = [Constant(None, INDEX) if s == "?" else s for s in sizes]
        return self.add(ins.Subview, source=source, offsets=list(offsets), sizes=wild)

    def alloca(self, memref: Type) -> OpResult:
        return self.add(ins.Alloca, memref=memref)

    def gemm(self, trans_a: ins.Transpose, trans_b: ins.Transpose, alpha: Value, a: Value,
             b: Value, beta: Value, c: Value, atomic: bool = False) -> None:  # fmt: skip
        self.add(ins.Gemm, trans_a=trans_a, trans_b=trans_b, atomic=atomic, alpha=alpha,
                 a=a, b=b, beta=beta, c=c)  # fmt: skip

    def yield_(self, *values: Value) -> None:
        self.add(ins.Yield, values=list(values))

    # -- instructions with regions ----------------------------------------------------------
    @contextmanager
    def for_(
        self, start: Operand, stop: Operand, step: Operand | None = None,
        loop_type: ScalarType = INDEX, parallel: bool = False,
    ) -> Iterator[tuple[Builder, Value]]:  # fmt: skip
        """`with b.for_(0, n) as (body, i):` (parallel=True makes a `foreach`)."""
        body = Region(RegionKind.SPMD if parallel else RegionKind.MIXED)
        var = body.add_param(loop_type)
        if parallel:
            self.add(ins.Foreach, start=start, stop=stop, loop_type=loop_type, body=body)
        else:
            self.add(ins.For, start=start, stop=stop, step=step, loop_type=loop_type, body=body)
        yield Builder(body), var

    def if_(
        self, cond: Value, returns: Sequence[ScalarType] = (), with_else: bool = True
    ) -> IfBuilder:
        then, otherwise = Region(), Region() if with_else else None
        results = self.add(ins.If, cond=cond, returns=tuple(returns), then=then,
                           otherwise=otherwise)  # fmt: skip
        return IfBuilder(Builder(then), Builder(otherwise) if otherwise else None, results)


_FOLD = {
    ins.BinaryOp.ADD: lambda x, y: x + y,
    ins.BinaryOp.SUB: lambda x, y: x - y,
    ins.BinaryOp.MUL: lambda x, y: x * y,
    ins.BinaryOp.DIV: lambda x, y: x // y,
    ins.BinaryOp.REM: lambda x, y: x % y,
    ins.BinaryOp.AND: lambda x, y: x & y,
}


def _index_operand(x: Value | int) -> Value:
    return Constant(x, INDEX) if isinstance(x, int) else x


class IfBuilder:
    def __init__(self, then: Builder, otherwise: Builder | None, results: Any):
        self.then = then
        self.otherwise = otherwise
        self.results = results


class FunctionBuilder:
    def __init__(self, name: str, **arguments: Type):
        self.function = Function(name, Region())
        self.args = {n: self.function.body.add_param(t, n) for n, t in arguments.items()}
        self.body = Builder(self.function.body)

    def finish(self) -> Function:
        return self.function


def _literals(cls: type[Instruction], fields: dict[str, Any]) -> dict[str, Any]:
    """Turn Python numbers into constants of the operand's literal type."""
    out = dict(fields)
    for f in cls.spec.operands:
        if f.name not in fields:
            continue
        value = fields[f.name]
        sibling = _sibling_type(cls, f.name, fields)
        if f.variadic:
            out[f.name] = [_literal(cls, f, v, fields, sibling) for v in value]
        else:
            out[f.name] = _literal(cls, f, value, fields, sibling)
    return out


def _literal(cls: type[Instruction], f: Any, value: Any, fields: dict[str, Any],
             sibling: ScalarType | None) -> Any:  # fmt: skip
    if value is None or isinstance(value, Value) or not isinstance(value, int | float):
        return value
    rule = f.const_type
    t = fields.get(rule, INDEX) if isinstance(rule, str) else rule or sibling
    if t is None:
        raise TypeError(f"{cls.__name__}.{f.name}: give a Constant(value, type) for {value!r}")
    return Constant(value, t)


def _sibling_type(cls: type[Instruction], name: str, fields: dict[str, Any]) -> ScalarType | None:
    """Binary instructions take one type for both operands: a literal borrows the other's."""
    partner = {"lhs": "rhs", "rhs": "lhs", "alpha": "beta", "beta": "alpha"}.get(name)
    other = fields.get(partner) if partner else None
    return other.type if isinstance(other, Value) and isinstance(other.type, ScalarType) else None
