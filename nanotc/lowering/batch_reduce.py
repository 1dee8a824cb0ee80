"""Batch-reduce GEMM: a loop of gemms accumulating into one C becomes `tile.batch_gemm`.

The pattern (the BRGEMM of libxsmm and of the nanokernel paper):

    for %k = start, stop, step {
        <views and scalar arithmetic only: load from a group, subview, expand, fuse, size, ...;
         no load of C's memory, which must see each iteration's update>
        gemm.ta.tb %alpha, %a, %b, 1.0, %c      ; beta is 1, C and alpha from outside the loop
    }

computes C := C + alpha * sum_k op(A_k) op(B_k). Lowered as written, every iteration would
load and store each tile of C; as `tile.batch_gemm` the accumulators of a tile stay in
registers across all iterations and C is read and written once. Each microkernel carries its
own copy of the loop body, which recomputes A_k and B_k (pointer arithmetic only).

bf16 gemms on vdpbf16ps keep their tiles across the batch too, although every column of
tiles interleaves each A_k's K pairs again: the nanokernel does it with in-lane unpacks (one
single-cycle shuffle per vector and K pair), and a loop of gemms each packing A_k once into
VNNI pairs ran 0.83-0.95x as fast (bf16 32^3 x 64 to 64^3 x 32).
"""

from __future__ import annotations

from nanotc.ir.builder import Builder
from nanotc.ir.clone import clone_instruction
from nanotc.ir.core import Function, Instruction, Region, walk
from nanotc.ir.instructions import (
    ArithBinary,
    ArithUnary,
    Cast,
    Cmp,
    Expand,
    For,
    Fuse,
    Gemm,
    GroupId,
    GroupSize,
    Load,
    Size,
    Subview,
)
from nanotc.ir.tile import TileAmxBatchGemm, TileBatchGemm, TileYield
from nanotc.ir.types import INDEX
from nanotc.ir.values import OpResult, Value, is_literal
from nanotc.lowering.choices import (
    BATCH,
    DEFAULT_OPTIONS,
    CompileOptions,
    register_tile_for,
    signature,
)
from nanotc.lowering.gemm_amx import amx_applies, amx_batch_tiles
from nanotc.lowering.gemm_tiles import (
    Index,
    epilogue_registers,
    gemm_extents,
    operand_registers,
    supported,
    tile_output,
)
from nanotc.targets import Target

_PURE = (ArithBinary, ArithUnary, Cast, Cmp, Expand, Fuse, GroupId, GroupSize, Size, Subview)


def lower_batch_reduce(
    func: Function, target: Target, options: CompileOptions = DEFAULT_OPTIONS
) -> None:
    amx = [g for g in walk(func.body) if isinstance(g, Gemm) and amx_applies(g, target)]
    _rewrite(func.body, target, options, amx_alone=len(amx) == 1)


def _rewrite(region: Region, target: Target, options: CompileOptions, amx_alone: bool) -> None:
    """`amx_alone`: the function has one AMX gemm, so its tiles own the tile registers (the
    other gemms' paths are chosen later, `gemm_amx.amx_paths`)."""
    out: list[Instruction] = []
    for inst in region.instructions:
        gemm = batch_reduce_gemm(inst)
        if gemm is not None and not amx_applies(gemm, target):
            assert isinstance(inst, For)
            out.extend(_tile_batch(inst, gemm, target, options))
            continue
        if gemm is not None and amx_alone and amx_batch_tiles(gemm) is not None:
            assert isinstance(inst, For)
            out.append(_amx_batch(inst, gemm))
            continue
        for nested in inst.regions():
            _rewrite(nested, target, options, amx_alone)
        out.append(inst)
    region.instructions = out


def batch_reduce_gemm(inst: Instruction) -> Gemm | None:
    """The gemm of a batch-reduce loop, or None if `inst` is not one."""
    if not isinstance(inst, For) or inst.loop_type != INDEX or not inst.body.instructions:
        return None
    *prefix, last = inst.body.instructions
    if not isinstance(last, Gemm) or not supported(last):
        return None
    if not is_literal(last.beta, 1):
        return None
    c_memory = _memory_root(last.c)
    if not all(_computes_values_only(i, c_memory) for i in prefix):
        return None
    defined = {id(p) for p in inst.body.params} | {id(r) for i in prefix for r in i.results}
    if id(last.c) in defined or id(last.alpha) in defined:
        return None
    return last


def _computes_values_only(inst: Instruction, c_memory: Value) -> bool:
    """No memory writes, no regions, and no reads of C's memory through any view of the
    parameter or alloca C is a view of: the loop updates C, and a later iteration's load
    must see the update, which stays in registers. (Distinct parameters are taken not to
    share memory, as for the operands of a gemm.)"""
    if isinstance(inst, Load):
        return _memory_root(inst.source) is not c_memory
    return isinstance(inst, _PURE)


def _memory_root(view: Value) -> Value:
    """The parameter or alloca `view` is a view of (through subviews, expands, fuses and loads
    of group members)."""
    while isinstance(view, OpResult) and isinstance(view.owner, Subview | Expand | Fuse | Load):
        view = view.owner.source
    return view


def _batch_body(loop: For, g: Gemm) -> Region:
    """The loop's body up to the gemm, yielding A_b and B_b: a microkernel's own copy."""
    body = Region()
    mapping = {id(loop.body.params[0]): body.add_param(INDEX, loop.body.params[0].name)}
    for inst in loop.body.instructions[:-1]:
        body.append(clone_instruction(inst, mapping))
    body.append(TileYield(values=[mapping.get(id(v), v) for v in (g.a, g.b)]))
    return body


def _amx_batch(loop: For, g: Gemm) -> Instruction:
    step: Value | int = loop.step if loop.step is not None else 1
    b = Builder(Region())
    b.add(TileAmxBatchGemm, trans_a=g.trans_a, trans_b=g.trans_b, alpha=g.alpha, c=g.c,
          start=loop.start, stop=loop.stop, step=step, body=_batch_body(loop, g))  # fmt: skip
    (inst,) = b.region.instructions
    return inst


def _tile_batch(loop: For, g: Gemm, target: Target, options: CompileOptions) -> list[Instruction]:
    step: Value | int = loop.step if loop.step is not None else 1

    def micro(b: Builder, row: Index, col: Index, rows: Index, mr: int, nr: int) -> None:
        body = _batch_body(loop, g)
        b.add(
            TileBatchGemm, trans_a=g.trans_a, trans_b=g.trans_b, atomic=g.atomic, alpha=g.alpha,
            beta=g.beta, c=g.c, row=row, col=col, rows=rows, start=loop.start, stop=loop.stop,
            step=step, mr=mr, nr=nr, body=body,
        )  # fmt: skip

    reserved = epilogue_registers(g.alpha, g.beta) + operand_registers(g, target)
    extents = gemm_extents(g)
    sig = signature(g, BATCH, extents, reserved)
    tile = register_tile_for(options, sig, target, g.c.type.element, extents, reserved)
    return tile_output(g.c, extents, target, micro, reserved, tile)
