"""gemm lowering: each supported gemm takes the direct path (register tiles straight on the
operands) or, when the direct path would run out of cache, the blocked path (packed blocks).
With dynamic sizes both are generated and a run-time test of the sizes picks one."""

from __future__ import annotations

from nanotc.ir.builder import Builder
from nanotc.ir.core import Function, Instruction, Region
from nanotc.ir.instructions import Gemm
from nanotc.lowering.choices import DEFAULT_OPTIONS, CompileOptions
from nanotc.lowering.gemm_amx import amx_applies, tile_gemm_amx
from nanotc.lowering.gemm_blocked import needs_blocking, tile_gemm_blocked
from nanotc.lowering.gemm_tiles import supported, tile_gemm
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
    b = Builder(Region())
    blocked = needs_blocking(b, g, target)
    if isinstance(blocked, bool):
        return tile_gemm_blocked(g, target, options) if blocked else tile_gemm(g, target, options)
    branch = b.if_(blocked)
    branch.then.region.instructions.extend(tile_gemm_blocked(g, target, options))
    assert branch.otherwise is not None
    branch.otherwise.region.instructions.extend(tile_gemm(g, target, options))
    return b.region.instructions
