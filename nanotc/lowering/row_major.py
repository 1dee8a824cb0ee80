"""Gemms into a row-major C as their transposed problems.

    C := alpha op(A) op(B) + beta C   ==   C^T := alpha op(B)^T op(A)^T + beta C^T

A C whose rows are contiguous and whose columns are not (`strided<?,1>`, numpy's C order) is
a column-major C^T: the gemm becomes `gemm.{tb'}.{ta'} alpha, B, A, beta, C^T` on C's
`tile.transposed` view, each transpose flipped, so its tiles store whole columns of C^T
instead of scattering C's elements (row-major A, B and C, f32 512^3: 0.68x numpy as a
scattered C, its kernel compiled in 0.51 s). op(A)^T of a row-major A is then a column-major
operand, as op(B)^T is of a row-major B. Gemms of batch-reduce loops keep their C, which the
loop's tiles hold in registers across the loop.
"""

from __future__ import annotations

from nanotc.ir.builder import Builder
from nanotc.ir.core import Function, Instruction, Region, rewrite_bottom_up, walk
from nanotc.ir.instructions import Gemm, Transpose
from nanotc.ir.tile import TileTransposed
from nanotc.ir.types import MemRefType
from nanotc.lowering.batch_reduce import batch_reduce_gemm

FLIPPED = {Transpose.N: Transpose.T, Transpose.T: Transpose.N}


def transpose_row_major_gemms(func: Function) -> None:
    """Each gemm of `func` into a row-major C, but those of batch-reduce loops, as its
    transposed problem (`transposed_problem`)."""
    reduced = {id(g) for loop in walk(func.body) if (g := batch_reduce_gemm(loop)) is not None}

    def transpose(inst: Instruction) -> list[Instruction]:
        if not isinstance(inst, Gemm) or id(inst) in reduced or not row_major(inst.c.type):
            return [inst]
        return transposed_problem(inst)

    rewrite_bottom_up(func.body, transpose)


def row_major(t: object) -> bool:
    """A matrix whose rows are contiguous and whose columns are not known to be."""
    return isinstance(t, MemRefType) and t.order == 2 and t.stride[1] == 1 and t.stride[0] != 1


def transposed_problem(g: Gemm) -> list[Instruction]:
    """C^T := alpha op(B)^T op(A)^T + beta C^T, on C's transposed view."""
    b = Builder(Region())
    c_t = b.add(TileTransposed, source=g.c)
    b.region.append(Gemm(trans_a=FLIPPED[g.trans_b], trans_b=FLIPPED[g.trans_a],
                         atomic=g.atomic, alpha=g.alpha, a=g.b, b=g.a, beta=g.beta, c=c_t,
                         loc=g.loc))  # fmt: skip
    return b.region.instructions
