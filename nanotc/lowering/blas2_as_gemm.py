"""gemv.n and ger as gemms, so they run on the GEMM nanokernels.

    gemv.n alpha, A, b, beta, c   ==  gemm.n.n alpha, A, b[K x 1], beta, c[M x 1]
    ger    alpha, a, b, beta, C   ==  gemm.n.t alpha, a[M x 1], b[N x 1], beta, C

(`x[n x 1]` is `expand x[0 -> n x 1]`, a view). A ger is then a K = 1 tile that reads and
writes C once; but where C has contiguous columns (or rows) and does not fit L1, a ger stays
a ger and the vector loops run it one column of C at a time (`blas_vector.ger`; a row-major
C one row at a time), unless it ends a batch-reduce loop. A gemv.n whose A has contiguous
columns and whose c is f32 or f64 stays a gemv unless A is static and fits L1: the vector
loops run it as axpys down A's columns (`blas_vector.gemv_n`), reading A in memory order,
where a one-column register tile would walk A across its columns and the blocked path, for
a large A, would pack it (a copy of an operand read once): 1.8-3x faster on 2048^2 to
7040^2. A gemv.n whose A has contiguous rows stays a gemv too, as dot products along them;
gemv.t keeps its own vectorised dot products (its A columns are contiguous along K), or
axpys down the rows of a row-major A.
"""

from __future__ import annotations

from nanotc.ir.builder import Builder
from nanotc.ir.core import Function, Instruction, Region, rewrite_bottom_up, walk
from nanotc.ir.instructions import Expand, Gemm, Gemv, Ger, Transpose
from nanotc.ir.types import INDEX, MemRefType, ScalarType
from nanotc.ir.values import Constant, Value
from nanotc.lowering.batch_reduce import batch_reduce_gemm
from nanotc.lowering.gemm_tiles import supported

AXPY_OUTPUTS = (ScalarType.F32, ScalarType.F64)  # c holds partial sums between the passes
SMALL_STATIC_BYTES = 32 << 10  # a static A this small stays a gemm (fits any L1 data cache)


def rewrite_blas2(func: Function) -> None:
    """gemv.n and ger as gemms, then the gers that run as axpys back, except one that ends
    a batch-reduce loop: a loop of gers into one C is a gemm with K = the trip count, whose
    tiles keep C in registers across the loop."""
    gers: dict[int, tuple[Ger, list[Instruction]]] = {}  # gemm -> its ger and the whole rewrite

    def as_gemm(inst: Instruction) -> list[Instruction]:
        out = _as_gemm(inst)
        if out is None:
            return [inst]
        if isinstance(inst, Ger) and _ger_runs_as_axpys(inst):
            gers[id(out[-1])] = (inst, out)
        return out

    rewrite_bottom_up(func.body, as_gemm)
    reduced = {id(g) for loop in walk(func.body) if (g := batch_reduce_gemm(loop)) is not None}
    undone = [rewrite for key, rewrite in gers.items() if key not in reduced]
    back = {id(rewrite[-1]): ger for ger, rewrite in undone}
    dropped = {id(inst) for _, rewrite in undone for inst in rewrite[:-1]}

    def as_ger(inst: Instruction) -> list[Instruction]:
        if id(inst) in dropped:
            return []
        return [back.get(id(inst), inst)]

    rewrite_bottom_up(func.body, as_ger)


def _column(b: Builder, vector: Value) -> Value:
    """The vector viewed as a one-column matrix."""
    return b.add(Expand, source=vector, mode=0, shape=[Constant(None, INDEX), 1])


def _runs_as_axpys(g: Gemv) -> bool:
    """The vector loops take this gemv.n (codegen's `blas_vector.gemv_n_applies`), unless A is
    static and small enough for L1: then a register tile keeps all of c in registers for the
    whole K loop, where the axpys load and store c on every pass (56 x 9 ran 0.86x as axpys;
    16^2 to 64^2 even)."""
    a, x, c = (v.type for v in (g.a, g.b, g.c))
    if not all(isinstance(t, MemRefType) for t in (a, x, c)):
        return False
    if a.is_static and a.size_in_bytes() <= SMALL_STATIC_BYTES:
        return False
    floats = a.element.is_float and x.element.is_float
    return floats and not g.atomic and c.element in AXPY_OUTPUTS and a.stride[0] == c.stride[0] == 1


def _runs_as_dots(g: Gemv) -> bool:
    """The vector loops take this gemv.n as dot products along A's rows (codegen's
    `blas.gemv`, on A's transposed view): A's rows, x and c are contiguous (a row-major A).
    As a gemm, its one-column tiles gathered A's rows lane by lane (or, of a static A, packed
    it transposed first, a copy of an operand read once)."""
    a, x, c = (v.type for v in (g.a, g.b, g.c))
    if not all(isinstance(t, MemRefType) for t in (a, x, c)):
        return False
    floats = a.element.is_float and x.element.is_float and c.element.is_float
    return floats and not g.atomic and a.stride[1] == x.stride[0] == c.stride[0] == 1


def _ger_runs_as_axpys(g: Ger) -> bool:
    """The vector loops take this ger (`blas_vector.ger`: one pass down each column of C, or
    each row of a row-major C) unless C is static and fits L1, where one register tile
    covers it: a gemm's tiles walk 13 columns of C at once, which streamed a 7040^2 f32 C
    from memory at 0.53x the column passes' rate (a row-major C, 1024^2 in L2: 0.06x
    numpy, its tiles scattering C)."""
    x, y, c = (v.type for v in (g.a, g.b, g.c))
    if not all(isinstance(t, MemRefType) for t in (x, y, c)):
        return False
    if c.is_static and c.size_in_bytes() <= SMALL_STATIC_BYTES:
        return False
    floats = x.element.is_float and y.element.is_float
    # (a row-major C is C^T += y x^T, down C's rows)
    contiguous = c.stride[0] == x.stride[0] == 1 or c.stride[1] == y.stride[0] == 1
    return floats and not g.atomic and c.element in AXPY_OUTPUTS and contiguous


def _as_gemm(inst: Instruction) -> list[Instruction] | None:
    b = Builder(Region())
    runs_as_vectors = isinstance(inst, Gemv) and (_runs_as_axpys(inst) or _runs_as_dots(inst))
    if isinstance(inst, Gemv) and inst.trans_a is Transpose.N and not runs_as_vectors:
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
