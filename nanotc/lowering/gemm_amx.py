"""bf16 gemm on AMX tiles (targets with `amx`): packed blocks and `tile.amx_gemm` kernels.

AMX multiplies row-major tiles; a column-major C (M x N) is the row-major C^T, so the tiles
compute C^T = op(B)^T op(A)^T: the row operand is op(B)^T (K contiguous along each row), the
VNNI operand op(A) with K pairs interleaved, and each row of a C tile is a 16-element column
segment of C. Both operands are packed into zero-padded 16-row panels in chunks of 32 K, so
every tile is a full 16 x 64 bytes and one tile configuration serves the whole kernel:

    C := beta * C   (not for beta 0 or 1: beta 0 has the first K block write C unread)
    for pc in K step kc:
      for ic in M step mc:
        pack op(A)[ic:, pc:] as AMX VNNI panels           (mc x kc: 1 MiB, kept in L2)
        for jc in N step nc:
          pack op(B)[pc:, jc:]^T as AMX row panels        (nc x kc: 128 KiB)
          for each 32 x 32 block of C: tile.amx_gemm (2 x 2 accumulator tiles)

Each operand is read from memory once per K block (B once per mc rows), and neither packed
block leaves L2: with op(B) packed whole per K block instead (1024 columns, 2 MiB), its panels
went out to L3 and back, and the MLP layers ran 1.09-1.15x slower.

Small static gemms (C at most 64 x 64, K at most 128) skip the blocking and most of the
packing, whose cost would dwarf their few tile multiplies: only op(A) is interleaved into
VNNI panels, op(B) is loaded into row tiles where it lies (its K values contiguous, K even),
and `tile.amx_small_gemm` uses tiles of exactly the gemm's shape, accumulating in C's own
tiles.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass

from nanotc.ir.builder import Builder
from nanotc.ir.core import Function, Instruction, Region, walk
from nanotc.ir.instructions import BinaryOp, CmpCond, Gemm, Transpose
from nanotc.ir.tile import TileAmxGemm, TileAmxSmallGemm, TileMin, TilePackAmx, TileScale
from nanotc.ir.types import INDEX, MemRefType, ScalarType
from nanotc.ir.values import Constant, Value, is_literal
from nanotc.lowering.gemm_blocked import block_extent
from nanotc.lowering.gemm_tiles import Index, extent_values, gemm_extents, supported
from nanotc.targets import Target

PANEL = 16  # rows of an AMX tile
CHUNK = 32  # bf16 values of K in one tile row (64 bytes)
BLOCK = 32  # rows and columns of C per kernel: 2 x 2 accumulator tiles
# kc: a C block is loaded and stored once per K block, so long K blocks pay (1024 ran 1.06-1.15x
# faster than 512 on the MLP layers, although the panel pairs then stream from L2); mc: B is
# packed once per mc rows (512 ran 1.1-1.2x faster than 384); nc 64 ran as fast as 32 and
# 1.03-1.1x faster than 96 and 128
KC, MC, NC = 1024, 512, 64


SMALL = 32 * 32 * 32  # static gemms below this many multiply-adds use vector nanokernels
SMALL_C, SMALL_K = 64, 128  # the largest C extents and K of tile.amx_small_gemm
TILE_REGISTERS = 8
Shape = tuple[int, int]  # a tile's rows and bytes per row
FULL: Shape = (PANEL, 2 * CHUNK)


def amx_applies(g: Gemm, target: Target) -> bool:
    """bf16 A and B into an f32 or bf16 C whose columns are contiguous (a tile's rows are
    columns of C: a row stride other than 1, known or not, once had its tiles store C's
    columns as if contiguous, over the rows between), not atomic, and either small enough
    for exact tiles or not so small that packing into full 16 x 16 tiles costs more than
    vector nanokernels would."""
    bf16 = g.a.type.element is ScalarType.BF16 and g.b.type.element is ScalarType.BF16
    output = g.c.type.element in (ScalarType.F32, ScalarType.BF16) and g.c.type.stride[0] == 1
    fits = small_tiles(g) is not None or not _tiny(g)
    return target.amx and bf16 and output and not g.atomic and fits


def _tiny(g: Gemm) -> bool:
    """Static and below SMALL multiply-adds."""
    m, n, k = gemm_extents(g)
    return m is not None and n is not None and k is not None and m * n * k < SMALL


@dataclass(frozen=True)
class SmallTiles:
    """The tiles of `tile.amx_small_gemm` for an m x n x k gemm. Accumulators are `width`
    rows of C wide (column segments of C) at `m_offsets`, the last one shifted back to end at
    m: it overlaps its neighbour, so all share one shape, and the rows both compute get the
    same values, stored twice. N goes in blocks of 16 columns with an exact tail, K in
    chunks of 32 with an exact tail (rounded up to a K pair)."""

    m: int
    n: int
    k: int

    @property
    def width(self) -> int:
        return min(PANEL, self.m)

    @property
    def m_offsets(self) -> list[int]:
        return [*range(0, self.m - self.width, PANEL), self.m - self.width]

    @property
    def n_blocks(self) -> list[tuple[int, int]]:
        return [(n0, min(PANEL, self.n - n0)) for n0 in range(0, self.n, PANEL)]

    @property
    def chunk_bytes(self) -> list[int]:
        """Bytes of K per chunk, the row length of the row tiles."""
        return [
            2 * (x + x % 2) for x in (min(CHUNK, self.k - k0) for k0 in range(0, self.k, CHUNK))
        ]

    def registers(self) -> Counter[Shape]:
        """Tile registers needed per shape: the most tiles of that shape live at once."""
        need: Counter[Shape] = Counter()
        for _, nr in self.n_blocks:
            for k_bytes in self.chunk_bytes:
                live = Counter({(nr, 4 * self.width): len(self.m_offsets)})
                live[(nr, k_bytes)] += 1
                live[(k_bytes // 4, 4 * self.width)] += 1
                need |= live  # per shape, the larger count
        return need

    def batch_registers(self) -> Counter[Shape]:
        """Tile registers for the batch-reduce form: every accumulator live across the whole
        loop, the operand tiles one at a time."""
        need: Counter[Shape] = Counter()
        for _, nr in self.n_blocks:
            need[(nr, 4 * self.width)] += len(self.m_offsets)
        operands: Counter[Shape] = Counter()
        for _, nr in self.n_blocks:
            for k_bytes in self.chunk_bytes:
                live: Counter[Shape] = Counter()
                live[(nr, k_bytes)] += 1  # the two may have one shape: then two registers
                live[(k_bytes // 4, 4 * self.width)] += 1
                operands |= live
        return need + operands


def amx_batch_tiles(g: Gemm) -> SmallTiles | None:
    """The exact tiles of a batch-reduce gemm whose accumulators all fit the tile registers
    at once, whose op(B) columns are row tiles as they lie, and whose C is f32 (vector
    nanokernels' batch-reduce takes the rest)."""
    tiles = small_tiles(g)
    if tiles is None or g.c.type.element is not ScalarType.F32 or not _rows_in_place(g, tiles.k):
        return None
    return tiles if tiles.batch_registers().total() <= TILE_REGISTERS else None


def small_tiles(g: Gemm) -> SmallTiles | None:
    """The exact tiles for a static gemm within the small limits whose C has contiguous
    columns (they are tile rows); None for others."""
    m, n, k = gemm_extents(g)
    if m is None or n is None or k is None or g.c.type.stride[0] != 1:
        return None
    return SmallTiles(m, n, k) if m <= SMALL_C and n <= SMALL_C and k <= SMALL_K else None


class AmxPath(enum.Enum):
    EXACT = "exact"  # tile.amx_small_gemm
    PACKED = "packed"  # tile.amx_gemm on packed blocks


def amx_paths(func: Function, target: Target) -> dict[int, AmxPath]:
    """How each of a function's gemms uses AMX, by id (absent: it does not). LLVM configures
    the tile shapes once per function, so each tile register keeps one shape throughout:
    counted per shape, all AMX gemms of a function share eight registers. Packed blocks take
    all eight in the full shape. Small gemms get exact tiles in program order while they fit;
    one that does not takes packed blocks where the function's tiles are all full ones, unless
    it is so small that vector nanokernels beat packing, and else vector nanokernels (or, for
    a bf16 C, which they do not write, the emitter's loops)."""
    gemms = [g for g in walk(func.body) if isinstance(g, Gemm) and amx_applies(g, target)]
    paths = {id(g): AmxPath.PACKED for g in gemms if small_tiles(g) is None}
    full: Counter[Shape] = Counter({FULL: TILE_REGISTERS})
    need = full.copy() if paths else Counter()
    for g in gemms:
        tiles = small_tiles(g)
        if tiles is None:
            continue
        if (need | tiles.registers()).total() <= TILE_REGISTERS:
            need, paths[id(g)] = need | tiles.registers(), AmxPath.EXACT
        elif (need | full).total() <= TILE_REGISTERS and not (supported(g) and _tiny(g)):
            need, paths[id(g)] = need | full, AmxPath.PACKED
    return paths


def tile_gemm_amx(g: Gemm, target: Target, path: AmxPath) -> list[Instruction]:
    if path is AmxPath.EXACT:
        return _tile_small(g)
    m, n, k = gemm_extents(g)
    b = Builder(Region())
    em, en, ek = extent_values(b, g)
    kc, mc, nc = _fit(k, KC, CHUNK), _fit(m, MC, BLOCK), _fit(n, NC, BLOCK)
    _scale(b, g, ek)
    a_pack = b.alloca(MemRefType.packed(ScalarType.BF16, [mc * kc]))
    b_pack = b.alloca(MemRefType.packed(ScalarType.BF16, [nc * kc]))
    with b.for_(0, ek, kc) as (outer, pc):
        kb = block_extent(outer, ek, pc, kc)
        chunks = outer.index(BinaryOp.DIV, outer.index(BinaryOp.ADD, kb, CHUNK - 1), CHUNK)
        accumulate = _accumulate(outer, g, pc)
        with outer.for_(0, em, mc) as (middle, ic):
            mb = block_extent(middle, em, ic, mc)
            middle.add(TilePackAmx, trans=g.trans_a, pairs=True, source=g.a, row=ic, col=pc,
                       rows=mb, cols=kb, target=a_pack, panel=PANEL)  # fmt: skip
            with middle.for_(0, en, nc) as (inner, jc):
                nb = block_extent(inner, en, jc, nc)
                inner.add(TilePackAmx, trans=_flip(g.trans_b), source=g.b, row=jc, col=pc,
                          rows=nb, cols=kb, target=b_pack, panel=PANEL)  # fmt: skip
                _blocks(inner, g, (a_pack, b_pack), (ic, jc, mb, nb), chunks, accumulate)
    return b.region.instructions


def _tile_small(g: Gemm) -> list[Instruction]:
    m, n, k = gemm_extents(g)
    assert m is not None and n is not None and k is not None
    b = Builder(Region())
    zero = is_literal(g.beta, 0)
    if not zero and not is_literal(g.beta, 1):
        b.add(TileScale, beta=g.beta, c=g.c)
    chunks = -(-k // CHUNK)
    height = _panels(m) * PANEL  # one panel: the shifted last accumulator may cross 16 rows
    a_pack = b.alloca(MemRefType.packed(ScalarType.BF16, [height * chunks * CHUNK]))
    b.add(TilePackAmx, trans=g.trans_a, pairs=True, exact=True, source=g.a, row=0, col=0,
          rows=m, cols=k, target=a_pack, panel=height)  # fmt: skip
    rows = g.b
    if not _rows_in_place(g, k):
        rows = b.alloca(MemRefType.packed(ScalarType.BF16, [_panels(n) * chunks * PANEL * CHUNK]))
        b.add(TilePackAmx, trans=_flip(g.trans_b), exact=True, source=g.b, row=0, col=0,
              rows=n, cols=k, target=rows, panel=PANEL)  # fmt: skip
    b.add(TileAmxSmallGemm, trans_b=g.trans_b, zero=zero, alpha=g.alpha, a=a_pack, b=rows,
          c=g.c, k=k)  # fmt: skip
    return b.region.instructions


def _rows_in_place(g: Gemm, k: int) -> bool:
    """op(B)'s columns are row tiles as they lie: K contiguous, and K even, so no tile row
    reads a value past its column for the odd K's pair."""
    along_k = g.b.type.stride[0 if g.trans_b is Transpose.N else 1]
    return along_k == 1 and k % 2 == 0


def _flip(trans: Transpose) -> Transpose:
    """The transpose that reads op(B)^T (AMX row panels hold B's columns as rows)."""
    return Transpose.N if trans is Transpose.T else Transpose.T


def _panels(extent: int) -> int:
    return -(-extent // PANEL)


def _scale(b: Builder, g: Gemm, ek: Index) -> None:
    """C := beta * C once before the K blocks accumulate. Beta 1 needs nothing; beta 0 only
    where K is 0 (else the first K block writes C without reading it)."""
    if not is_literal(g.beta, 0):
        if not is_literal(g.beta, 1):
            b.add(TileScale, beta=g.beta, c=g.c)
    elif not isinstance(ek, int):
        empty = b.if_(b.cmp(CmpCond.EQ, ek, Constant(0, INDEX)), with_else=False)
        empty.then.add(TileScale, beta=g.beta, c=g.c)
    elif ek == 0:
        b.add(TileScale, beta=g.beta, c=g.c)


def _accumulate(b: Builder, g: Gemm, pc: Value) -> Index:
    """1 where the K block at pc adds to C, 0 where it overwrites C: the first K block of a
    gemm with beta 0, which so needs no pass zeroing C beforehand."""
    return b.add(TileMin, lhs=pc, rhs=1) if is_literal(g.beta, 0) else 1


def _blocks(b: Builder, g: Gemm, packs: tuple[Value, Value],
            block: tuple[Value, Value, Index, Index], chunks: Index,
            accumulate: Index) -> None:  # fmt: skip
    """One tile.amx_gemm per 32 x 32 block of the mb x nb C block at (ic, jc)."""
    (a_pack, b_pack), (ic, jc, mb, nb) = packs, block
    with b.for_(0, nb, BLOCK) as (columns, jr):
        cols = columns.add(TileMin, lhs=columns.index(BinaryOp.SUB, nb, jr), rhs=BLOCK)
        with columns.for_(0, mb, BLOCK) as (body, ir):
            rows = body.add(TileMin, lhs=body.index(BinaryOp.SUB, mb, ir), rhs=BLOCK)
            corner = [body.index(BinaryOp.ADD, ic, ir), body.index(BinaryOp.ADD, jc, jr)]
            c = body.subview(g.c, corner, [rows, cols])
            body.add(
                TileAmxGemm, alpha=g.alpha, a=a_pack, b=b_pack, c=c,
                a_panel=body.index(BinaryOp.DIV, ir, PANEL),
                b_panel=body.index(BinaryOp.DIV, jr, PANEL),
                chunks=chunks, rows=rows, cols=cols, accumulate=accumulate,
            )  # fmt: skip


def _fit(extent: int | None, block: int, multiple: int) -> int:
    """A block size, shrunk to a static extent rounded up to `multiple`."""
    return block if extent is None else min(block, -(-extent // multiple) * multiple)
