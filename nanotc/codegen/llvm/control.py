"""Structured control flow: for, foreach, if (with results through phi nodes)."""

from __future__ import annotations

from llvmlite import ir

from nanotc.codegen.llvm.emitter import FunctionEmitter, emits
from nanotc.codegen.llvm.helpers import for_range
from nanotc.codegen.llvm.types import I64, const, register_type
from nanotc.ir.instructions import For, Foreach, If


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
    with for_range(b, start, stop, step, name=name) as wide:
        var = wide if t == I64 else b.trunc(wide, t)
        e.region(inst.body, [var])


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
