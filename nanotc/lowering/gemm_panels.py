"""gemm with a large A and a small B: row panels of A read in place, no packing.

When A is too large for L2 but B (K x N) fits half of it, the blocked path would pack all of
A only to read each packed panel once per column of tiles. Here A is read where it lies, one
row panel at a time, and reused from L1 by every column of tiles, while B stays in L2:

    for row in M step mr:                 the row panel of A: mr x K
      for pc in K step kc:                K blocks: the panel's block (mr x kc) fits half of L1
        for col in N step nr:             every tile of the row, on the same A block
          tile.gemm on A[row:, pc:], B[pc:, col:], C[row:, col:]
                                          (beta for the first K block, 1 after it)

C's row panel (mr x N) is loaded and stored once per K block, from L1. This is the order of
tall-and-skinny libraries: the ResNet-50 im2row GEMMs of W3 with N = 64 to 256 ran 1.05-1.15x
faster than packed blocks (3136x64x576, 784x128x1152, 784x128x512).
"""

from __future__ import annotations

from nanotc.ir.builder import Builder
from nanotc.ir.core import Instruction, Region
from nanotc.ir.instructions import Gemm, Transpose
from nanotc.ir.tile import TileGemm, TileScale
from nanotc.lowering.choices import DEFAULT_OPTIONS, PANELS, CompileOptions, register_tile_for
from nanotc.lowering.choices import signature as gemm_signature
from nanotc.lowering.gemm_blocked import (
    block_beta,
    block_extent,
    blocked_reserved,
    first_block_writes_c,
)
from nanotc.lowering.gemm_tiles import Index, gemm_extents, tile_block
from nanotc.lowering.nanokernel import row_stride_is_unit
from nanotc.lowering.register_tile import RegisterTile, choose_tall
from nanotc.targets import Target


def panels_apply(g: Gemm, target: Target) -> bool:
    """For a gemm the blocked path would take: static sizes, one element type throughout, rows
    of op(A) contiguous (a panel's columns are vector loads), and B within half of L2."""
    m, n, k = gemm_extents(g)
    if m is None or n is None or k is None:
        return False
    element = g.c.type.element
    same = g.a.type.element is element and g.b.type.element is element
    small_b = k * n * element.size <= target.l2_bytes // 2
    return same and small_b and row_stride_is_unit(g.a.type, g.trans_a)


def panel_tile(
    g: Gemm, target: Target, options: CompileOptions = DEFAULT_OPTIONS
) -> tuple[RegisterTile, int]:
    """The register tile and K block. Among the tiles the model estimates equal, the tallest:
    each broadcast of B, read from L2, then feeds the most FMAs (W3: 3 x 8 ran 1.02-1.14x
    faster than the 2 x 8 to 2 x 14 the model ties with it)."""
    m, n, k = gemm_extents(g)
    assert m is not None and n is not None and k is not None
    element, reserved = g.c.type.element, blocked_reserved(g)
    sig = gemm_signature(g, PANELS, (m, n, k), reserved)
    tile = register_tile_for(options, sig, target, element, (m, n, k), reserved, choose_tall)
    return tile, panel_depth(target, tile, element.size, k)


def panel_depth(target: Target, tile: RegisterTile, size: int, k: int) -> int:
    """K block: the A block of a row panel fills half of L1 at most, and K splits into equal
    blocks (no short remainder to load and store C for)."""
    longest = max(8, target.l1_bytes // 2 // (tile.mr * size))
    blocks = -(-k // longest)
    return -(-k // blocks)


def tile_gemm_panels(
    g: Gemm, target: Target, options: CompileOptions = DEFAULT_OPTIONS
) -> list[Instruction]:
    m, n, k = gemm_extents(g)
    assert m is not None and n is not None and k is not None
    tile, kc = panel_tile(g, target, options)
    b = Builder(Region())
    if not first_block_writes_c(g):
        b.add(TileScale, beta=g.beta, c=g.c)  # beta once; the K blocks then accumulate
    full = m // tile.mr * tile.mr
    if full:
        with b.for_(0, full, tile.mr) as (body, row):
            _row_panel(body, g, tile, row, tile.mr, kc)
    if m > full:
        _row_panel(b, g, tile, full, m - full, kc)
    return b.region.instructions


def _row_panel(b: Builder, g: Gemm, tile: RegisterTile, row: Index, rows: int, kc: int) -> None:
    """All tiles of the `rows` x N panel of C at `row`, K block by K block."""
    _, n, k = gemm_extents(g)
    assert n is not None and k is not None
    with b.for_(0, k, kc) as (body, pc):
        kb = block_extent(body, k, pc, kc)
        beta = block_beta(body, g, pc, k, kc)
        a = body.subview(g.a, _stored(g.trans_a, row, pc), _stored(g.trans_a, rows, kb))
        bk = body.subview(g.b, _stored(g.trans_b, pc, 0), _stored(g.trans_b, kb, n))
        c = body.subview(g.c, [row, 0], [rows, n])

        def micro(mb: Builder, r: Index, col: Index, count: Index, mr: int, nr: int) -> None:
            mb.add(
                TileGemm, trans_a=g.trans_a, trans_b=g.trans_b, atomic=g.atomic, alpha=g.alpha,
                a=a, b=bk, beta=beta, c=c, row=r, col=col, rows=count, mr=mr, nr=nr,
            )  # fmt: skip

        tile_block(body, tile, rows, n, micro)


def _stored(trans: Transpose, row: Index, col: Index) -> list[Index]:
    """(row, col) of op(X) as (row, col) of X."""
    return [col, row] if trans is Transpose.T else [row, col]
