"""gemm on operands beyond the caches, read where they lie: no packing where what is read again
fits a cache once the loops are ordered for it.

The blocked path packs A and B so that its nanokernels reread them from cache; packing costs
a pass over both operands from memory, 5-28% of W3's GEMMs. Two cases do without it (static
shapes, one element type, op(A)'s columns contiguous):

K blocks, when the A block of one K block fits half of L2: the direct path's tiles, one K
block at a time

    for pc in K step kc:                  the B panel (kc x nr) fits L1
      for col in N step nr:
        for row in M step mr:             every row of tiles on the B panel, from L1
          tile.gemm on A[row:, pc:], B[pc:, col:], C[row:, col:]   (beta for the first block)

(A whole K makes each B panel too long for L1, and every row of tiles rereads it from L2:
100x3000x800, 96x512x2000 and 128x1024x4096 ran 1.15-1.25x faster in K blocks than packed.)

Row panels, when B fits half of L2 and A's K blocks do not:

    for row in M step mr:                 the row panel of A: mr x K
      for pc in K step kc:                its block (mr x kc) fills at most half of L1
        for col in N step nr:             every tile of the row, on that block from L1
          tile.prefetch of its share of the next block (next K block, or next panel)
          tile.gemm on A[row:, pc:], B[pc:, col:], C[row:, col:]

C's row panel is loaded and stored once per K block, from L1, and B stays in L2: the order of
tall-and-skinny libraries (W3's 3136x64x576, 784x128x512 and 784x128x1152 ran 1.05-1.15x
faster than packed; f64 up to 1.25x). Where A's columns all start at one offset in their cache
lines (and C's at one too), the panels start at A's first line boundary, found at run time,
so that no vector of A straddles two lines.
"""

from __future__ import annotations

from nanotc.ir.builder import Builder
from nanotc.ir.core import Instruction, Region
from nanotc.ir.instructions import BinaryOp, CmpCond, Gemm, Transpose
from nanotc.ir.tile import TileGemm, TileLineLead
from nanotc.ir.types import INDEX, MemRefType
from nanotc.ir.values import Constant, Value
from nanotc.lowering.choices import (
    DEFAULT_OPTIONS,
    K_BLOCKS,
    PANELS,
    CompileOptions,
    register_tile_for,
)
from nanotc.lowering.choices import signature as gemm_signature
from nanotc.lowering.gemm_blocked import (
    NextABlock,
    block_beta,
    block_extent,
    blocked_reserved,
    columns_per_tile,
    prefetch_next_a,
    scale_c_once,
)
from nanotc.lowering.gemm_tiles import (
    Index,
    columns_share_line_offset,
    direct_model_extents,
    dot_rows,
    gemm_extents,
    row_dots_after,
    stored,
    tile_block,
    whole_blocks_end,
)
from nanotc.lowering.nanokernel import row_stride_is_unit
from nanotc.lowering.register_tile import RegisterTile, choose, choose_tall
from nanotc.targets import Target


def in_place_path(g: Gemm, target: Target) -> str | None:
    """K_BLOCKS, PANELS or None (pack) for a gemm the blocked path would take: K blocks when
    the A block of one K block fits half of L2 (with the model's tile), B's columns fall
    into different L1 sets (`b_columns_share_sets`) and the target rereads A from L2
    (`Target.rereads_a_from_l2`), else row panels when B fits half of L2."""
    m, n, k = gemm_extents(g)
    if m is None or n is None or k is None:
        return None
    element = g.c.type.element
    same = g.a.type.element is element and g.b.type.element is element
    if not same or not row_stride_is_unit(g.a.type, g.trans_a):
        return None
    half_l2 = target.l2_bytes // 2
    tile = choose(target, element, m, n, k, blocked_reserved(g))
    kc = k_block_depth(target, tile, element.size, k)
    k_blocks_fit = m * kc * element.size <= half_l2 and not b_columns_share_sets(g, target)
    if k_blocks_fit and target.rereads_a_from_l2:
        return K_BLOCKS
    if k * n * element.size <= half_l2:
        return PANELS
    return None


def in_place_tile(
    g: Gemm, path: str, target: Target, options: CompileOptions = DEFAULT_OPTIONS
) -> tuple[RegisterTile, int]:
    """The register tile and the K block of `path`. Row panels take the tallest of the tiles
    the model estimates equal: each broadcast of B, read from L2, then feeds the most FMAs
    (W3: 3 x 8 ran 1.02-1.14x faster than the 2 x 8 to 2 x 14 the model ties with it)."""
    m, n, k = gemm_extents(g)
    assert m is not None and n is not None and k is not None
    element, reserved = g.c.type.element, blocked_reserved(g)
    sig = gemm_signature(g, path, (m, n, k), reserved)
    model = choose_tall if path == PANELS else choose
    tiled = direct_model_extents(g, target) if path == K_BLOCKS else (m, n, k)
    tile = register_tile_for(options, sig, target, element, tiled, reserved, model)
    depth = panel_depth if path == PANELS else k_block_depth
    return tile, depth(target, tile, element.size, k)


def b_columns_share_sets(g: Gemm, target: Target) -> bool:
    """Whether op(B)'s columns lie a whole number of L1 ways apart (4 KiB on Zen 4: 1024
    floats), so that every column of a B panel read in place falls into the same L1 sets. The
    K-blocks path then runs slower than packing whatever its tile: 196x256x1024 and
    196x512x1024 ran 1.10-1.13x and 1.23-1.30x faster packed (K blocks of 2 x 4 to 6 x 4
    tiles no better than 2 x 14), where columns 1028, 1032, 1040 or 2304 floats apart ran
    1.07-1.18x faster in K blocks (in-process, one thread, docs/benchmarks.md)."""
    col_stride = g.b.type.stride[0 if g.trans_b is Transpose.T else 1]
    way = target.l1_bytes // target.l1_ways
    return isinstance(col_stride, int) and col_stride * g.b.type.element.size % way == 0


def k_block_depth(target: Target, tile: RegisterTile, size: int, k: int) -> int:
    """K block of the K-blocks path: the B panel fills L1 at most (A streams from L2, and
    fewer blocks pass over C fewer times: B panels of all of L1 ran 1.02-1.04x faster than of
    half of it)."""
    return _equal_blocks(k, target.l1_bytes // (tile.nr * size))


def panel_depth(target: Target, tile: RegisterTile, size: int, k: int) -> int:
    """K block of a row panel: where its tiles ask for the next A block, that block fills half
    of L1 at most, as it must be there when they compute; where their K loops prefetch A
    themselves (`Target.prefetches_next_panel_block` off), half of L2, from which they
    stream it, so that C's panel is loaded and stored once for all of a K that short. On
    the AMX Xeon, whole K against blocks of half of L1: W3's 3136x64x576 1.09x, 3136x128x256
    1.09x, 784x256x512 1.07x, 784x128x1152 1.07x, 784x128x512 1.05x, 12544x64x147,
    3136x64x256 and 196x256x1024 1.03x (paired, one thread)."""
    share = target.l1_bytes if target.prefetches_next_panel_block else target.l2_bytes
    return _equal_blocks(k, share // 2 // (tile.mr * size))


def _equal_blocks(k: int, longest: int) -> int:
    """The length of the fewest equal blocks no longer than `longest` covering k (no short
    remainder to load and store C for)."""
    blocks = -(-k // max(8, longest))
    return -(-k // blocks)


def tile_gemm_in_place(
    g: Gemm, path: str, target: Target, options: CompileOptions = DEFAULT_OPTIONS
) -> list[Instruction]:
    m, n, k = gemm_extents(g)
    assert m is not None and n is not None and k is not None
    tile, kc = in_place_tile(g, path, target, options)
    b = Builder(Region())
    scale_c_once(b, g)
    if path == K_BLOCKS:
        _k_blocks(b, g, tile, 0, m, kc, dot_rows(g, target))
        return b.region.instructions
    ahead = target.prefetches_next_panel_block
    if columns_share_line_offset(g, target) and m >= 2 * tile.mr:
        _line_aligned_panels(b, g, tile, kc, ahead)
        return b.region.instructions
    full = m // tile.mr * tile.mr
    if full:
        with b.for_(0, full, tile.mr) as (body, row):
            _k_blocks(body, g, tile, row, tile.mr, kc, panel=ahead)
    if m > full:
        _k_blocks(b, g, _last_rows_tile(tile, target), full, m - full, kc)
    return b.region.instructions


def _last_rows_tile(tile: RegisterTile, target: Target) -> RegisterTile:
    """The tile of the rows after the last whole panel, which reads A with masks: the panel's
    tile where masks are k registers, else one vector by its columns (the panel's tile has
    no registers for masks: `choices.reads_whole_rows`)."""
    return tile if target.masked_memory else RegisterTile(1, tile.nr, tile.lanes)


def _line_aligned_panels(b: Builder, g: Gemm, tile: RegisterTile, kc: int, ahead: bool) -> None:
    """Row panels starting where A's columns cross a cache line, so that their vectors of A
    (and of C, where it starts at the same offset) are whole lines: numpy's arrays start 16
    bytes into a line, and the vectors crossing lines made W3's tall shapes 1.03-1.16x
    slower. The rows before (fewer than a line holds) and after the last whole panel take
    one-vector tiles, masked. The panels' tiles ask for the next A block where `ahead`."""
    m = gemm_extents(g)[0]
    assert m is not None
    edge = RegisterTile(1, tile.nr, tile.lanes)  # masked vectors for the rows around panels
    lead = b.add(TileLineLead, source=g.a)
    head = b.if_(b.cmp(CmpCond.GT, lead, Constant(0, INDEX)), with_else=False)
    _k_blocks(head.then, g, edge, 0, lead, kc)
    end = whole_blocks_end(b, m, lead, tile.mr)
    with b.for_(lead, end, tile.mr) as (body, row):
        _k_blocks(body, g, tile, row, tile.mr, kc, panel=ahead)
    rest = b.index(BinaryOp.SUB, m, end)
    tail = b.if_(b.cmp(CmpCond.GT, rest, Constant(0, INDEX)), with_else=False)
    _k_blocks(tail.then, g, edge, end, rest, kc)


def _next_panel_block(b: Builder, g: Gemm, tile: RegisterTile, row: Value, pc: Value,
                      kc: int) -> NextABlock | None:  # fmt: skip
    """The A block after the one at (row, pc) of a row panel: the panel's next K block, else
    the next panel's first (past the last panel, clamped to it), and the K columns of it
    each column of the block's tiles asks for (`prefetch_next_a`). None where op(A) is
    narrower than one tile's share."""
    m, n, k = gemm_extents(g)
    assert m is not None and n is not None and k is not None
    width = columns_per_tile(kc, n, tile)
    if k < width or m < tile.mr:
        return None
    following = b.index(BinaryOp.ADD, row, tile.mr)
    first_row: Value = following
    first_k: Value = Constant(0, INDEX)
    if k > kc:
        next_k = b.index(BinaryOp.ADD, pc, kc)
        choice = b.if_(b.cmp(CmpCond.GE, next_k, k), returns=[INDEX, INDEX])
        choice.then.yield_(following, first_k)
        assert choice.otherwise is not None
        choice.otherwise.yield_(row, next_k)
        first_row, first_k = choice.results
    return NextABlock(first_row, first_k, width, m - tile.mr, k - width)


def _k_blocks(b: Builder, g: Gemm, tile: RegisterTile, row: Index, rows: Index, kc: int,
              dots: int = 0, panel: bool = False) -> None:  # fmt: skip
    """All tiles of the `rows` x N block of C at `row`, K block by K block; its last `dots`
    rows as dot products (`tile.row_dots`). The tiles of a whole row `panel` ask for the
    next A block (`_next_panel_block`) while they compute: read once, from L3 or memory,
    its lines kept the first tile of every block waiting. Their K loops, on A in L1, then
    prefetch none of it (`tile.gemm.fetched`). W3 on a Zen 3, against neither: 3136x64x576
    1.16x, 12544x64x147 and 3136x256x64 1.11x, 784x128x512 1.06x, 3136x64x256 1.04x (the
    next block alone, the K loops' prefetches kept: 0.97-1.16x, 1.02x in total). Targets
    measured faster without it (`Target.prefetches_next_panel_block`) pass no `panel`."""
    _, n, k = gemm_extents(g)
    assert n is not None and k is not None
    buffer = b.alloca(MemRefType.packed(g.c.type.element, [dots * kc])) if dots else None
    with b.for_(0, k, kc) as (body, pc):
        kb = block_extent(body, k, pc, kc)
        beta = block_beta(body, g, pc, k, kc)
        a = body.subview(g.a, stored(g.trans_a, row, pc), stored(g.trans_a, rows, kb))
        bk = body.subview(g.b, stored(g.trans_b, pc, 0), stored(g.trans_b, kb, n))
        c = body.subview(g.c, [row, 0], [rows, n])
        ahead = None
        if panel:
            assert isinstance(row, Value)
            ahead = _next_panel_block(body, g, tile, row, pc, kc)

        def micro(mb: Builder, r: Index, col: Index, count: Index, mr: int, nr: int) -> None:
            if ahead is not None:
                prefetch_next_a(mb, g, ahead, (r, col), tile)
            mb.add(
                TileGemm, trans_a=g.trans_a, trans_b=g.trans_b, atomic=g.atomic, alpha=g.alpha,
                a=a, b=bk, beta=beta, c=c, row=r, col=col, rows=count, mr=mr, nr=nr,
                fetched=ahead is not None,
            )  # fmt: skip

        if buffer is None:
            tile_block(body, tile, rows, n, micro)
        else:
            assert isinstance(rows, int)
            hook = row_dots_after(body, g, (a, bk, c, buffer), (rows - dots, 0, kb), beta)
            tile_block(body, tile, rows - dots, n, micro, hook)
