"""bf16 gemm on AMX tiles (targets with `amx`): packed blocks and `tile.amx_gemm` kernels.

AMX multiplies row-major tiles; a column-major C (M x N) is the row-major C^T, so the tiles
compute C^T = op(B)^T op(A)^T: the row operand is op(B)^T (K contiguous along each row), the
VNNI operand op(A) with K pairs interleaved, and each row of a C tile is a 16-element column
segment of C. Both operands are packed into zero-padded 16-row panels in chunks of 32 K, so
every tile is a full 16 x 64 bytes and one tile configuration serves the whole kernel:

    C := beta * C
    for jc in N step nc:
      for pc in K step kc:
        pack op(B)[pc:, jc:]^T as AMX row panels
        for ic in M step mc:
          pack op(A)[ic:, pc:] as AMX VNNI panels
          for each 32 x 32 block of C: tile.amx_gemm (2 x 2 accumulator tiles)
"""

from __future__ import annotations

from nanotc.ir.builder import Builder
from nanotc.ir.core import Instruction, Region
from nanotc.ir.instructions import BinaryOp, Gemm, Transpose
from nanotc.ir.tile import TileAmxGemm, TileMin, TilePackAmx, TileScale
from nanotc.ir.types import MemRefType, ScalarType
from nanotc.ir.values import Value
from nanotc.lowering.gemm_blocked import block_extent
from nanotc.lowering.gemm_tiles import Index, extent_values, gemm_extents
from nanotc.targets import Target

PANEL = 16  # rows of an AMX tile
CHUNK = 32  # bf16 values of K in one tile row (64 bytes)
BLOCK = 32  # rows and columns of C per kernel: 2 x 2 accumulator tiles
# kc: a C block is loaded and stored once per K block, so long K blocks pay (1024 ran 1.1x
# faster than 512 on the MLP layers, although the B panel pair then streams from L2)
KC, MC, NC = 1024, 256, 1024


SMALL = 32 * 32 * 32  # static gemms below this many multiply-adds use vector nanokernels


def amx_applies(g: Gemm, target: Target) -> bool:
    """bf16 A and B into an f32 or bf16 C, not atomic, not so small that packing into full
    16 x 16 tiles costs more than vector nanokernels would."""
    bf16 = g.a.type.element is ScalarType.BF16 and g.b.type.element is ScalarType.BF16
    output = g.c.type.element in (ScalarType.F32, ScalarType.BF16)
    extents = gemm_extents(g)
    small = None not in extents and extents[0] * extents[1] * extents[2] < SMALL  # type: ignore[operator]
    return target.amx and bf16 and output and not g.atomic and not small


def tile_gemm_amx(g: Gemm, target: Target) -> list[Instruction]:
    m, n, k = gemm_extents(g)
    b = Builder(Region())
    em, en, ek = extent_values(b, g)
    kc, mc, nc = _fit(k, KC, CHUNK), _fit(m, MC, BLOCK), _fit(n, NC, BLOCK)
    b.add(TileScale, beta=g.beta, c=g.c)  # beta once; the K blocks then accumulate
    a_pack = b.alloca(MemRefType.packed(ScalarType.BF16, [mc * kc]))
    b_pack = b.alloca(MemRefType.packed(ScalarType.BF16, [nc * kc]))
    flip = Transpose.N if g.trans_b is Transpose.T else Transpose.T
    with b.for_(0, en, nc) as (outer, jc):
        nb = block_extent(outer, en, jc, nc)
        with outer.for_(0, ek, kc) as (middle, pc):
            kb = block_extent(middle, ek, pc, kc)
            chunks = middle.index(BinaryOp.DIV, middle.index(BinaryOp.ADD, kb, CHUNK - 1), CHUNK)
            middle.add(TilePackAmx, trans=flip, source=g.b, row=jc, col=pc, rows=nb, cols=kb,
                       target=b_pack)  # fmt: skip
            with middle.for_(0, em, mc) as (inner, ic):
                mb = block_extent(inner, em, ic, mc)
                inner.add(TilePackAmx, trans=g.trans_a, pairs=True, source=g.a, row=ic, col=pc,
                          rows=mb, cols=kb, target=a_pack)  # fmt: skip
                _blocks(inner, g, a_pack, b_pack, ic, jc, mb, nb, chunks)
    return b.region.instructions


def _blocks(b: Builder, g: Gemm, a_pack: Value, b_pack: Value, ic: Value, jc: Value,
            mb: Index, nb: Index, chunks: Index) -> None:  # fmt: skip
    """One tile.amx_gemm per 32 x 32 block of the mb x nb block of C at (ic, jc)."""
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
                chunks=chunks, rows=rows, cols=cols,
            )  # fmt: skip


def _fit(extent: int | None, block: int, multiple: int) -> int:
    """A block size, shrunk to a static extent rounded up to `multiple`."""
    return block if extent is None else min(block, -(-extent // multiple) * multiple)
