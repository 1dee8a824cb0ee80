"""gemms whose C has a few rows, where register tiles of C would leave most lanes idle.

A register tile's vectors run down C's columns, so a C of 1 to DOT_ROWS rows fills a few
lanes of each, and a gemm of run-time sizes takes tiles 32 rows tall. Two ways out, by where
op(B) runs in memory:

- **Dot products along K** (`few_rows_test`, `tile_few_rows`), where op(B)'s columns run
  along K: a run-time test (M of 1 to DOT_ROWS, K of at least DOT_DEPTH) sends a gemm of
  run-time sizes to `tile.row_dots`, as `gemm_tiles.rows_as_dots` sends a static one, in K
  blocks whose rows of op(A) are read in place or packed into a scratch of DOT_PACK_BYTES.
  f32, one thread, against the tiles: `.t.n` 1 x 1 x 20000 27x faster, 4 x 4 x 20000 12x,
  4 x 2000 x 1000 2.6x; `.n.n` 1 x 256 x 256 4x, 4 x 4 x 20000 2.4x. Unlike a static gemm
  (`DOT_PACK_COLUMNS`), one of few columns takes them too where the pack gathers op(A)'s
  rows: the blocked path's tiles pack A as well. The two nanokernels add 50-60 ms to the
  compile time of every gemm this test applies to (docs/benchmarks.md).
- **Tiles of C^T** (`row_block_test`, `tile_row_block`), where op(B)'s rows run along N (a
  `.t` B): C^T := op(B)^T op(A)^T has vectors along N, loaded from op(B)^T's columns, and a
  column per row of C. Where C's elements are one block of memory (its columns M elements
  apart) of 1, 2 or 4 rows, C^T is a row-major block of static width, whose tiles store
  their columns interleaved as whole vectors (`nanokernel.RowBlock`). Static and run-time
  sizes; f32, one thread, against the tiles of C (static, run-time): `.n.t` 1 x 256 x 256
  3.7x, 6.6x faster; 4 x 256 x 256 2.2x, 3.5x; 4 x 64 x 4096 2.8x, 6x; 4 x 20000 x 8 1.7x,
  2.4x; `.t.t` alike. A C of 3 rows scatters its C^T's columns (`.n.t` 3 x 256 x 256 2.4x
  faster, 3.4x at run-time sizes; `.t.t` run-time 7x, its tiles of C gathered A). A run-time
  M of 3 or 4 shares one counted tile (COUNTED_ROWS). A C whose columns are further apart
  keeps the tiles of C. The three nanokernels of a run-time M add about 40 ms to the
  compile time of such a gemm.
"""

from __future__ import annotations

from nanotc.ir.builder import Builder
from nanotc.ir.core import Instruction, Region
from nanotc.ir.instructions import BinaryOp, CmpCond, Expand, Fuse, Gemm
from nanotc.ir.tile import TileRowDots, TileStride
from nanotc.ir.types import MemRefType
from nanotc.ir.values import Value
from nanotc.lowering.gemm_blocked import block_extent, first_block_beta, greater, logical
from nanotc.lowering.gemm_tiles import (
    DOT_DEPTH,
    DOT_ROWS,
    Index,
    counted_micro,
    direct_micro,
    extent_values,
    gemm_extents,
    reads_rows_in_place,
    restaged,
    row_dots_operands,
    rows_for_dots,
    stored,
    tile_output,
    tile_reserved,
)
from nanotc.lowering.nanokernel import row_stride_is_unit
from nanotc.lowering.register_tile import RegisterTile, fits
from nanotc.lowering.row_major import FLIPPED, transposed_problem
from nanotc.targets import Target

ROW_BLOCK_ROWS = (1, 2, 3, 4)
"""C's row counts taken as tiles of C^T: stored as a row-major block where the tile's
columns are ROW_BLOCK_COLUMNS, else scattered (3: at K = 256 the scatters cost a tenth of a
tile's K loop)."""
COUNTED_ROWS = (3, 4)
"""A run-time M's row counts that share one counted tile of 4 columns (`tile.gemm ...
valid`), which stores a row-block only where M is 4: a branch of its own for 3 rows would
add a nanokernel, 15-20 ms of compile time."""
ROW_BLOCK_TILE_VECTORS = 4
"""The vectors along N of a tile of C^T, where they fit the registers beside its columns
(`_row_block_tile`). f32 dynamic `.n.t`, one thread, us for 1 x 256 x 256, 4 x 256 x 256,
4 x 64 x 4096, 4 x 20000 x 8 (compile time of the kernel): 4 vectors 2.8, 5.2, 15.9, 17.9
(260 ms); 6 vectors 4.0, 6.0, 24.3, 18.2 (290 ms); 8 vectors 3.6, 8.7, 61.6, 33.1 (316 ms)."""
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


def row_block_test(b: Builder, g: Gemm, target: Target) -> bool | Value:
    """Whether g's C is taken as the tiles of its transpose (`tile_row_block`): a C of
    ROW_BLOCK_ROWS rows whose elements are one block of memory (its columns that many
    elements apart), at least a vector wide, under an op(B) whose rows run along N; a
    run-time test where it depends on run-time sizes or strides."""
    if not _row_block_operands(g):
        return False
    extent_m, extent_n, _ = extent_values(b, g)
    rows = _one_of(b, extent_m, ROW_BLOCK_ROWS)
    block = _equal(b, _column_stride(b, g.c), extent_m)
    wide = greater(b, extent_n, target.lanes(g.c.type.element) - 1)
    return logical(b, BinaryOp.AND, logical(b, BinaryOp.AND, rows, block), wide)


def _row_block_operands(g: Gemm) -> bool:
    """One floating-point type throughout, no atomic update, C's rows adjacent, and op(B)'s
    rows contiguous along N (op(B)^T, the transposed problem's A, has contiguous columns)
    where its columns are not along K (`row_dots_operands` takes those)."""
    same = g.a.type.element is g.b.type.element is g.c.type.element
    if not same or g.atomic or g.c.type.stride[0] != 1 or row_dots_operands(g):
        return False
    return row_stride_is_unit(g.b.type, FLIPPED[g.trans_b])


def _column_stride(b: Builder, c: Value) -> Index:
    stride = c.type.stride[1]
    return stride if stride is not None else b.add(TileStride, source=c, mode=1)


def _one_of(b: Builder, x: Index, values: tuple[int, ...]) -> bool | Value:
    if isinstance(x, int):
        return x in values
    tests = [b.cmp(CmpCond.EQ, x, v) for v in values]
    test = tests[0]
    for other in tests[1:]:
        test = b.arith(BinaryOp.OR, test, other)
    return test


def _equal(b: Builder, x: Index, y: Index) -> bool | Value:
    if isinstance(x, int) and isinstance(y, int):
        return x == y
    return b.cmp(CmpCond.EQ, x, y)


def tile_row_block(g: Gemm, target: Target) -> list[Instruction]:
    """C^T := alpha op(B)^T op(A)^T + beta C^T where `row_block_test` holds: C viewed with
    its static row count and column stride, so that its transpose is a row-major block
    of static shape across, whose tiles (vectors along N, a column per row of C) store
    whole vectors (`nanokernel.RowBlock`). A run-time M takes a branch per row count."""
    b = Builder(Region())
    m = g.c.type.shape[0]
    if m is not None:
        _row_block_tiles(b, g, m, target)
        return b.region.instructions
    extent_m = b.size(g.c, 0)
    body = b
    for rows in ROW_BLOCK_ROWS[: -len(COUNTED_ROWS)]:
        branch = body.if_(body.cmp(CmpCond.EQ, extent_m, rows))
        _row_block_tiles(branch.then, g, rows, target)
        assert branch.otherwise is not None
        body = branch.otherwise
    _row_block_tiles(body, g, extent_m, target)
    return b.region.instructions


def _row_block_tiles(b: Builder, g: Gemm, rows: Index, target: Target) -> None:
    """The tiles of C^T for a C of `rows` rows: C fused into one mode and expanded again at
    that row count (its column stride, tested equal to it, becomes static where the count
    is), then the transposed problem's tiles, as wide as C is tall; for a run-time count
    (COUNTED_ROWS), one counted tile as wide as the most rows."""
    _, extent_n, _ = extent_values(b, g)
    flat = b.add(Fuse, source=g.c, first=0, last=1)
    block = b.add(Expand, source=flat, mode=0, shape=[rows, extent_n])
    transposed = transposed_problem(restaged(g, c=block))
    b.region.instructions.extend(transposed[:-1])
    t = transposed[-1]
    assert isinstance(t, Gemm)
    micro = direct_micro(t)
    n_t, _, k_t = gemm_extents(t)
    width = rows
    if not isinstance(rows, int):
        width, micro = COUNTED_ROWS[-1], counted_micro(micro, rows)
    reserved = tile_reserved(t, target)
    tile = _row_block_tile(t, n_t, width, target, reserved)
    b.region.instructions.extend(tile_output(t.c, (n_t, width, k_t), target, micro, reserved, tile))


def _row_block_tile(t: Gemm, rows: int | None, width: int, target: Target,
                    reserved: int) -> RegisterTile:  # fmt: skip
    """The tile of C^T (`t`'s C, of `rows` rows): ROW_BLOCK_TILE_VECTORS vectors along N,
    fewer where that many do not fit the target's registers beside `width` columns and
    `reserved`. On AVX2's 16 registers a 4 x 4 tile spilled 17-20 vectors a k step (the AMX
    Xeon, `avx2` target, dynamic f32 `.n.t` and `.t.t`)."""
    lanes = target.lanes(t.c.type.element)
    for vectors in range(ROW_BLOCK_TILE_VECTORS, 1, -1):
        tile = RegisterTile(vectors, width, lanes)
        if fits(tile, target, reserved, rows):
            return tile
    return RegisterTile(1, width, lanes)
