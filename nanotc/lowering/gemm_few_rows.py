"""gemms of run-time sizes whose C may have a few rows: those rows as dot products along K.

A register tile's vectors run down C's columns, so a C of 1 to DOT_ROWS rows leaves most of
their lanes idle, and a gemm of run-time sizes takes tiles 32 rows tall (the blocked path's).
Where op(B)'s columns run along K in memory, a run-time test (M of 1 to DOT_ROWS, K of at
least DOT_DEPTH) sends such a gemm to `tile.row_dots`, as `gemm_tiles.rows_as_dots` sends a
static one, in K blocks whose rows of op(A) are read in place or packed into a scratch of
DOT_PACK_BYTES. f32, one thread, against the tiles: `.t.n` 1 x 1 x 20000 27x faster, 4 x 4 x
20000 12x, 4 x 2000 x 1000 2.6x; `.n.n` 1 x 256 x 256 4x, 4 x 4 x 20000 2.4x. Unlike a static
gemm (`DOT_PACK_COLUMNS`), one of few columns takes them too where the pack gathers op(A)'s
rows: the blocked path's tiles pack A as well. The two nanokernels add 50-60 ms to the
compile time of every gemm this test applies to (docs/benchmarks.md).
"""

from __future__ import annotations

from nanotc.ir.builder import Builder
from nanotc.ir.core import Instruction, Region
from nanotc.ir.instructions import BinaryOp, CmpCond, Gemm
from nanotc.ir.tile import TileRowDots
from nanotc.ir.types import MemRefType
from nanotc.ir.values import Value
from nanotc.lowering.gemm_blocked import block_extent, first_block_beta, greater, logical
from nanotc.lowering.gemm_tiles import (
    DOT_DEPTH,
    DOT_ROWS,
    Index,
    extent_values,
    gemm_extents,
    reads_rows_in_place,
    row_dots_operands,
    rows_for_dots,
    stored,
)
from nanotc.targets import Target

DOT_PACK_BYTES = 32 * 1024
"""The scratch holding op(A)'s rows over one K block: on the stack, within L1."""
FEW_ROWS_COLUMNS = 2
"""The columns of one pass: one pass covers any column count (`valid`), so each nanokernel is
compiled once. Columns past the count repeat the last, each a load per K step: with 8
columns of one row (1 x 1 x 20000 f32 7.2 us; 4 columns 5.0, 2 columns 2.8), and each
B vector loaded feeds one FMA of a row however wide. A nanokernel for each row count, as
wide as `dot_columns` allows, with single columns for the rest, took a dynamic gemm's compile
time from 0.23 to 0.63 s."""


def few_rows_test(b: Builder, g: Gemm) -> bool | Value:
    """Whether g's C is taken as dot products (`tile_few_rows`), for a gemm of some run-time
    size: a run-time test where it depends on them (its instructions added to b). False for
    static sizes (`rows_as_dots` decides)."""
    m, n, k = gemm_extents(g)
    if None not in (m, n, k) or not row_dots_operands(g):
        return False
    extent_m, _, extent_k = extent_values(b, g)
    deep = greater(b, extent_k, DOT_DEPTH - 1)
    return logical(b, BinaryOp.AND, _one_to(b, extent_m, DOT_ROWS), deep)


def _one_to(b: Builder, x: Index, most: int) -> bool | Value:
    if isinstance(x, int):
        return 0 < x <= most
    return b.arith(BinaryOp.AND, greater(b, x, 0), b.cmp(CmpCond.LE, x, most))


def tile_few_rows(g: Gemm, target: Target) -> list[Instruction]:
    """C as dot products along K where `few_rows_test` holds, in K blocks of as many of
    op(A)'s rows as DOT_PACK_BYTES hold (packed, unless read in place). A static M takes
    nanokernels of its rows; a run-time one those of one row where M is 1, else of DOT_ROWS
    rows whose rows past M repeat the last: one nanokernel for M of 2 to DOT_ROWS, where
    one for each row count added 30 ms to the compile time of a dynamic gemm."""
    b = Builder(Region())
    m = g.c.type.shape[0]
    count = DOT_ROWS if m is None else m
    element = g.c.type.element
    kc = DOT_PACK_BYTES // element.size // count
    buffer = None
    if not reads_rows_in_place(g, count):
        buffer = b.alloca(MemRefType.packed(element, [kc * count]))
    extent_m, extent_n, extent_k = extent_values(b, g)
    with b.for_(0, extent_k, kc) as (body, pc):
        kb = block_extent(body, extent_k, pc, kc)
        b_block = body.subview(g.b, stored(g.trans_b, pc, 0), stored(g.trans_b, kb, "?"))
        # the dot products apply any beta as they store, and a beta of 0 does not read C
        beta = first_block_beta(body, g.beta, pc, extent_k, kc)
        a = rows_for_dots(body, g.trans_a, (g.a, buffer), (0, pc, kb), extent_m)
        block = _Block(g, a, b_block, beta, extent_n)
        if m is not None:
            block.columns(body, m, None)
        else:
            block.columns_by_rows(body, extent_m)
    return b.region.instructions


class _Block:
    """One K block of a gemm: its rows of op(A), its op(B) and beta, and C's columns."""

    def __init__(self, g: Gemm, a: Value, b: Value, beta: Value, extent_n: Index):
        self.g, self.a, self.b, self.beta, self.extent_n = g, a, b, beta, extent_n

    def columns_by_rows(self, body: Builder, extent_m: Value) -> None:
        """Nanokernels of one row where M is 1, else of DOT_ROWS rows (the first M C's)."""
        branch = body.if_(body.cmp(CmpCond.EQ, extent_m, 1))
        self.columns(branch.then, 1, None)
        assert branch.otherwise is not None
        self.columns(branch.otherwise, DOT_ROWS, extent_m)

    def columns(self, body: Builder, rows: int, valid_rows: Value | None) -> None:
        """C's columns by nanokernels of `rows` rows, of which the first `valid_rows` are
        C's (all where None), FEW_ROWS_COLUMNS columns a pass."""
        g, width = self.g, FEW_ROWS_COLUMNS
        with body.for_(0, self.extent_n, width) as (loop, col):
            valid_cols = block_extent(loop, self.extent_n, col, width)
            loop.add(TileRowDots, trans_b=g.trans_b, alpha=g.alpha, a=self.a, b=self.b,
                     beta=self.beta, c=g.c, row=0, col=col, rows=rows, valid_rows=valid_rows,
                     cols=width, valid_cols=valid_cols)  # fmt: skip
