"""`tile.row_dots`: the last few rows of C as dot products along K.

A row remainder of a register tile is a vector of C's rows masked down to the rows left, so
one leftover row costs a whole vector of FMAs per column and K step. Here the vectors run
along K instead: each of `rows` rows by as many columns as the vector registers hold
accumulates a vector of partial sums over K (op(A)'s rows packed whole beforehand, op(B)'s
columns read where they lie), summed across lanes once at the end. W3's 49 x N shapes (48
rows in register tiles, one in dot products) ran 1.16-1.47x faster than with a masked tile
for the 49th row.
"""

from __future__ import annotations

from llvmlite import ir

from nanotc.codegen.llvm import vector as vec
from nanotc.codegen.llvm.emitter import FunctionEmitter, emits
from nanotc.codegen.llvm.helpers import (
    add,
    as_value,
    carried_loop,
    convert,
    element_ptr,
    for_range,
    load_scalar,
    minimum,
    mul,
    round_down,
    store_scalar,
    sub,
)
from nanotc.codegen.llvm.types import I64, PTR, Dim, MemrefValue, const, register_type
from nanotc.ir.instructions import Transpose
from nanotc.ir.tile import TileRowDots
from nanotc.ir.values import Value, is_literal
from nanotc.lowering.gemm_tiles import dot_columns

INDEPENDENT_FMAS = 8
"""The accumulators that keep the FMA units busy (two a cycle, four cycles' latency): K is
split among that many chains where fewer rows and columns are summed."""


@emits(TileRowDots)
def _row_dots(e: FunctionEmitter, inst: TileRowDots) -> None:
    b_view: MemrefValue = e.value(inst.b)
    depth = b_view.shape[0 if inst.trans_b is Transpose.N else 1]
    width = dot_columns(e.state.target, inst.rows)
    assert inst.valid_cols is None or inst.cols <= width  # a run-time count within one pass
    for first in range(0, inst.cols, width):
        columns = range(first, min(first + width, inst.cols))
        sums = _spilled(e, _dot_products(e, inst, depth, columns))
        _store(e, inst, sums, columns)


def _dot_products(
    e: FunctionEmitter, inst: TileRowDots, depth: Dim, columns: range
) -> list[vec.Partial]:
    """sum over k of a[r, k] * op(B)[k, col + j] for each row r and column j in `columns`,
    sum r * len(columns) + j, in the lanes of folded vectors."""
    b = e.b
    element = inst.c.type.element
    lanes = e.state.target.lanes(element)
    t, size = vec.vector_type(register_type(element), lanes), element.size
    fused = e.state.target.fma  # else a multiply and an add, as the register tiles do
    a_view: MemrefValue = e.value(inst.a)
    rows_ptr = a_view.ptr
    row_stride = depth if len(a_view.shape) == 1 else a_view.stride[1]
    b_view: MemrefValue = e.value(inst.b)
    along_n = b_view.stride[1 if inst.trans_b is Transpose.N else 0]
    col = e.index_value(inst.col)
    b_columns = [
        element_ptr(b, b_view.ptr, element, mul(b, add(b, col, j), along_n))
        for j in _clamped(e, columns, inst.valid_cols)
    ]
    row_starts = [mul(b, r, row_stride) for r in _clamped(e, range(inst.rows), inst.valid_rows)]

    def step(k: Dim, acc: list[ir.Value], mask: ir.Value | None) -> list[ir.Value]:
        a_rows = [
            vec.load(b, t, element_ptr(b, rows_ptr, element, row_start), mask, size)
            for row_start in (add(b, start, k) for start in row_starts)
        ]
        out = list(acc)
        for j, column in enumerate(b_columns):
            b_vector = vec.load(b, t, element_ptr(b, column, element, k), mask, size)
            for r, a_row in enumerate(a_rows):
                index = r * len(b_columns) + j
                out[index] = vec.fma(b, a_row, b_vector, out[index], fused)
        return out

    sums = inst.rows * len(b_columns)
    chains = max(1, INDEPENDENT_FMAS // sums)

    def chained_steps(k: Dim, acc: list[ir.Value]) -> list[ir.Value]:
        out = []
        for c in range(chains):
            out += step(add(b, k, c * lanes), acc[c * sums : (c + 1) * sums], None)
        return out

    init = [vec.zeros(t)] * (sums * chains)
    chained = round_down(b, depth, lanes * chains)
    acc = carried_loop(b, 0, chained, lanes * chains, init, chained_steps, name="dot",
                       unroll=False, aligned=True)  # fmt: skip
    acc = [_sum(b, acc[j::sums]) for j in range(sums)]
    whole = round_down(b, depth, lanes)  # the K values in whole vectors
    if chains > 1:
        acc = carried_loop(
            b, chained, whole, lanes, acc, lambda k, a: step(k, a, None), name="dot", unroll=False
        )
    if isinstance(depth, int):
        if whole < depth:
            acc = step(whole, acc, vec.static_mask(lanes, depth - whole))
    else:  # a K block of run-time length: its last vector masked, maybe to nothing
        acc = step(whole, acc, vec.dynamic_mask(b, lanes, 0, as_value(b, sub(b, depth, whole))))
    return vec.lane_sums(b, acc)


def _clamped(e: FunctionEmitter, indices: range, valid: Value | None) -> list[Dim]:
    """The indices, each past the first `valid` replaced by the last valid one."""
    if valid is None:
        return list(indices)
    last = e.b.sub(e.index_value(valid), const(1))
    return [i if i == 0 else minimum(e.b, i, last) for i in indices]


def _sum(b: ir.IRBuilder, vectors: list[ir.Value]) -> ir.Value:
    """The chains' partial sums of one dot product, added in order."""
    total = vectors[0]
    for v in vectors[1:]:
        total = b.fadd(total, v)
    return total


def _spilled(e: FunctionEmitter, partials: list[vec.Partial]) -> ir.Value:
    """The sums in a stack buffer, sum i at element i: one vector store per folded vector
    (their owners run in order, padding last), so that C is updated in a loop."""
    b = e.b
    vector_type = partials[0].vector.type
    buffer = e.state.entry.alloca(
        ir.ArrayType(vector_type.element, len(partials) * vector_type.count)
    )
    buffer.align = 64
    buffer.type = PTR
    for partial in partials:
        at = b.gep(buffer, [ir.Constant(I64, partial.owners[0])], source_etype=vector_type.element)
        b.store(partial.vector, at, align=4)
    return buffer


def _store(e: FunctionEmitter, inst: TileRowDots, sums: ir.Value, columns: range) -> None:
    """C := alpha * sum + beta * C for the rows and `columns`, in a loop over the columns
    (sum r * len(columns) + j at element r * len(columns) + j of `sums`); where beta is 0 C's
    old value is not used (a NaN there does not leak)."""
    b = e.b
    c: MemrefValue = e.value(inst.c)
    element = c.type.element
    alpha = convert(b, e.value(inst.alpha), inst.alpha.type, element)
    beta = convert(b, e.value(inst.beta), inst.beta.type, element)
    row, col = e.index_value(inst.row), e.index_value(inst.col)
    count = len(columns) if inst.valid_cols is None else e.index_value(inst.valid_cols)
    # a run-time count stays a plain loop: LLVM would vectorise and unroll its few
    # iterations, at the cost of compile time only
    static_count = inst.valid_cols is None
    with for_range(b, 0, count, name="column", vectorize=static_count,
                   unroll=static_count) as j:  # fmt: skip
        column = add(b, col, b.add(j, const(columns.start)))

        def update(r: Dim) -> None:
            at = add(b, mul(b, add(b, row, r), c.stride[0]), mul(b, column, c.stride[1]))
            ptr = element_ptr(b, c.ptr, element, at)
            at_sum = add(b, j, mul(b, r, len(columns)))
            total = load_scalar(b, element_ptr(b, sums, element, at_sum), element)
            value = total if is_literal(inst.alpha, 1) else b.fmul(alpha, total)
            if not is_literal(inst.beta, 0):
                value = _plus_beta_c(b, inst, value, beta, load_scalar(b, ptr, element))
            store_scalar(b, value, ptr, element)

        if inst.valid_rows is None:
            for r in range(inst.rows):
                update(r)
        else:
            valid = e.index_value(inst.valid_rows)
            with for_range(b, 0, valid, name="row", vectorize=False, unroll=False) as r:
                update(r)


def _plus_beta_c(
    b: ir.IRBuilder, inst: TileRowDots, value: ir.Value, beta: ir.Value, old: ir.Value
) -> ir.Value:
    if is_literal(inst.beta, 1):
        return b.fadd(value, old)
    with_c = b.fadd(value, b.fmul(beta, old))
    return b.select(b.fcmp_ordered("==", beta, ir.Constant(beta.type, 0)), value, with_c)
