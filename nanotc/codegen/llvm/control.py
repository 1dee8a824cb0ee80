"""Structured control flow: for, foreach, if (with results through phi nodes)."""

from __future__ import annotations

from llvmlite import ir

from nanotc.codegen.llvm.emitter import FunctionEmitter, emits
from nanotc.codegen.llvm.helpers import for_range
from nanotc.codegen.llvm.types import register_type
from nanotc.ir.instructions import For, Foreach, If


@emits(For, Foreach)
def _loop(e: FunctionEmitter, inst: For | Foreach) -> None:
    """`foreach` iterations are independent; a sequential loop is one valid order, and keeps
    LLVM free to vectorise it."""
    t = register_type(inst.loop_type)
    step = (
        e.value(inst.step) if isinstance(inst, For) and inst.step is not None else ir.Constant(t, 1)
    )
    name = inst.body.params[0].name or "i"
    with for_range(e.b, e.value(inst.start), e.value(inst.stop), step, name=name, type=t) as var:
        e.region(inst.body, [var])


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
