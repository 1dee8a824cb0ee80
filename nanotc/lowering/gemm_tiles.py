"""gemm -> loops of register-tile microkernels (`tile.gemm`).

C (M x N) is covered column block by column block (nr columns: the B panel is reused from
L1 by every row tile under it), and within a block row tile by row tile (mr rows). Remainders:

- rows: with M static, one more tile whose rows beyond M are masked (`rows` < mr); with M
  dynamic, one kernel masked to min(mr, M - row) rows for all row tiles (fewer kernels to
  compile; a masked load costs what a plain one does where masks are k registers);
- columns: smaller kernels (fewer accumulators) for the last N mod nr columns. With N static
  that is one kernel of exactly that width; with N dynamic, a half-width kernel (when the
  remainder allows) and a one-column kernel in a loop cover any remainder.

Gemms with floating-point outputs of 32 or 64 bits take this path; others keep the plain loop
nest of the LLVM backend.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from nanotc.ir.builder import Builder
from nanotc.ir.core import Instruction, Region
from nanotc.ir.instructions import BinaryOp, CmpCond, Gemm, Transpose
from nanotc.ir.tile import TileGemm, TileLineLead, TileMin, TilePack, TileRowDots
from nanotc.ir.types import INDEX, MemRefType, ScalarType
from nanotc.ir.values import Constant, Value, is_literal
from nanotc.lowering.choices import (
    DEFAULT_OPTIONS,
    DIRECT,
    MAX_TILE_EXTENT,
    CompileOptions,
    register_tile_for,
)
from nanotc.lowering.choices import signature as gemm_signature
from nanotc.lowering.gemm_pairs import dot_pairs, packs_a_pairs, tiles_on_pairs
from nanotc.lowering.nanokernel import (
    RESIDENT_A_MIN_K,
    resident_pairs_fit,
    row_stride_is_unit,
)
from nanotc.lowering.prefetch import (
    left_to_hardware,
    member_bytes,
    memory_bound,
    on_group_views,
)
from nanotc.lowering.register_tile import (
    RegisterTile,
    TileModel,
    a_stays_in_l1,
    choose,
    choose_narrow,
    choose_whole_columns,
)
from nanotc.targets import Target

NANOKERNEL_TYPES = (ScalarType.F32, ScalarType.F64)
DOT_ROWS = 4  # C rows past the last whole vector left to tile.row_dots, at most
DOT_DEPTH = 64  # the least K for them
DOT_PACK_COLUMNS = 32  # the least N for which C's rows gathered from A's columns are dots
MIN_PEELED_LOOP = 3  # full column blocks from which the first leaves their loop
SINGLE_COLUMN_VECTORS = 4
"""The least vectors of the direct path's one-column tiles of a run-time N (`tile_block`):
its tiles of 2 vectors kept 2 FMA chains, and each single column reads all of A. f32 `.n.n`
at run-time sizes, one thread, us (2 vectors, 4, 8): 256x4x256 20.1, 14.3, 13.0;
1000x3x100 22.0, 16.8, 15.9; 20000x3x8 39.3, 31.6, 29.9; 256x1x256 5.2, 4.2, 3.9; 64x5x64
2.0, 1.9, 2.6 (8 vectors mask most of 128 rows); 100^3 16.5, 16.7, 16.3. Only where masked
stores cost what plain ones do (k registers): on AVX2 LLVM merged such a tile's unmasked
whole-tile stores into its `vmaskmovps` ones (`NanokernelEmitter._whole_tile`)."""
COUNTED_COLUMNS = 4
"""The widest tiles of a run-time N's last columns, each taking its count of them at run
time (`tile.gemm ... valid`), on the direct path. Half a block and then one-column tiles had
read all of A once per column. f32 `.n.n` at run-time sizes, one thread, us, before and
after (medians of three paired runs of `bench.few_rows`): 256x4x256 17.4, 6.9; 1000x3x100
16.7, 10.1; 1000x8x100 23.2, 18.5; but 256x6x256 8.0, 11.4 (the half block had fit those
six). Counted tiles of 6 columns ran 1.2-1.5x slower on 2 to 4 and on 8 columns."""
MIN_LINED_UP_VECTORS = 32  # vectors of C's rows from which its tiles start on A's lines
MIN_LINED_UP_DEPTH = 64  # and the least K for it
MEMBER_NARROW_K = 16  # the least K of a member whose tiles `member_tile_model` narrows
COLUMN_A_LOADS_PER_LINE = 3.6  # the most a member's tile of whole columns makes (`reads_a_seldom`)
Index = int | Value  # a static position or size, or an index value


def supported(g: Gemm) -> bool:
    """Float gemms with f32/f64 outputs; an atomic one needs a literal beta (its epilogue is
    specialised for it)."""
    types = (g.a.type, g.b.type, g.c.type)
    floats = all(isinstance(t, MemRefType) and t.element.is_float for t in types)
    atomic_ok = not g.atomic or isinstance(g.beta, Constant)
    return floats and g.c.type.element in NANOKERNEL_TYPES and atomic_ok


def gemm_extents(g: Gemm) -> tuple[int | None, int | None, int | None]:
    """Static M, N, K (None where dynamic)."""
    m, n = g.c.type.shape
    a_shape = g.a.type.shape
    k = a_shape[0] if g.trans_a is Transpose.T else a_shape[1]
    return m, n, k


def extent_values(b: Builder, g: Gemm) -> tuple[Index, Index, Index]:
    """M, N, K: the static ones as numbers, the dynamic ones read by `size` instructions."""
    m, n, k = gemm_extents(g)
    return (
        m if m is not None else b.size(g.c, 0),
        n if n is not None else b.size(g.c, 1),
        k if k is not None else b.size(g.a, 0 if g.trans_a is Transpose.T else 1),
    )


MicroFactory = Callable[[Builder, "Index", "Index", "Index", int, int], None]
"""Emits one microkernel: (builder, row, col, rows, mr, nr)."""
CountedMicro = Callable[[Builder, "Index", "Index", "Index", int, int, "Index | None"], None]
"""Emits one microkernel of a run-time count of its nr columns: (builder, row, col, rows,
mr, nr, count), the columns past the count repeating the last one (`tile.gemm ... valid`)."""


def tile_gemm(
    g: Gemm, target: Target, options: CompileOptions = DEFAULT_OPTIONS
) -> list[Instruction]:
    reserved = tile_reserved(g, target)
    extents = gemm_extents(g)
    sig = gemm_signature(g, DIRECT, extents, reserved)
    dots = dot_rows(g, target)
    if not dots:
        choice = options.choice(sig)
        tuned = None if choice is None else choice.tile
        resident = resident_pairs_tile(g, target, reserved, members=tuned is not None)
        if resident is not None and tuned in (None, (resident.mv, resident.nr)):
            micro = direct_micro(g, resident=True)
            return tile_output(g.c, extents, target, micro, reserved, resident)
        model = member_tile_model(g, target)
        tile = register_tile_for(options, sig, target, g.c.type.element, extents, reserved, model)
        if packs_a_pairs(g, target, tile, extents):
            m, n, k = extents
            assert m is not None and n is not None and k is not None
            cover = lambda b, micro: tile_block(b, tile, m, n, micro)  # noqa: E731
            return tiles_on_pairs(g, tile, (m, n, k), cover)
        once = fetches_a_once(g, target, tile)
        peel = once and peels_first_block(extents[1], tile)
        micro = direct_micro(g, once, peel)
        half_tail = not dot_pairs(g, target)
        lined_up = g.a if lines_up_rows(g, target, tile) else None
        single = SINGLE_COLUMN_VECTORS if half_tail and target.masked_memory else 0
        # an atomic tile would add its repeated columns twice
        counted = micro if half_tail and not g.atomic else None
        return tile_output(g.c, extents, target, micro, reserved, tile, peel, half_tail,
                           lined_up, single, counted)  # fmt: skip
    tiled = direct_model_extents(g, target)
    tile = register_tile_for(options, sig, target, g.c.type.element, tiled, reserved)
    return _tiles_and_row_dots(g, tile, direct_micro(g), tiled)


def member_tile_model(g: Gemm, target: Target) -> TileModel:
    """The tile model of the direct path: `choose`, or, for a batch member picked by the
    group id (its operands arrive from memory) whose C's rows are one whole vector, with K
    from MEMBER_NARROW_K, the tiles of at most the target's `member_tile_columns`. From
    memory such members ran faster in K-looped tiles of 8 columns than in one tile over more
    (Zen 4, one thread, in one process): f32 16x9x16 to 16x15x16 1.14-1.65x (two threads,
    16x12x16 1.29x), 16x12x20 1.25x, 16x10x24 1.11x, 16x14x32 1.34x, 16x32x16 1.19x, 16^3
    1.01-1.04x, 16x24x16 0.99x; f64 8x12x16 1.04-1.06x, 8x16x16 1.04x, 8x14x24 1.11x. Not
    at K = 8 (1.00-1.02x) or 12 (0.99-1.11x), nor with fewer rows than a vector (f32
    12x12x16, 14x12x16, 10x16x24, 12x14x20: 0.98-1.01x), nor from L2 (0.99-1.01x:
    loop-indexed members keep `choose`). bf16 members were not measured and keep it too.

    A member that needs more bytes than it computes (`prefetch.memory_bound`) takes the tile
    of `choose_whole_columns` where that reads A seldom enough (`reads_a_seldom`): where
    `choose`'s tile would loop over row blocks, one column of C at a time, all of its rows,
    if such a tile fits. Its reads of A and C then run in memory order, which the hardware
    prefetchers stream (and, from a quarter of L1 up, `lowering.prefetch` too). From memory
    (Zen 4, one thread, in one process) against `choose`'s tiles looping over rows,
    streamed, members under a quarter of L1, left to the hardware prefetchers in whole
    columns, on line-aligned operands: f32 192x2x4 1.58x, 128x4x8 1.54x, 160x4x4 1.39x,
    96x9x4 1.33x, 128x6x9 1.33x, 128x8x4 1.27x, 128x3x9 1.44x; f64 96x3x4 1.61x, 80x3x9
    1.48x, 112x2x4 1.47x, 80x6x4 1.32x, 48x9x4 1.32x, 64x3x9 1.38x, 64x8x4 1.23x; two
    threads 1.09-1.15x. With numpy's placement (16 bytes past a line), in two processes
    each: f32 160x4x4 1.44-1.47x, 128x3x9 1.25-1.27x, 128x4x8 1.16-1.21x, 128x6x9 1.10x; f64
    80x6x4 1.25-1.30x, 64x3x9 1.21-1.23x, 64x8x4 1.15-1.17x; two threads f32 160x4x4 1.10x,
    128x3x9 1.07x, f64 80x6x4 1.04x, 128x4x8 1.01x, f32 128x6x9 0.88-1.02x (3.5 loads a
    line, at the limit's edge). bf16 into f32 (line-aligned / numpy's placement): 128x6x8
    1.09x / 1.26x, 128x4x8 1.19x / 1.28x, 160x4x4 1.29x / 1.27x, 192x4x8 1.15x / 1.11x,
    128x3x9 1.29x / 1.33x, 192x2x4 1.11x / 1.18x; f16: 160x4x4 1.34x / 1.38x, 192x2x4 1.60x
    / 1.40x. Two columns a tile ran 0.75-0.94x of one on line-aligned f32 and f64 operands
    (f64 80x6x4 1.12x), 0.97-1.09x with numpy's placement. Larger members, streamed either
    way (numpy's placement / line-aligned): f64 128x3x9 1.38x / 1.05x, 128x4x8 1.24x /
    1.07-1.09x, 96x6x6 1.14x / 1.10x, 96x8x4 1.10x / 1.14x, 192x2x4 1.05-1.10x / 1.16-1.18x;
    f32 256x4x4 1.13x / 1.05x, 256x6x6 1.11x / 1.15x. Not where the column would load A
    often (f32 128x16x16 0.73x: 7.5 loads a line), nor where the tile would not loop over
    rows: one column at a time is then bound by the FMA latency (f32 35x9x35 0.60x, 56x9x9
    0.86x, f64 20x9x20 0.67x). An f64 gemm.n.n member too tall for one column takes pairs
    of columns where C is wide and K deep enough (`register_tile.takes_column_pairs`)."""
    m, n, k = gemm_extents(g)
    element, columns = g.c.type.element, target.member_tile_columns
    same = g.a.type.element is g.b.type.element is element
    whole_vector = m == target.lanes(element)
    deep = k is not None and k >= MEMBER_NARROW_K
    wide = n is not None and n > columns > 0
    if on_group_views(g) and same and whole_vector and deep and wide:
        return choose_narrow(columns)
    if on_group_views(g) and memory_bound(g, target) and reads_a_seldom(g, target):
        plain = g.trans_a is Transpose.N and g.trans_b is Transpose.N
        pairs = same and plain and element is ScalarType.F64
        return partial(choose_whole_columns, pairs_when_tall=pairs)
    return choose


def reads_a_seldom(g: Gemm, target: Target) -> bool:
    """Whether a tile of C's whole columns loads A's vectors at most COLUMN_A_LOADS_PER_LINE
    times per cache line of the member (A, B and C): it reads A once for each column of C,
    and where A's columns do not start on a line each of those loads touches two. From
    memory with numpy's placement (16 bytes past a line), against the row-looped tiles
    streamed: f32 96x9x9 and 96x9x8 (4.3 and 4.1 loads a line), f64 48x9x8 (3.9) and f16
    128x6x8 (4.7) ran 0.84-1.02x, though f32 and f64 1.2x on line-aligned operands; f32
    128x6x9 (3.5) 1.10x and 1.32x, the others measured (1.0-3.3 loads a line) 1.06-1.54x
    (one process of f64 64x3x9 0.84x) and 1.09-1.61x. bf16 tiles on vdpbf16ps load A once
    per pair of K."""
    m, n, k = gemm_extents(g)
    if m is None or n is None or k is None:
        return False
    vectors = -(-m // target.lanes(g.c.type.element))
    steps = -(-k // 2) if dot_pairs(g, target) else k
    return vectors * n * steps <= COLUMN_A_LOADS_PER_LINE * member_bytes(g) / target.line_bytes


def resident_pairs_tile(
    g: Gemm, target: Target, reserved: int, members: bool = False
) -> RegisterTile | None:
    """The one tile over all of C (or over blocks of MAX_TILE_EXTENT of its columns) of a
    static bf16 gemm on vdpbf16ps that holds A's K pairs
    in registers (`nanokernel.resident_pairs_fit`), where A's rows are contiguous and C
    is wider than the tile model's choice: each column tile of those interleaves all of A
    again (a tuned tile other than this one replaces it). Batches in L2 on Zen 4 (one
    thread, in one process against the model's tiles): 56x9x9 1.16-1.21x (two threads
    1.25x), 56x9x8 1.21x, 35x9x9 1.19x, 48x12x8 1.20x, 64x10x8 1.17x, 32x24x12 1.14x,
    40x16x6 1.29x, 64x16x4 1.30x, 16x32x4 1.26x, 24x16x10 1.09x. Where one tile covers C
    already, grouping its columns gained nothing (16^3 1.04x, 20x9x20 0.89x). Not for a
    batch member picked by the group id, which `lowering.prefetch` takes to arrive from
    memory: from memory the same shapes ran 0.82-1.47x (35x9x9 0.80-0.88x, 48x12x8
    0.90-0.95x; 64x10x8 1.07-1.46x), no rule found for which, so there it is a tuned
    choice only (`members`: the tuner times it)."""
    m, n, k = gemm_extents(g)
    if m is None or n is None or k is None or g.atomic:
        return None
    if not dot_pairs(g, target) or (on_group_views(g) and not members):
        return None
    if n <= choose(target, g.c.type.element, m, n, k, reserved, small_gemm_rules=False).nr:
        return None
    if not row_stride_is_unit(g.a.type, g.trans_a):
        return None
    if not resident_pairs_fit(target, (m, n, k), reserved):
        return None
    lanes = target.lanes(ScalarType.F32)
    # a tile names at most MAX_TILE_EXTENT columns (as a tuned choice must): a wider C takes
    # column blocks of such tiles, each interleaving A once
    return RegisterTile(-(-m // lanes), min(n, MAX_TILE_EXTENT), lanes)


def direct_micro(g: Gemm, a_once: bool = False, peeled: bool = False,
                 resident: bool = False) -> MicroFactory:  # fmt: skip
    """The direct path's `tile.gemm` on g's operands. With `a_once` (`fetches_a_once`), the
    tiles of the column blocks after the first find A in L1: those emitted on their own
    (the remainder's), and those of the loop over the blocks where the first block is
    `peeled` out of it. `resident`: the tiles hold A's K pairs (`resident_pairs_tile`)."""

    def micro(b: Builder, row: Index, col: Index, rows: Index, mr: int, nr: int,
              count: Index | None = None) -> None:  # fmt: skip
        looped = not isinstance(col, int)
        first = col == 0 if not looped else not peeled
        b.add(
            TileGemm, trans_a=g.trans_a, trans_b=g.trans_b, atomic=g.atomic, alpha=g.alpha,
            a=g.a, b=g.b, beta=g.beta, c=g.c, row=row, col=col, rows=rows, mr=mr, nr=nr,
            valid_cols=count, fetched=a_once and not first, resident=resident,
        )  # fmt: skip

    return micro


def peels_first_block(n: int | None, tile: RegisterTile) -> bool:
    """Whether the first column block leaves the loop over the blocks, so that the loop's
    blocks find A in L1 (`fetches_a_once`): where at least MIN_PEELED_LOOP full blocks
    make the loop. The peeled block adds its tiles' code (cold compiles of f64 20x9x20
    60 -> 83 ms, f32 56x9x9 with two tiles a block 84 -> 138 ms); for two full blocks
    that bought nothing measurable (Zen 3, paired against the two in their loop: f32 and
    f64 16^3 and f64 8^3, in L2 and from memory, 0.96-1.04x, one run 1.09x) and cost the
    fused example 134 -> 166 ms."""
    return n is not None and n // tile.nr >= MIN_PEELED_LOOP


def fetches_a_once(g: Gemm, target: Target, tile: RegisterTile) -> bool:
    """Whether only C's first column block of tiles asks for A's lines, the later ones
    finding A in L1 (`tile.gemm.fetched`): a static A of contiguous rows within half of L1
    (`register_tile.a_stays_in_l1`), K short of RESIDENT_A_MIN_K (longer K loops over such
    an A ask for none of it, `nanokernel.resident_a`), more than one column block, and K
    loops that prefetch at all (not a gemm left to the hardware prefetchers). The first
    block's prefetches keep running past A into the next batch member's, which the
    memory-bound batches use; every later block's took a load slot per line for nothing.
    Zen 3, paired against every block asking: W2's f64 20x9x20 in L2 1.09-1.14x (five
    blocks, four of 20 x 2 tiles and one of 20 x 1); f32 56x9x9, 16^3 and 20x9x20, f64
    56x9x9, 16^3 and 8^3, in L2 and from memory, 0.97-1.06x (f32 56x9x9 from memory
    1.03x and 1.17x). The remainder block first instead (emitted on its own anyway, so no
    code is added) ran 0.72-0.92x from memory: its narrow tiles then wait for A."""
    m, n, k = gemm_extents(g)
    if m is None or n is None or k is None or k >= RESIDENT_A_MIN_K or n <= tile.nr:
        return False
    in_l1 = a_stays_in_l1(target, g.a.type.element, m, k)
    contiguous = row_stride_is_unit(g.a.type, g.trans_a)
    return in_l1 and contiguous and not left_to_hardware(g, target, tile.mr)


def columns_share_line_offset(g: Gemm, target: Target) -> bool:
    """Every column of A starts at the same offset in its cache line, and so does every
    column of C: A's rows adjacent, column strides of whole cache lines."""
    size, line = g.a.type.element.size, target.line_bytes
    return (
        row_stride_is_unit(g.a.type, g.trans_a)
        and g.trans_a is Transpose.N
        and all(
            isinstance(stride, int) and stride * size % line == 0
            for stride in (g.a.type.stride[1], g.c.type.stride[1])
        )
    )


def lines_up_rows(g: Gemm, target: Target, tile: RegisterTile) -> bool:
    """Whether the row tiles start where A's columns cross a cache line (`tile_block`'s
    `lead`): a static M of at least MIN_LINED_UP_VECTORS vectors whose columns share their
    offset in a line, K at least MIN_LINED_UP_DEPTH. numpy starts a large array 16 bytes
    into a line, where every vector of A spans two lines: A read from L2 once per column
    block, f32 784x512x256 and 784x512x128 ran 1.07-1.10x faster on a line. The rows before
    the first line and after the last whole tile take masked one-vector tiles, which the 16
    vectors of M = 256 did not repay: lined up, against not, A 16 bytes past a line, f32
    3136x64x64 1.05-1.07x, 784x512x256 1.05x, 512x128x128 1.03-1.04x, 1024x14x64 1.05x,
    384x256x128 0.98x, 256x256x256 0.94-0.97x; f64 512x128x128 1.07-1.08x, 1024x256x128
    1.14x. Shallower K was not measured: the tall batch members of K 3 to 9, whose tiles
    `member_tile_model` chose on numpy's placement, keep them. Nor was an A of another
    type than C's."""
    m, _, k = gemm_extents(g)
    if m is None or k is None or k < MIN_LINED_UP_DEPTH:
        return False
    element = g.c.type.element
    measured = element in NANOKERNEL_TYPES and g.a.type.element is element
    tall = m // tile.lanes >= MIN_LINED_UP_VECTORS
    return measured and tall and columns_share_line_offset(g, target)


def dot_rows(g: Gemm, target: Target) -> int:
    """The rows of C left to `tile.row_dots` (0: none): a static M's last M mod lanes rows
    when they are at most DOT_ROWS, for one floating-point type throughout, K at least
    DOT_DEPTH (the sums across lanes at the end then cost little) and op(B)'s columns
    contiguous along K."""
    if not _takes_row_dots(g):
        return 0
    m = g.c.type.shape[0]
    rows = m % target.lanes(g.c.type.element)
    return rows if rows <= DOT_ROWS and rows < m else 0


def rows_as_dots(g: Gemm) -> bool:
    """Whether every row of C is a dot product (`tile_row_dots`): a static M of at most
    DOT_ROWS, on `dot_rows`'s terms, where a register tile's vectors would hold M useful
    lanes and read B by one broadcast per column and k step (f32, one thread: batched
    1 x 64 x 64 members 8x faster, 1 x 256 x 256 4x; .t.n 1 x 1 x 5000 5x, 1 x 64 x 4096
    3x). Rows of A lying lda apart (.n, M above 1) are gathered by the pack, which pays over
    DOT_PACK_COLUMNS columns or more (f32 .n.n 4 x 64 x 1024 2.4x, 2 x 16 x 64 1.06x; 4 x 4 x
    5000 0.63x, where the tiles read A's short columns as they lie)."""
    if not _takes_row_dots(g):
        return False
    m, n = g.c.type.shape
    gathered = g.trans_a is Transpose.N and m > 1
    return m <= DOT_ROWS and (not gathered or n >= DOT_PACK_COLUMNS)


def _takes_row_dots(g: Gemm) -> bool:
    m, n, k = gemm_extents(g)
    if m is None or n is None or k is None or k < DOT_DEPTH:
        return False
    return row_dots_operands(g)


def row_dots_operands(g: Gemm) -> bool:
    """Whether `tile.row_dots` takes g's operands: one floating-point type throughout, op(B)'s
    columns contiguous along K, and no atomic update of C."""
    if g.atomic or not (g.a.type.element is g.b.type.element is g.c.type.element):
        return False
    return g.b.type.stride[0 if g.trans_b is Transpose.N else 1] == 1


def dot_columns(target: Target, rows: int) -> int:
    """The columns of one `tile.row_dots` pass over K: as many accumulators (one per row and
    column) as the vector registers hold beside op(A)'s rows, a vector of B and one spare,
    and no more than L1 has ways. Columns a multiple of 4 KB apart fall into one L1 set,
    and 29 of them evicted each other's lines fetched ahead (f32 `.t.n` 1 x 64 x 4096,
    one thread, on the AMX Xeon's 12-way L1: 29 columns a pass 20.4-22.9 us, 1.3-1.5x
    numpy; 12 columns 13.8-18.3 us, 1.0-1.2x; 1 x 64 x 4100 and 1 x 29 x 4096 the same
    either way)."""
    registers = (target.vector_registers - rows - 2) // rows
    return max(1, min(registers, target.l1_ways))


def tile_row_dots(g: Gemm, target: Target) -> list[Instruction]:
    """All of C as dot products along K (`rows_as_dots`): op(A)'s rows packed whole (unless
    read in place), then a loop over blocks of `dot_columns` columns of C."""
    m, n, k = gemm_extents(g)
    assert m is not None and n is not None and k is not None
    b = Builder(Region())
    rows = (
        None
        if reads_rows_in_place(g, m)
        else b.alloca(MemRefType.packed(g.c.type.element, [m * k]))
    )
    hook = row_dots_after(b, g, (g.a, g.b, g.c, rows), (0, 0, k), g.beta)
    width = dot_columns(target, m)
    whole = n - n % width
    if whole > width:
        with b.for_(0, whole, width) as (body, col):
            hook(body, col, width)
    elif whole:
        hook(b, 0, width)
    if whole < n:
        hook(b, whole, n - whole)
    return b.region.instructions


def _tiles_and_row_dots(
    g: Gemm, tile: RegisterTile, micro: MicroFactory, tiled: tuple[int, int, int]
) -> list[Instruction]:
    """Register tiles over C's first `tiled` M rows; per column block of them, the rows
    after as dot products, while that block's B panel is in cache."""
    (first, n, k), m = tiled, g.c.type.shape[0]
    b = Builder(Region())
    rows = b.alloca(MemRefType.packed(g.c.type.element, [(m - first) * k]))
    hook = row_dots_after(b, g, (g.a, g.b, g.c, rows), (first, 0, k), g.beta)
    tile_block(b, tile, first, n, micro, hook)
    return b.region.instructions


def restaged(g: Gemm, **operands: Value | Transpose | bool) -> Gemm:
    """A gemm like g with some of its operands (or transposes, atomicity) replaced."""
    fields = dict(trans_a=g.trans_a, trans_b=g.trans_b, alpha=g.alpha, a=g.a, b=g.b,
                  beta=g.beta, c=g.c, atomic=g.atomic)  # fmt: skip
    staged = Builder(Region())
    staged.gemm(**{**fields, **operands})  # type: ignore[arg-type]
    (gemm,) = staged.region.instructions
    assert isinstance(gemm, Gemm)
    return gemm


def reads_rows_in_place(g: Gemm, rows: int) -> bool:
    """Whether `tile.row_dots` reads `rows` rows of g's op(A) where they lie, unpacked: they
    run along K in memory (a column-major A transposed; one row of a row-major A)."""
    if g.trans_a is Transpose.T:
        return g.a.type.stride[0] == 1
    return rows == 1 and g.a.type.stride[1] == 1


def row_dots_after(
    b: Builder, g: Gemm, views: tuple[Value, Value, Value, Value | None],
    at: tuple[int, Index, Index], beta: Value,
) -> ColumnHook:  # fmt: skip
    """Packs the rows of op(A) (`views`: A, B and C of one K block, and the buffer; no
    buffer where `reads_rows_in_place`) from row `at[0]` over the K block at `at[1]` of
    length `at[2]`, and returns the column hook that takes those rows of C as dot
    products."""
    a, b_view, c, buffer = views
    first = at[0]
    dots = c.type.shape[0] - first
    rows = rows_for_dots(b, g.trans_a, (a, buffer), at, dots)

    def hook(body: Builder, col: Index, width: int) -> None:
        body.add(TileRowDots, trans_b=g.trans_b, alpha=g.alpha, a=rows, b=b_view, beta=beta,
                 c=c, row=first, col=col, rows=dots, cols=width)  # fmt: skip

    return hook


def rows_for_dots(
    b: Builder, trans_a: Transpose, a: tuple[Value, Value | None], at: tuple[int, Index, Index],
    dots: Index,
) -> Value:  # fmt: skip
    """What `tile.row_dots` reads `dots` rows of op(A) from, from row `at[0]` over the K
    block at `at[1]` of length `at[2]` (`a`: A and the buffer): the buffer, packed here; with
    no buffer (`reads_rows_in_place`), A's columns (K x rows) for a transposed A, else the
    row as a vector."""
    source, buffer = a
    first, pc, kb = at
    if buffer is not None:
        b.add(TilePack, trans=trans_a, source=source, row=first, col=pc, rows=dots, cols=kb,
              target=buffer, panel=1)  # fmt: skip
        return buffer
    if trans_a is Transpose.T:
        return b.subview(source, [pc, first], [kb, dots])
    return b.subview(source, [first, pc], [None, kb])


def stored(trans: Transpose, row: Index, col: Index) -> list[Index]:
    """(row, col) of op(X) as (row, col) of X."""
    return [col, row] if trans is Transpose.T else [row, col]


def epilogue_registers(alpha: Value, beta: Value) -> int:
    """Vector registers the epilogue keeps live through the K loop: broadcasts of an alpha
    other than 1 and of a beta other than 0 or 1."""
    alpha_one = is_literal(alpha, 1)
    beta_simple = isinstance(beta, Constant) and beta.value in (0, 1)
    return int(not alpha_one) + int(not beta_simple)


def tile_reserved(g: Gemm, target: Target) -> int:
    """Vector registers the register tiles of `g` leave free, on the direct and batch-reduce
    paths: the tuner keys its choices by this count, so it must be the lowering's."""
    return epilogue_registers(g.alpha, g.beta) + operand_registers(g, target)


def direct_model_extents(g: Gemm, target: Target) -> Extents:
    """The extents the direct path's tile model is asked about: C's rows without those
    left to row dot products."""
    m, n, k = gemm_extents(g)
    dots = dot_rows(g, target)
    return (m - dots, n, k) if dots and m is not None else (m, n, k)


def operand_registers(g: Gemm, target: Target) -> int:
    """Vector registers a K step needs beside the tile to bring in its operands: bf16 pairs
    for vdpbf16ps need the interleave's index vector and a second half, widened 16-bit
    operands a temporary, and widened bf16 the mask of its lanes' high halves as well
    (held for the whole K loop: `NanokernelEmitter._bf16_high_halves`)."""
    a, b = g.a.type.element, g.b.type.element
    if a is b is ScalarType.BF16 and target.bf16_gemm_by_dot:
        return 2
    if ScalarType.BF16 in (a, b) and g.c.type.element is ScalarType.F32:
        return 2
    return int(a.bits == 16 or b.bits == 16)


Extents = tuple[int | None, int | None, int | None]


def tile_output(
    c: Value,
    extents: Extents,
    target: Target,
    micro: MicroFactory,
    reserved: int = 0,
    tile: RegisterTile | None = None,
    peel_first: bool = False,
    half_tail: bool = False,
    lined_up: Value | None = None,
    single_vectors: int = 0,
    counted: CountedMicro | None = None,
) -> list[Instruction]:
    """Loops over the register tiles of C, calling `micro` for each (full and remainder);
    `reserved` vector registers stay free for the epilogue. `tile` (a tuned choice) replaces
    the analytical one. `peel_first`: the first column block outside the loop over them.
    `half_tail`: a run-time M ends in a tile of half the rows where it can. `lined_up`: the
    operand on whose vector boundaries (its lines' for vectors of a line) the row tiles of
    a static M start. `single_vectors`: the least vectors of a run-time N's one-column
    tiles (`tile_block`), and `counted` its counted tiles' microkernel."""
    m, n, k = extents
    if tile is None:
        tile = choose(target, c.type.element, m, n, k, reserved)
    b = Builder(Region())
    rows = b.size(c, 0) if m is None else m
    columns = b.size(c, 1) if n is None else n
    lead = None
    if lined_up is not None:  # a vector narrower than a line needs only the vectors' boundary
        line_lead = b.add(TileLineLead, source=lined_up)
        lead = b.index(BinaryOp.REM, line_lead, tile.lanes)
    tile_block(b, tile, rows, columns, micro, peel_first=peel_first, half_tail=half_tail,
               lead=lead, single_vectors=single_vectors, counted=counted)  # fmt: skip
    return b.region.instructions


ColumnHook = Callable[[Builder, Index, int], None]
"""Emits something for one column block: (builder, col, width)."""


def whole_blocks_end(b: Builder, m: int, start: Value, rows: int) -> Value:
    """Where the whole blocks of `rows` rows from row `start` end, within m rows."""
    blocks = b.index(BinaryOp.DIV, b.index(BinaryOp.SUB, m, start), rows)
    return b.index(BinaryOp.ADD, start, b.index(BinaryOp.MUL, blocks, rows))


def tile_block(b: Builder, tile: RegisterTile, m: Index, n: Index, micro: MicroFactory,
               after: ColumnHook | None = None, peel_first: bool = False,
               half_tail: bool = False, lead: Value | None = None,
               single_vectors: int = 0, counted: CountedMicro | None = None) -> None:  # fmt: skip
    """Cover an m x n block with register tiles of one shape and its remainder kernels (then
    `after` for each column block of them). `peel_first`: a static n's first column block
    is emitted outside the loop over the others (its tiles see column 0 as a number).
    `half_tail`: a run-time m ends in a tile of half the rows where its last rows fit
    (`_Tiler._run_time_rows`). `lead`: the rows before the first vector boundary of A's
    columns (`tile_output`), where a static m's row tiles then start
    (`_Tiler._lined_up_rows`). `single_vectors`: a run-time n's one-column tiles (and its
    counted ones) are at least that many vectors tall (`SINGLE_COLUMN_VECTORS`). `counted`:
    the microkernel of a run-time n's counted tiles (`COUNTED_COLUMNS`), where it has one."""
    tiler = _Tiler(tile, m, micro, after, half_tail, lead)
    if isinstance(n, int):
        _static_columns(b, tiler, n, peel_first)
    else:
        _dynamic_columns(b, tiler, n, tiler.taller(single_vectors), counted)


class _Tiler:
    """Emits the row tiles of one column block (then `after` for the block, if given)."""

    def __init__(self, tile: RegisterTile, m: Index, micro: MicroFactory,
                 after: ColumnHook | None = None, half_tail: bool = False,
                 lead: Value | None = None):  # fmt: skip
        self.tile = tile
        self.m = m
        self.micro = micro
        self.after = after
        self.half_tail = half_tail
        self.lead = lead

    def taller(self, vectors: int) -> _Tiler:
        """This tiler, or one of one-column tiles of `vectors` vectors where that is taller."""
        if vectors <= self.tile.mv:
            return self
        tile = RegisterTile(vectors, 1, self.tile.lanes)
        return _Tiler(tile, self.m, self.micro, self.after, lead=self.lead)

    def counting(self, counted: CountedMicro, count: Index) -> _Tiler:
        """This tiler with tiles of `counted`, of `count` columns each."""
        micro = counted_micro(counted, count)
        return _Tiler(self.tile, self.m, micro, self.after, self.half_tail, self.lead)

    def rows(self, b: Builder, col: Index, width: int) -> None:
        self._row_tiles(b, col, width)
        if self.after is not None:
            self.after(b, col, width)

    def _row_tiles(self, b: Builder, col: Index, width: int) -> None:
        mr = self.tile.mr
        if isinstance(self.m, int) and self.lead is not None:
            self._lined_up_rows(b, self.m, self.lead, col, width)
            return
        if isinstance(self.m, int):
            full, tail = divmod(self.m, mr)
            if full == 1:
                self.micro(b, 0, col, mr, mr, width)
            elif full > 1:
                with b.for_(0, full * mr, mr) as (body, row):
                    self.micro(body, row, col, mr, mr, width)
            if tail:
                lanes = self.tile.lanes
                self.micro(b, full * mr, col, tail, -(-tail // lanes) * lanes, width)
            return
        self._run_time_rows(b, col, width)

    def _lined_up_rows(self, b: Builder, m: int, lead: Value, col: Index, width: int) -> None:
        """Whole tiles from row `lead`, where A's columns cross a vector boundary, so that
        no vector of A spans two cache lines; the rows before and after them by
        `_edge_rows`."""
        mr = self.tile.mr
        end = whole_blocks_end(b, m, lead, mr)
        with b.for_(lead, end, mr) as (body, row):
            self.micro(body, row, col, mr, mr, width)
        self._edge_rows(b, m, lead, end, col, width)

    def _edge_rows(self, b: Builder, m: int, lead: Value, end: Value, col: Index,
                   width: int) -> None:  # fmt: skip
        """Rows 0 to `lead` (piece 0) and `end` to m (pieces 1, 2, ...) in masked one-vector
        tiles, from one loop: one tile's code for both (separate tiles had doubled the
        compile time of f32 3136x64x64, 52 to 114 ms)."""
        lanes = self.tile.lanes
        first = b.if_(b.cmp(CmpCond.GT, lead, Constant(0, INDEX)), returns=[INDEX])
        first.then.yield_(Constant(0, INDEX))
        assert first.otherwise is not None
        first.otherwise.yield_(Constant(1, INDEX))
        left = b.index(BinaryOp.SUB, m, end)  # fewer than a tile's rows
        vectors = b.index(BinaryOp.DIV, b.index(BinaryOp.ADD, left, lanes - 1), lanes)
        pieces = b.index(BinaryOp.ADD, vectors, 1)
        with b.for_(first.results, pieces) as (body, piece):
            at = body.if_(body.cmp(CmpCond.EQ, piece, Constant(0, INDEX)), returns=[INDEX, INDEX])
            at.then.yield_(Constant(0, INDEX), lead)
            tail = at.otherwise
            assert tail is not None
            row = tail.index(BinaryOp.ADD, end, tail.index(BinaryOp.MUL,
                             tail.index(BinaryOp.SUB, piece, 1), lanes))  # fmt: skip
            rows = tail.add(TileMin, lhs=tail.index(BinaryOp.SUB, m, row), rhs=lanes)
            tail.yield_(row, rows)
            row, rows = at.results
            self.micro(body, row, col, rows, lanes, width)

    def _run_time_rows(self, b: Builder, col: Index, width: int) -> None:
        """Row tiles of a run-time M: one kernel masked to min(mr, M - row) rows serves every
        row tile. With `half_tail`, in the widest column blocks, the last rows, where they fit
        in half the tile's vectors, take a kernel of those (one masked tile of 32 rows had run
        the FMAs of all 32 for the 4 past 96: direct f32 100^3 1.08-1.13x, 130^3 and 40^3
        1.08-1.09x, 200^3 1.07x, f64 100^3 1.07x; unchanged where M leaves no such rows).
        Each kernel costs compile time, 10-20 ms for f32 and f64 tiles: the narrower column
        blocks keep one; so do the blocked path's tiles, where the rows are a small part of a
        large M (f32 600^3 1.04x, 20-40 ms more for each dynamic gemm), and bf16 tiles on
        `vdpbf16ps` (W4's MLP kernel 233 to 320 ms with them)."""
        mr, m = self.tile.mr, self.m
        half = self.tile.mv // 2 * self.tile.lanes
        tail = fits = None
        end = m
        if self.half_tail and half and width == self.tile.nr:
            tail = b.index(BinaryOp.REM, m, mr)
            fits = b.arith(BinaryOp.AND, b.cmp(CmpCond.GT, tail, 0), b.cmp(CmpCond.LE, tail, half))
            short = b.if_(fits, returns=[INDEX])
            short.then.yield_(tail)
            assert short.otherwise is not None
            short.otherwise.yield_(b.const(0, INDEX))
            end = b.index(BinaryOp.SUB, m, short.results)
        with b.for_(0, end, mr) as (body, row):
            rows = body.add(TileMin, lhs=body.index(BinaryOp.SUB, end, row), rhs=mr)
            self.micro(body, row, col, rows, mr, width)
        if fits is not None:
            self.micro(b.if_(fits).then, end, col, tail, half, width)


def _static_columns(b: Builder, tiler: _Tiler, n: int, peel_first: bool = False) -> None:
    nr = tiler.tile.nr
    full, tail = divmod(n, nr)
    start = 0  # column blocks emitted before the loop
    if full and (peel_first or full == 1):
        tiler.rows(b, 0, nr)
        start = 1
    if full - start == 1:
        tiler.rows(b, start * nr, nr)
    elif full - start > 1:
        with b.for_(start * nr, full * nr, nr) as (body, col):
            tiler.rows(body, col, nr)
    if tail:
        tiler.rows(b, full * nr, tail)


def counted_micro(counted: CountedMicro, count: Index) -> MicroFactory:
    """`counted`'s tiles of `count` columns each."""
    return partial(_with_count, counted, count)


def _with_count(counted: CountedMicro, count: Index, b: Builder, row: Index, col: Index,
                rows: Index, mr: int, nr: int) -> None:  # fmt: skip
    counted(b, row, col, rows, mr, nr, count)


def _dynamic_columns(b: Builder, tiler: _Tiler, n: Value, singles: _Tiler,
                     counted: CountedMicro | None) -> None:  # fmt: skip
    """Full nr-wide blocks, then the remainder (< nr columns): in counted tiles where there
    are some (`_counted_columns`), else one half-width block if it fits, then single
    columns (by `singles`' tiles). Two remainder kernels keep compile time low."""
    nr = tiler.tile.nr
    full = b.index(BinaryOp.SUB, n, b.index(BinaryOp.REM, n, nr))
    with b.for_(0, full, nr) as (body, col):
        tiler.rows(body, col, nr)
    width = min(COUNTED_COLUMNS, nr - 1)
    if counted is not None and width > 1:
        _counted_columns(b, singles, n, full, width, counted)
        return
    col: Value = full
    half = nr // 2
    if half > 1:
        fits_half = b.cmp(CmpCond.GE, b.index(BinaryOp.SUB, n, full), half)
        branch = b.if_(fits_half, returns=[INDEX])
        tiler.rows(branch.then, full, half)
        branch.then.yield_(b.const(half, INDEX))
        assert branch.otherwise is not None
        branch.otherwise.yield_(b.const(0, INDEX))
        col = b.index(BinaryOp.ADD, full, branch.results)
    if nr > 1:
        with b.for_(col, n, 1) as (body, column):
            singles.rows(body, column, 1)


def _counted_columns(b: Builder, tiler: _Tiler, n: Value, start: Value, width: int,
                     counted: CountedMicro) -> None:  # fmt: skip
    """Columns `start` to n in tiles of `width` columns, the last taking the count left
    (`tile.gemm ... valid`), except that one column left over is a one-column tile's: a
    counted tile would run `width` columns of FMAs for it. Each of these tiles reads A
    once, where single columns read it once per column."""
    one_left = b.cmp(CmpCond.EQ, b.index(BinaryOp.REM, b.index(BinaryOp.SUB, n, start), width), 1)
    branch = b.if_(one_left, returns=[INDEX])
    branch.then.yield_(b.const(1, INDEX))
    assert branch.otherwise is not None
    branch.otherwise.yield_(b.const(0, INDEX))
    end = b.index(BinaryOp.SUB, n, branch.results)
    with b.for_(start, end, width) as (body, col):
        count = body.add(TileMin, lhs=body.index(BinaryOp.SUB, end, col), rhs=width)
        tiler.counting(counted, count).rows(body, col, width)
    tiler.rows(b.if_(one_left).then, end, 1)
