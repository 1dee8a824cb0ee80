"""Structured control flow: for, foreach, if (with results through phi nodes)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from llvmlite import ir

from nanotc.codegen.llvm.emitter import FunctionEmitter, emits
from nanotc.codegen.llvm.helpers import for_range, loop_body
from nanotc.codegen.llvm.types import I64, const, register_type
from nanotc.ir.instructions import For, Foreach, If

I64_MAX = 2**63 - 1


@emits(For, Foreach)
def _loop(e: FunctionEmitter, inst: For | Foreach) -> None:
    """The loop counts in i64 whatever the loop type, so a narrow loop variable never wraps
    and the trip count is exact; a non-positive run-time step runs no iterations (a literal
    one is rejected by the checker). `foreach` runs its iterations in order, one valid order."""
    b = e.b
    t = register_type(inst.loop_type)
    start, stop = (_widen(b, e.value(v)) for v in (inst.start, inst.stop))
    step_value = inst.step if isinstance(inst, For) else None
    step = _widen(b, e.value(step_value)) if step_value is not None else const(1)
    if not isinstance(step, ir.Constant):
        stop = b.select(b.icmp_signed(">", step, const(0)), stop, start)
    name = inst.body.params[0].name or "i"
    loop = _no_wrap_range if _may_wrap(t, stop, step) else for_range
    with loop(b, start, stop, step, name=name) as wide:
        var = wide if t == I64 else b.trunc(wide, t)
        e.region(inst.body, [var])


def _may_wrap(t: ir.Type, stop: ir.Value, step: ir.Value) -> bool:
    """Whether `var + step` can overflow i64 while `var < stop`: only for 64-bit loop types
    (narrower ones are counted in i64) and a step above 1 unless stop + step is known to fit."""
    if t != I64:
        return False
    if isinstance(step, ir.Constant) and step.constant == 1:
        return False
    known = isinstance(step, ir.Constant) and isinstance(stop, ir.Constant)
    return not (known and stop.constant <= I64_MAX - step.constant)


@contextmanager
def _no_wrap_range(
    b: ir.IRBuilder, start: ir.Value, stop: ir.Value, step: ir.Value, name: str
) -> Iterator[ir.Value]:
    """`for (v = start; v < stop; v += step)` for a positive step where v + step may pass the
    largest i64: the latch goes on only while stop - v > step (unsigned, exact since v < stop),
    so the variable never wraps around into extra iterations."""
    pre = b.block
    body = b.append_basic_block(f"{name}.body")
    exit_ = b.append_basic_block(f"{name}.exit")
    b.cbranch(b.icmp_signed("<", start, stop), body, exit_)
    b.position_at_end(body)
    var = b.phi(I64, name=name)
    var.add_incoming(start, pre)
    with loop_body(b, open_to_llvm=True):
        yield var
    latch = b.block
    more = b.icmp_unsigned(">", b.sub(stop, var), step)
    var.add_incoming(b.add(var, step, name=f"{name}.next"), latch)
    b.cbranch(more, body, exit_)
    b.position_at_end(exit_)


def _widen(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    return value if value.type == I64 else b.sext(value, I64)


@emits(If)
def _if(e: FunctionEmitter, inst: If) -> None:
    b = e.b
    then_block = b.append_basic_block("then")
    else_block = b.append_basic_block("else") if inst.otherwise is not None else None
    merge = b.append_basic_block("endif")
    b.cbranch(e.value(inst.cond), then_block, else_block or merge)
    arms = []
    for block, region in ((then_block, inst.then), (else_block, inst.otherwise)):
        if block is None or region is None:
            continue
        b.position_at_end(block)
        values = e.region(region)
        arms.append((values, b.block))
        b.branch(merge)
    b.position_at_end(merge)
    for i, result in enumerate(inst.results):
        phi = b.phi(register_type(result.type))
        for values, block in arms:
            phi.add_incoming(values[i], block)
        e.define(result, phi)
