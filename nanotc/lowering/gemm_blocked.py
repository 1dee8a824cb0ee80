"""gemm on operands larger than the caches: BLIS-style blocking with packing.

    C := beta * C                        (skipped for beta = 0: the first K block writes C;
                                         and for beta = 1)
    for jc in N step nc:                 B block: kc x nc, packed once per (jc, pc)
      for pc in K step kc:               the K blocks accumulate into C (beta 1 after the
                                         first)
        pack op(B)[pc:, jc:] as op(B)^T in nr-row panels (contiguous kc x nr panels;
                                         none for an op(B) that runs along K)
        for ic in M step mc:             A block: mc x kc, stays in L2
          pack op(A)[ic:, pc:] in mr-row panels (contiguous mr x kc panels)
          register tiles of the mc x nc block, each a `tile.gemm` nanokernel reading one
          A panel and one B panel (the same nanokernels as the direct path)

bf16 operands into an f32 C, on a target whose `vdpbf16ps` outruns FMAs, stay bf16 in the
packs: op(A)'s panels in the VNNI layout (`tile.pack.pairs`: two K values of a row adjacent),
so the nanokernels load A's pairs instead of interleaving two columns at every column of
tiles, and op(B) is packed as K-contiguous columns in one panel of kc rows. Elsewhere the
packs widen to C's type and the nanokernels use FMAs.

A static M's last 1 to 4 rows past a whole vector (`gemm_tiles.dot_rows`) take no masked
tile: they are packed apart per K block and taken as dot products along K after each column
block of the first row block's tiles (`tile.row_dots`), as on the direct path.

Where op(B) runs along K in memory in the element the tiles read (C's type, or bf16 pairs,
each K pair one 32-bit word), the tiles broadcast from B itself and B is not packed
(`reads_b_in_place`: tiles at most three quarters of an L1 set's ways wide).

Block sizes follow the target's caches: the B panel a nanokernel streams (kc x nr) fills at
most half of L1 (and, where K takes several blocks, the B panel and one A panel fit L1
together, unless B is read in place and C is larger than L2), the packed A block (mc x kc)
half of L2 (two L2s, from L3, where B is read in place and B and C are larger than L2:
every A block then passes over all of B's panels again), the B block a few MiB (twice as
many where B is read in place: no buffer holds it, and each B block packs all of A again).
Packing also makes transposed and strided operands contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass

from nanotc.ir.builder import Builder
from nanotc.ir.core import Instruction, Region
from nanotc.ir.instructions import BinaryOp, CmpCond, Expand, Gemm, Transpose
from nanotc.ir.tile import TileGemm, TileMin, TilePack, TilePrefetch, TileScale
from nanotc.ir.types import DYNAMIC, INDEX, MemRefType, ScalarType
from nanotc.ir.values import Constant, Value, is_literal
from nanotc.lowering.choices import (
    BLOCKED,
    DEFAULT_OPTIONS,
    CompileOptions,
    blocking_override,
    register_tile_for,
    signature,
)
from nanotc.lowering.gemm_pairs import b_columns, dot_pairs, pair_panel
from nanotc.lowering.gemm_tiles import (
    ColumnHook,
    Index,
    dot_rows,
    epilogue_registers,
    extent_values,
    gemm_extents,
    row_dots_after,
    stored,
    tile_block,
)
from nanotc.lowering.nanokernel import row_stride_is_unit
from nanotc.lowering.register_tile import RegisterTile, TileModel, choose, choose_narrow
from nanotc.targets import Target

B_BLOCK_BYTES = 4 * 1024 * 1024
# B read in place has no pack buffer to bound, and every B block packs all of A again: its
# blocks are twice as large (Zen 4, f64 2048^3 in one block of N against two: 1.015-1.023x)
B_BLOCK_BYTES_IN_PLACE = 2 * B_BLOCK_BYTES
MAX_KC = 512  # nanokernel steps of a K block
ONE_BLOCK_OF_N = 1.25  # how far past a B block's columns a block of a static N may reach
B_PANEL_COLUMNS = 16  # at least a register tile's columns
FEW_ROWS_OF_TILES = 2  # of two vectors each
# the direct path's tiles for a run-time M on AVX2 (`masks_rows_in_registers`) hold a mask per
# vector of A, which leaves one-vector tiles with a masked load of A at every k step; packed
# rows take no mask. Zen 3, 128-column blocks in cache: packed 1.06-1.46x faster from 32 f32
# and 16 f64 rows (four vectors), 0.76-0.83x at one vector, 0.92-0.98x at partial tiles
MASKED_ROWS_VECTORS = 4
L1_SHARE_OF_PANELS = 7 / 8  # the rest holds the lines of C and the stack
# B's panel read in place where each K block is a pass over a C beyond L2: deeper blocks make
# fewer passes (Zen 4, f64 1024^3 and 2048^3: 512 deep 1.03-1.05x over 296, one and two
# threads)
DEEP_L1_SHARE = 3 / 4
# L2s the A block fills: half of one, or the target's `a_block_l2s_over_memory` where each A
# block passes over B's panels beyond L2 (B read in place, B and C past L2); with B in L2
# (W3's 3136x128x256, 12544x64x147) larger A blocks ran 0.96-0.98x on Zen 4, so those keep half
A_BLOCK_L2S = 0.5
ONE = Constant(1, ScalarType.F32)  # the blocks' beta


@dataclass(frozen=True)
class Blocking:
    mc: int
    kc: int
    nc: int


def blocking(
    target: Target,
    element: ScalarType,
    tile: RegisterTile,
    k: int | None = None,
    n: int | None = None,
    *,
    m: int | None = None,
    b_in_place: bool = False,
) -> Blocking:
    """Block sizes from the caches. A static K that one block does not cover is split into
    equal K blocks, so no block is a short remainder whose nanokernels spend most of their
    time loading and storing C (784x128x512: 256 + 256 instead of 432 + 80 ran 1.09x
    faster), each short enough that the B panel and the A panel streaming past it fit L1
    together, so the B panel stays there for the next row of tiles (196x256x2304 and
    784x128x1152 ran 1.04-1.05x faster than in blocks only the B panel's half of L1 bounds).
    A K one block covers stays whole: two blocks pass over C twice (3136x64x256 ran 1.06x
    slower in two).

    bf16 packs (VNNI pairs) take K blocks twice as deep, each nanokernel step a K pair: at
    twice the flop rate, C's passes cost twice as much, and A's VNNI panels stream from L2
    past a B panel that keeps most of L1 (512x1024x1024: kc 1024 ran 1.06x faster than 512;
    512x2048x2048: 1.06x).

    A static N splits into equal B blocks, each at most a quarter beyond the cache's: a block
    of its last few columns would pack all of A again for them (bf16 512x2048x2048 in 2041 +
    7 columns; f64 2048^3 in 1020 + 1020 + 8 ran 0.97x of 1026 + 1022)."""
    size = element.size
    pairs = element is ScalarType.BF16
    deepest = 2 * MAX_KC if pairs else MAX_KC
    passes_over_memory = b_in_place and _exceeds_l2(target, m, n, size)
    share = L1_SHARE_OF_PANELS if pairs else DEEP_L1_SHARE if passes_over_memory else 0.5
    kc = max(64, min(deepest, int(target.l1_bytes * share) // (tile.nr * size)) // 8 * 8)
    if k is not None and k > kc:
        panels = int(target.l1_bytes * L1_SHARE_OF_PANELS) // ((tile.mr + tile.nr) * size)
        if pairs or passes_over_memory:
            panels = kc
        blocks = -(-k // max(64, min(kc, panels)))
        kc = _round_up(-(-k // blocks), 8)
    # B's panels then come from beyond L2 for every A block
    over_memory = passes_over_memory and _exceeds_l2(target, k, n, size) and not pairs
    a_block = target.a_block_l2s_over_memory if over_memory else A_BLOCK_L2S
    mc = max(tile.mr, int(target.l2_bytes * a_block) // (kc * size) // tile.mr * tile.mr)
    b_block = B_BLOCK_BYTES_IN_PLACE if b_in_place else B_BLOCK_BYTES
    nc = max(tile.nr, b_block // (kc * size) // tile.nr * tile.nr)
    if n is not None and nc < n:
        blocks = -(-n // int(nc * ONE_BLOCK_OF_N))
        nc = _round_up(-(-n // blocks), tile.nr)
    return Blocking(mc, kc, nc)


def _round_up(extent: int, multiple: int) -> int:
    """`extent` rounded up to a whole number of `multiple` (register tiles)."""
    return -(-extent // multiple) * multiple


def _exceeds_l2(target: Target, m: int | None, n: int | None, size: int) -> bool:
    """Whether an m x n operand (of unknown size: assumed large) is larger than L2. For C,
    a pass over it, one per K block, then reads and writes it in L3 or memory. On AVX-512
    the tiles that read B in place are 64 rows tall (f32 64 x 6), so K blocks whose A and B
    panels fit L1 together are short (kc 152): at f32 2048^3 those passes cost more than B's
    columns reread from L2 (0.97x against the packed B; in blocks of 512, 1.00-1.02x), while
    with C in L2 the short blocks still pay (784x128x1152: 1.02-1.07x with them, 0.97-0.99x
    without)."""
    return m is None or n is None or m * n * size > target.l2_bytes


def needs_blocking(
    b: Builder, g: Gemm, target: Target, extents: tuple[Index, Index, Index] | None = None
) -> bool | Value:
    """Whether to pack (a run-time test where a size is dynamic; decided where `extents`, M,
    N and K of one launch, are numbers: what the tuner asks): where the direct path would
    run out of cache (`_outgrows_cache`), and past MASKED_ROWS_VECTORS vectors of a
    run-time M where its tiles would mask A's rows in registers (`masks_rows_in_registers`);
    always where they would mask them lane by lane (`masks_lane_by_lane`) or gather them
    (`gathers_a`)."""
    if masks_lane_by_lane(g, target) or gathers_a(g):
        return True
    m, n, k = extents or extent_values(b, g)
    outgrows = _outgrows_cache(b, g, target, (m, n, k))
    if not masks_rows_in_registers(g, target):
        return outgrows
    rows = MASKED_ROWS_VECTORS * target.lanes(g.c.type.element)
    return logical(b, BinaryOp.OR, outgrows, greater(b, m, rows - 1))


def _outgrows_cache(
    b: Builder, g: Gemm, target: Target, extents: tuple[Index, Index, Index]
) -> bool | Value:
    """Not while A and B fit half of L2 together: packing costs more than it saves
    (in-cache 128x64x256 ran 1.2x slower packed). Beyond that, the direct path still wins
    while A alone fits: it rereads A from L2 for every column of register tiles, and each B
    panel (k x nr) for every row of tiles, from L1 if the panel fits there, else from L2,
    which only few rows of tiles afford (W3: 196x1024x512 ran 1.18x and 49x2048x1024 1.5x
    faster direct on Zen 4, 196x256x1024 1.07x slower), on targets that do
    (`Target.rereads_a_from_l2`). A gathered A (rows not contiguous) rereads slowly: it packs
    as soon as A and B outgrow half of L2."""
    m, n, k = extents
    l2 = target.l2_bytes // 2
    a_size, b_size = g.a.type.element.size, g.b.type.element.size
    overflow = greater(b, b.index(BinaryOp.MUL, k, b.index(BinaryOp.ADD, m, n)), l2 // a_size)
    rereads = target.rereads_a_from_l2 and row_stride_is_unit(g.a.type, g.trans_a)
    if overflow is False or not rereads:
        return overflow
    a_overflows = greater(b, b.index(BinaryOp.MUL, m, k), l2 // a_size)
    if a_overflows is True:
        return overflow
    panel_overflows = greater(b, k, target.l1_bytes // (B_PANEL_COLUMNS * b_size))
    if panel_overflows is False:
        return logical(b, BinaryOp.AND, overflow, a_overflows)
    many_rows = greater(b, m, FEW_ROWS_OF_TILES * 2 * target.lanes(g.c.type.element))
    rereads_b = logical(b, BinaryOp.AND, panel_overflows, many_rows)
    return logical(b, BinaryOp.AND, overflow, logical(b, BinaryOp.OR, a_overflows, rereads_b))


def masks_rows_in_registers(g: Gemm, target: Target) -> bool:
    """Whether the direct path's tiles would hold a mask per vector of A in their K loop: C's
    rows are known at run time only and masks are not k registers (`target_overhead`)."""
    return not target.masked_memory and g.c.type.shape[0] == DYNAMIC


def masks_lane_by_lane(g: Gemm, target: Target) -> bool:
    """Whether the direct path's tiles would load A's 16-bit elements (bf16, f16) under a
    run-time row mask on a target without k registers: AVX2 has no 16-bit masked load, so
    LLVM loads each lane behind a branch of its own, at every k step. The packs widen A to
    C's type in panels of whole rows, which take no mask: on a Zen 3, gemms of run-time
    sizes on bf16 ran 1.9-2.8x faster packed (64x256x128, 100x256x128, 37x128x64,
    200x256x64) and 1.02-1.06x where the launch dominates (1x64x64 to 17x32x40)."""
    return masks_rows_in_registers(g, target) and g.a.type.element.size == 2


def gathers_a(g: Gemm) -> bool:
    """Whether the direct path's tiles would gather A's vectors lane by lane from memory:
    op(A)'s rows are not adjacent (a transposed A, a row stride) and M or K is known at run
    time only, so the direct path cannot pack A beforehand as it packs a static one
    (`gemm.direct_gemm`). The blocked path's packs transpose it in registers at any size:
    Zen 4, one thread, `gemm.t.n` of run-time sizes ran 2.7x faster at 100^3 (f32), 2.9x at
    256^3, 1.7x at f64 96x91x100, 1.1x at 16^3, where the launch dominates."""
    m, _, k = gemm_extents(g)
    return (m is None or k is None) and not row_stride_is_unit(g.a.type, g.trans_a)


def greater(b: Builder, x: Index, limit: int) -> bool | Value:
    return x > limit if isinstance(x, int) else b.cmp(CmpCond.GT, x, limit)


def logical(b: Builder, op: BinaryOp, x: bool | Value, y: bool | Value) -> bool | Value:
    """x or y, x and y: folded where a side is known."""
    for known, other in ((x, y), (y, x)):
        if isinstance(known, bool):
            absorbing = known if op is BinaryOp.OR else not known
            return known if absorbing else other
    return b.arith(op, x, y)


def tile_gemm_blocked(
    g: Gemm, target: Target, options: CompileOptions = DEFAULT_OPTIONS
) -> list[Instruction]:
    """The blocked path; where the first K block writes C and K is known only at run time,
    behind a test of K: with no K block, C := alpha * 0 (zeros, without reading C, unless
    alpha is NaN or infinite) instead. A bf16 A with run-time rows, always blocked on AVX2,
    left C as it was."""
    _, _, k = gemm_extents(g)
    if k is not None or not first_block_writes_c(g):
        return _blocks(g, target, options)
    b = Builder(Region())
    _, _, extent_k = extent_values(b, g)
    branch = b.if_(b.cmp(CmpCond.EQ, extent_k, 0))
    zero = Constant(0.0, g.alpha.type)
    literal = isinstance(g.alpha, Constant)  # a literal is finite: alpha * 0 is 0
    empty_sum = zero if literal else branch.then.arith(BinaryOp.MUL, g.alpha, zero)
    branch.then.add(TileScale, beta=empty_sum, c=g.c)  # beta 0 does not read C
    assert branch.otherwise is not None
    branch.otherwise.region.instructions.extend(_blocks(g, target, options))
    return b.region.instructions


def _blocks(g: Gemm, target: Target, options: CompileOptions) -> list[Instruction]:
    m, n, k = gemm_extents(g)
    sig = signature(g, BLOCKED, (m, n, k), blocked_reserved(g))
    tile = blocked_tile(g, target, options)
    pairs = dot_pairs(g, target)
    b_in_place = reads_b_in_place(g, target, tile)
    packed = packed_element(g, target)
    override = blocking_override(options, sig, tile)
    blocks = (
        Blocking(*override)
        if override
        else blocking(target, packed, tile, k, n, m=m, b_in_place=b_in_place)
    )
    b = Builder(Region())
    extent_m, extent_n, extent_k = extent_values(b, g)
    dots = 0 if pairs else dot_rows(g, target)
    tiled_m = extent_m - dots if isinstance(extent_m, int) else extent_m
    scale_c_once(b, g)  # (where the first K block writes C, K > 0 here)
    kc = blocks.kc + blocks.kc % 2  # room for an odd block's zero-padded last pair
    a_rows = _capacity(None if m is None else m - dots, blocks.mc, tile.mr)
    a_pack = b.alloca(MemRefType.packed(packed, [a_rows * kc]))
    dot_pack = b.alloca(MemRefType.packed(packed, [dots * blocks.kc])) if dots else None
    b_pack = None
    if not b_in_place:
        b_pack = b.alloca(MemRefType.packed(packed, [kc * _capacity(n, blocks.nc, tile.nr)]))
    with b.for_(0, extent_n, blocks.nc) as (outer, jc):
        nb = block_extent(outer, extent_n, jc, blocks.nc)
        with outer.for_(0, extent_k, blocks.kc) as (middle, pc):
            kb = block_extent(middle, extent_k, pc, blocks.kc)
            beta = block_beta(middle, g, pc, extent_k, blocks.kc)
            if b_pack is not None:
                _pack_b(middle, g, b_pack, (pc, jc, kb, nb), kc if pairs else None, tile.nr)
            dot_hook = None
            if dot_pack is not None:
                dot_hook = _row_dots(middle, g, dot_pack, (jc, pc, kb, nb), beta, dots)
            with middle.for_(0, tiled_m, blocks.mc) as (inner, ic):
                mb = block_extent(inner, tiled_m, ic, blocks.mc)
                inner.add(TilePack, trans=g.trans_a, pairs=pairs, source=g.a, row=ic, col=pc,
                          rows=mb, cols=kb, panel=tile.mr, target=a_pack)  # fmt: skip
                ahead = _next_a_block(inner, (ic, pc), (tiled_m, extent_k), blocks, tile, n)
                panels = _Panels(g, tile, (a_pack, b_pack), kb, (ic, jc, pc), beta,
                                 kc if pairs else None, ahead)  # fmt: skip
                hook = None if dot_hook is None else _in_first_block(dot_hook, ic, mb)
                # a hook's dots cover whole widths; an atomic or bf16 dot tile cannot repeat
                # a column (`tile.gemm ... valid`)
                counted = None if hook or g.atomic or pairs else panels.micro
                tile_block(inner, tile, mb, nb, panels.micro, hook, counted=counted)
    return b.region.instructions


# A block feeds N / nr columns of tiles: with few of them the pack's wait on memory shows
# (W3 on Zen 3: 784x128x1152 1.02-1.09x with the next block asked for ahead; from 512
# columns 0.97-1.02x, and W1 1.0-1.02x, where its code only added to the compile time)
FEW_COLUMNS_FOR_A = 256


@dataclass(frozen=True)
class NextABlock:
    """The A block after this one (the next to pack, or the next row panel's block read in
    place: `gemm_in_place`): its first row of op(A) and K column, how many of its K columns
    each column of register tiles prefetches (`prefetch_next_a`), and the last first row
    and K column a tile's view may take, within op(A)."""

    row: Value
    col: Value
    columns_per_tile: int
    last_row: int
    last_col: int


def _next_a_block(
    b: Builder, corner: tuple[Value, Value], extents: tuple[Index, Index], blocks: Blocking,
    tile: RegisterTile, n: int | None,
) -> NextABlock | None:  # fmt: skip
    """The next row block of the same K block, else the first of the next K block (of the
    first, after the last: the next column block's, or the next launch's). Only for static
    extents of several blocks, with a static N of at most FEW_COLUMNS_FOR_A (which bounds
    the tiles each block feeds), and op(A) at least a tile's view (mr rows by the columns
    per tile): the views then stay within op(A)."""
    ic, pc = corner
    tiled_m, extent_k = extents
    if not isinstance(tiled_m, int) or not isinstance(extent_k, int) or n is None:
        return None
    one_block = tiled_m <= blocks.mc and extent_k <= blocks.kc
    width = columns_per_tile(blocks.kc, min(blocks.nc, n), tile)
    if one_block or n > FEW_COLUMNS_FOR_A or tiled_m < tile.mr or extent_k < width:
        return None
    following = b.index(BinaryOp.ADD, ic, blocks.mc)
    next_k = b.index(BinaryOp.REM, b.index(BinaryOp.ADD, pc, blocks.kc), extent_k)
    wraps = b.cmp(CmpCond.GE, following, tiled_m)
    choice = b.if_(wraps, returns=[INDEX, INDEX])
    choice.then.yield_(Constant(0, INDEX), next_k)
    assert choice.otherwise is not None
    choice.otherwise.yield_(following, pc)
    row, col = choice.results
    return NextABlock(row, col, width, tiled_m - tile.mr, extent_k - width)


def columns_per_tile(kc: int, columns: int, tile: RegisterTile) -> int:
    """How many K columns of the next A block each column of register tiles asks for, so
    that the block's `columns` (of C) together cover its kc."""
    return -(-kc // -(-columns // tile.nr))


def prefetch_next_a(b: Builder, g: Gemm, ahead: NextABlock, tile_at: tuple[Index, Index],
                    tile: RegisterTile) -> None:  # fmt: skip
    """The share of the next A block that the register tile at (row, col) of this block asks
    for: its own rows there, in the K columns of its column of tiles (clamped within op(A))."""
    row, col = tile_at
    width = ahead.columns_per_tile
    column_tile = b.index(BinaryOp.DIV, col, tile.nr)
    first_k = b.index(BinaryOp.ADD, ahead.col, b.index(BinaryOp.MUL, column_tile, width))
    first_k = b.add(TileMin, lhs=first_k, rhs=ahead.last_col)
    following = ahead.row if row == 0 else b.index(BinaryOp.ADD, ahead.row, row)
    first_row = b.add(TileMin, lhs=following, rhs=ahead.last_row)
    view = b.subview(g.a, stored(g.trans_a, first_row, first_k), stored(g.trans_a, tile.mr, width))
    b.add(TilePrefetch, write=False, source=view)


def _row_dots(b: Builder, g: Gemm, buffer: Value, block: tuple[Value, Value, Index, Index],
              beta: Value, dots: int) -> ColumnHook:  # fmt: skip
    """C's last `dots` rows (`dot_rows`) in the block (jc, pc, kb, nb) as dot products along
    K, one column block at a time while its B panel is in L1; op(A)'s rows are packed into
    `buffer` here. A masked tile spends a whole vector of FMAs per column and K step on
    them: W3's 49 x N shapes had 8 x 6 tiles for one row, latency-bound (6 accumulators)."""
    jc, pc, kb, nb = block
    m = g.c.type.shape[0]
    b_block = b.subview(g.b, stored(g.trans_b, pc, jc), stored(g.trans_b, kb, nb))
    c_block = b.subview(g.c, [0, jc], [m, nb])
    return row_dots_after(b, g, (g.a, b_block, c_block, buffer), (m - dots, pc, kb), beta)


def _in_first_block(hook: ColumnHook, ic: Value, mb: Index) -> ColumnHook:
    """`hook` for the first of the row blocks only (all of them where one block covers M)."""
    if isinstance(mb, int):
        return hook

    def first_only(body: Builder, col: Index, width: int) -> None:
        branch = body.if_(body.cmp(CmpCond.EQ, ic, 0), with_else=False)
        hook(branch.then, col, width)

    return first_only


def blocked_tile(
    g: Gemm, target: Target, options: CompileOptions = DEFAULT_OPTIONS
) -> RegisterTile:
    """The register tile of the blocked path: the override of its signature, else the model's
    (`blocked_tile_model`) for blocks of any size, as the model assumes of dynamic extents."""
    reserved = blocked_reserved(g)
    sig = signature(g, BLOCKED, gemm_extents(g), reserved)
    model = blocked_tile_model(g, target)
    return register_tile_for(options, sig, target, g.c.type.element, (None,) * 3, reserved, model)


def _pack_b(b: Builder, g: Gemm, target: Value, block: tuple[Value, Value, Index, Index],
            pairs_of: int | None, nr: int) -> None:  # fmt: skip
    """op(B)'s kb x nb block at (pc, jc) into `target`: bf16 pairs as K-contiguous columns
    in one panel of `pairs_of` (kc) rows, zero past kb; otherwise op(B)^T in nr-row panels."""
    pc, jc, kb, nb = block
    if pairs_of is not None:
        b.add(TilePack, trans=g.trans_b, source=g.b, row=pc, col=jc, rows=kb, cols=nb,
              panel=pairs_of, target=target)  # fmt: skip
        return
    flip = Transpose.N if g.trans_b is Transpose.T else Transpose.T
    b.add(TilePack, trans=flip, source=g.b, row=jc, col=pc, rows=nb, cols=kb, panel=nr,
          target=target)  # fmt: skip


def b_runs_along_k(g: Gemm, target: Target) -> bool:
    """Whether op(B)'s columns run along K in memory in the element the tiles read: C's type,
    or bf16 pairs (`dot_pairs`), each K pair then one 32-bit word of B."""
    return row_stride_is_unit(g.b.type, g.trans_b) and g.b.type.element is packed_element(g, target)


def reads_b_in_place(g: Gemm, target: Target, tile: RegisterTile) -> bool:
    """Whether the tiles broadcast op(B) from B itself rather than from a packed copy: where
    it runs along K (`b_runs_along_k`), for a tile at most `in_place_columns` wide (a tuned
    wider one packs). The pack read and wrote all of B once more per K block (bf16
    512x2048x2048: 8 MiB each way, about 4% of the layer). Read in place, that layer ran
    1.00-1.01x faster on one thread and 1.05x on two, 512x1024x1024 1.04-1.05x, 128x4096x2048
    1.10x. f32 1024^3 and 2048^3 with run-time sizes ran 1.03-1.07x faster, f64 2048^3
    1.04x, 196x256x2304 1.05-1.10x (docs/benchmarks.md)."""
    return tile.nr <= in_place_width(g, target)


def in_place_width(g: Gemm, target: Target) -> int:
    """The widest tile that reads op(B) in place: `in_place_columns` where op(B) runs along K,
    else 0 (B is packed)."""
    return in_place_columns(target) if b_runs_along_k(g, target) else 0


def in_place_columns(target: Target) -> int:
    """How many of B's columns a tile reading B in place may take: three quarters of the ways
    of an L1 set, the rest left to the lines of A's panels and C's tiles streaming through
    the same sets. Columns whose stride is a multiple of 4 KiB (a leading dimension of 2048
    bf16) fall into the same sets: on AVX-512 with 12 ways, 13 columns at that stride ran
    0.94x of the packed B on two threads, 6 columns 1.05x. On Zen 4's 8 ways, half of them
    (4 columns: tiles of 6 x 4 whose A vectors stream from L2 at 16 bytes per FMA) ran
    0.89x-0.95x of 6 columns (4 x 6): bf16 512x1024x1024 1.13x, f32 1024^3 1.05x, f64
    1024^3 and 2048^3 1.03-1.05x with 6 columns; 6 columns also ran 1.01x of the packed B at
    bf16 512x1024x1024 (docs/benchmarks.md)."""
    return max(1, target.l1_ways * 3 // 4)


def blocked_tile_model(g: Gemm, target: Target) -> TileModel:
    """The register tile model of the blocked path: the analytical choice, only as narrow
    as `in_place_width` where op(B) could be read in place."""
    width = in_place_width(g, target)
    return choose_narrow(width) if width else choose


def packed_element(g: Gemm, target: Target) -> ScalarType:
    """What the packs hold: bf16 pairs (`dot_pairs`), else C's type."""
    return ScalarType.BF16 if dot_pairs(g, target) else g.c.type.element


def blocked_reserved(g: Gemm) -> int:
    """Vector registers the blocked path's nanokernels keep for alpha and their beta (a
    run-time choice between 0 and 1 when the first K block writes C)."""
    return epilogue_registers(g.alpha, ONE) + int(first_block_writes_c(g))


def scale_c_once(b: Builder, g: Gemm) -> None:
    """C := beta * C before K blocks that all add to C (`tile.scale`), unless the first
    writes C (`first_block_writes_c`) or beta is 1: C itself then, and the pass would read
    and write all of C for nothing (W1's kernel at 2048x2048x512 with beta 1 ran 1.05x
    slower than with beta 0 for that pass, C being 16 MiB)."""
    if not first_block_writes_c(g) and not is_literal(g.beta, 1):
        b.add(TileScale, beta=g.beta, c=g.c)


def first_block_writes_c(g: Gemm) -> bool:
    """C = alpha A B (beta 0, not atomic): the first K block stores C without reading it,
    instead of a pass that zeroes C for the first block to read back. Other betas keep that
    pass: a run-time beta in every nanokernel's epilogue (beta times C), beside a run-time
    alpha, would no longer fit the registers."""
    return not g.atomic and is_literal(g.beta, 0)


def block_beta(b: Builder, g: Gemm, pc: Value, extent_k: Index, kc: int) -> Value:
    """beta 0 for the first K block when it writes C, 1 for the blocks adding to it."""
    if not first_block_writes_c(g):
        return Constant(1, g.beta.type)
    return first_block_beta(b, g.beta, pc, extent_k, kc)


def first_block_beta(b: Builder, beta: Value, pc: Value, extent_k: Index, kc: int) -> Value:
    """`beta` for the K block at pc where it is the first (of those of length kc), 1 after."""
    if isinstance(extent_k, int) and extent_k <= kc:
        return beta
    choice = b.if_(b.cmp(CmpCond.EQ, pc, 0), returns=[beta.type])
    choice.then.yield_(beta)
    assert choice.otherwise is not None
    choice.otherwise.yield_(Constant(1, beta.type))
    return choice.results


def block_extent(b: Builder, extent: Index, start: Value, block: int) -> Index:
    """min(block, extent - start): static when one block covers a static extent, so the
    tiles of the block get static remainders (fewer kernels)."""
    if isinstance(extent, int) and extent <= block:
        return extent
    return b.add(TileMin, lhs=b.index(BinaryOp.SUB, extent, start), rhs=block)


def _capacity(extent: int | None, block: int, multiple: int) -> int:
    """Rows (or columns) a packing buffer must hold: one block, or less for a small C."""
    if extent is None:
        return block
    return min(block, _round_up(extent, multiple))


class _Panels:
    """Makes the nanokernel of one register tile read packed panels (and B where it lies,
    where no B pack is given)."""

    def __init__(self, g: Gemm, tile: RegisterTile, packs: tuple[Value, Value | None],
                 kb: Value, corner: tuple[Value, Value, Value], beta: Value,
                 pairs_of: int | None = None, ahead: NextABlock | None = None):  # fmt: skip
        self.g, self.tile = g, tile
        self.ahead = ahead
        self.a_pack, self.b_pack = packs
        self.kb = kb
        self.ic, self.jc, self.pc = corner  # the block's first row, column and K
        self.beta = beta
        self.pairs_of = pairs_of  # the B panel's rows where the packs hold pairs

    def micro(self, b: Builder, row: Index, col: Index, rows: Index, mr: int, nr: int,
              count: Index | None = None) -> None:  # fmt: skip
        """The tile at (row, col) of the block; `count`: of its nr columns, C's (the view of
        C has those, the tile repeats the last for the others)."""
        c = b.subview(
            self.g.c,
            [b.index(BinaryOp.ADD, self.ic, row), b.index(BinaryOp.ADD, self.jc, col)],
            [rows, nr if count is None else count],
        )
        if self.ahead is not None:
            # A is read once per block from beyond L2, a line per K column and panel, which
            # the pack waited on at DRAM's latency: asked for now, the next pack finds them
            prefetch_next_a(b, self.g, self.ahead, (row, col), self.tile)
        pairs = self.pairs_of is not None
        in_place = self.b_pack is None
        trans_b = self.g.trans_b if in_place else Transpose.N if pairs else Transpose.T
        b.add(
            TileGemm, trans_a=Transpose.N, trans_b=trans_b, atomic=self.g.atomic, pairs=pairs,
            padded=pairs and not in_place, alpha=self.g.alpha, a=self._a_panel(b, row),
            b=self._b_operand(b, col, nr), beta=self.beta, c=c, row=0, col=0, rows=rows, mr=mr,
            nr=nr, valid_cols=count,
        )  # fmt: skip

    def _a_panel(self, b: Builder, row: Index) -> Value:
        """op(A)'s mr-row panel of the tile's rows: VNNI pairs (2 mr x K pairs) or mr x kb."""
        mr = self.tile.mr
        if self.pairs_of is not None:
            k_pairs = b.index(BinaryOp.DIV, b.index(BinaryOp.ADD, self.kb, 1), 2)
            return pair_panel(b, self.a_pack, row, k_pairs, mr)
        return self._panel(b, self.a_pack, b.index(BinaryOp.MUL, row, self.kb), mr, self.kb)

    def _b_operand(self, b: Builder, col: Index, nr: int) -> Value:
        """op(B)'s kb x nr columns from the tile's first: where they lie in B, K-contiguous
        columns of pairs (stride kc in the pack), or op(B)^T's nr-row panel."""
        if self.b_pack is None:
            first = b.index(BinaryOp.ADD, self.jc, col)
            return b_columns(b, self.g, first, nr, self.kb, self.pc)
        if self.pairs_of is not None:
            kc = self.pairs_of
            columns = self._panel(b, self.b_pack, b.index(BinaryOp.MUL, col, kc), kc, nr)
            return b.subview(columns, [0, 0], [self.kb, nr])
        kb, full_nr = self.kb, self.tile.nr
        panel = b.index(BinaryOp.DIV, col, full_nr)
        within = b.index(BinaryOp.REM, col, full_nr)
        b_start = b.index(
            BinaryOp.ADD, b.index(BinaryOp.MUL, panel, b.index(BinaryOp.MUL, kb, full_nr)), within
        )
        bp = self._panel(b, self.b_pack, b_start, full_nr, kb)
        return b.subview(bp, [0, 0], [nr, "?"])

    def _panel(self, b: Builder, buffer: Value, start: Value, width: int, cols: Index) -> Value:
        """The `width x cols` panel at `start` of a packing buffer (column stride `width`)."""
        size = b.index(BinaryOp.MUL, cols, width)
        flat = b.subview(buffer, [start], [size])
        return b.add(Expand, source=flat, mode=0, shape=[width, cols])
