"""gemv.n and ger as gemms, so they run on the GEMM nanokernels.

    gemv.n alpha, A, b, beta, c   ==  gemm.n.n alpha, A, b[K x 1], beta, c[M x 1]
    ger    alpha, a, b, beta, C   ==  gemm.n.t alpha, a[M x 1], b[N x 1], beta, C

(`x[n x 1]` is `expand x[0 -> n x 1]`, a view). A gemv is then a one-column register tile
streaming A through the FMA units; a ger a K = 1 tile that reads and writes C once.
gemv.t keeps its own vectorised dot-product lowering (its A columns are contiguous along K).
"""

from __future__ import annotations

from nanotc.ir.builder import Builder
from nanotc.ir.core import Function, Instruction, Region, rewrite_bottom_up
from nanotc.ir.instructions import Expand, Gemm, Gemv, Ger, Transpose
from nanotc.ir.types import INDEX
from nanotc.ir.values import Constant, Value
from nanotc.lowering.gemm_tiles import supported


def rewrite_blas2(func: Function) -> None:
    rewrite_bottom_up(func.body, lambda inst: _as_gemm(inst) or [inst])


def _column(b: Builder, vector: Value) -> Value:
    """The vector viewed as a one-column matrix."""
    return b.add(Expand, source=vector, mode=0, shape=[Constant(None, INDEX), 1])


def _as_gemm(inst: Instruction) -> list[Instruction] | None:
    b = Builder(Region())
    if isinstance(inst, Gemv) and inst.trans_a is Transpose.N:
        gemm = Gemm(trans_a=Transpose.N, trans_b=Transpose.N, atomic=inst.atomic,
                    alpha=inst.alpha, a=inst.a, b=_column(b, inst.b), beta=inst.beta,
                    c=_column(b, inst.c), loc=inst.loc)  # fmt: skip
    elif isinstance(inst, Ger):
        gemm = Gemm(trans_a=Transpose.N, trans_b=Transpose.T, atomic=inst.atomic,
                    alpha=inst.alpha, a=_column(b, inst.a), b=_column(b, inst.b),
                    beta=inst.beta, c=inst.c, loc=inst.loc)  # fmt: skip
    else:
        return None
    if not supported(gemm):
        return None
    b.region.append(gemm)
    return b.region.instructions
