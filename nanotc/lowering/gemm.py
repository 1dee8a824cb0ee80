"""gemm lowering: each supported gemm takes the direct path (register tiles straight on the
operands) or, when its operands exceed the caches, the blocked path (packed blocks). With
dynamic sizes both are generated and a run-time test of the operand size picks one."""

from __future__ import annotations

from nanotc.ir.builder import Builder
from nanotc.ir.core import Function, Instruction, Region
from nanotc.ir.instructions import BinaryOp, CmpCond, Gemm, Transpose
from nanotc.lowering.choices import DEFAULT_OPTIONS, CompileOptions
from nanotc.lowering.gemm_amx import amx_applies, tile_gemm_amx
from nanotc.lowering.gemm_blocked import tile_gemm_blocked, worth_blocking
from nanotc.lowering.gemm_tiles import gemm_extents, supported, tile_gemm
from nanotc.targets import Target


def lower_gemms(func: Function, target: Target, options: CompileOptions = DEFAULT_OPTIONS) -> None:
    _rewrite(func.body, target, options)


def _rewrite(region: Region, target: Target, options: CompileOptions) -> None:
    out: list[Instruction] = []
    for inst in region.instructions:
        for nested in inst.regions():
            _rewrite(nested, target, options)
        if isinstance(inst, Gemm) and (supported(inst) or amx_applies(inst, target)):
            out.extend(lower_gemm(inst, target, options))
        else:
            out.append(inst)
    region.instructions = out


def lower_gemm(
    g: Gemm, target: Target, options: CompileOptions = DEFAULT_OPTIONS
) -> list[Instruction]:
    if amx_applies(g, target):
        return tile_gemm_amx(g, target)
    m, n, k = gemm_extents(g)
    element = g.c.type.element
    if m is not None and n is not None and k is not None:
        blocked = worth_blocking(m, n, k, element, target)
        return tile_gemm_blocked(g, target, options) if blocked else tile_gemm(g, target, options)
    b = Builder(Region())
    sizes = [
        m if m is not None else b.size(g.c, 0),
        n if n is not None else b.size(g.c, 1),
        k if k is not None else b.size(g.a, 0 if g.trans_a is Transpose.T else 1),
    ]
    em, en, ek = sizes
    elements = b.index(BinaryOp.MUL, ek, b.index(BinaryOp.ADD, em, en))
    large = b.cmp(CmpCond.GT, elements, target.l2_bytes // 2 // element.size)
    branch = b.if_(large)
    branch.then.region.instructions.extend(tile_gemm_blocked(g, target, options))
    assert branch.otherwise is not None
    branch.otherwise.region.instructions.extend(tile_gemm(g, target, options))
    return b.region.instructions
