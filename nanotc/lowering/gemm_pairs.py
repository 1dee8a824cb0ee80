"""bf16 gemms whose A is packed once into VNNI pairs for the vdpbf16ps nanokernels.

`vdpbf16ps` multiplies pairs of K values: lane r of its A operand holds (A[r, k], A[r, k+1]).
A column-major A keeps the two in different columns, so a nanokernel reading A where it lies
interleaves them in its K loop, and every column of register tiles does that again. With a
K loop long enough (`nanokernel.unpacks_pay`) that is one in-lane unpack per vector and K
pair, cheaper than a pack; a shorter one interleaves each 16 rows with a cross-lane
vpermt2w. There, where C takes MIN_COLUMN_TILES or more columns of tiles, op(A) is packed
first into VNNI panels of mr rows (`tile.pack.pairs`: each K pair's rows interleaved once,
an odd K's last pair and the rows past M padded with zeros) and every tile loads its pairs
as they are (`tile.gemm.pairs`): batches of 64x64x8 ran 1.09x faster, 32x64x10 1.07x; with
a longer K the unpacking tiles ran 1.05-1.1x faster than the pack (64^3, 96x48x96). The
blocked path (`gemm_blocked`) always packs its A blocks the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from nanotc.ir.builder import Builder
from nanotc.ir.core import Instruction, Region
from nanotc.ir.instructions import BinaryOp, Expand, Gemm, Transpose
from nanotc.ir.tile import TileGemm, TilePack
from nanotc.ir.types import MemRefType, ScalarType
from nanotc.ir.values import Value
from nanotc.lowering.nanokernel import unpacks_pay
from nanotc.lowering.register_tile import RegisterTile
from nanotc.targets import Target

MIN_COLUMN_TILES = 3
Index = int | Value
Micro = Callable[[Builder, Index, Index, Index, int, int], None]  # (row, col, rows, mr, nr)
TileCover = Callable[[Builder, Micro], None]  # emits `micro` for every tile of C


def dot_pairs(g: Gemm, target: Target) -> bool:
    """bf16 A and B into an f32 C on a target whose vdpbf16ps outruns FMAs."""
    bf16 = g.a.type.element is g.b.type.element is ScalarType.BF16
    return bf16 and g.c.type.element is ScalarType.F32 and target.bf16_gemm_by_dot


def packs_a_pairs(
    g: Gemm, target: Target, tile: RegisterTile, extents: tuple[int | None, ...]
) -> bool:
    """A static gemm on vdpbf16ps whose C takes at least MIN_COLUMN_TILES columns of tiles
    (with two, the pack cost more than it saved: 35x9x35 and 56x9x9 ran 0.85x), unless its
    tiles unpack A's pairs themselves: an untransposed A and a K loop long enough."""
    m, n, k = extents
    if m is None or n is None or k is None:
        return False
    if g.trans_a is Transpose.N and unpacks_pay(k, tile.nr):
        return False
    return dot_pairs(g, target) and -(-n // tile.nr) >= MIN_COLUMN_TILES


def pair_panel(b: Builder, pack: Value, row: Index, k_pairs: Index, mr: int) -> Value:
    """The VNNI panel of the tile at `row` (a multiple of mr) in a `tile.pack.pairs` buffer
    of mr-row panels: a 2 mr x k_pairs view whose column p holds K pair p."""
    start = b.index(BinaryOp.MUL, row, b.index(BinaryOp.MUL, k_pairs, 2))
    flat = b.subview(pack, [start], [b.index(BinaryOp.MUL, k_pairs, 2 * mr)])
    return b.add(Expand, source=flat, mode=0, shape=[2 * mr, k_pairs])


def b_columns(b: Builder, g: Gemm, col: Index, nr: int, k: Index, first_k: Index = 0) -> Value:
    """op(B)'s columns col .. col + nr, rows first_k .. first_k + k, as a view of B."""
    if g.trans_b is Transpose.T:
        return b.subview(g.b, [col, first_k], [nr, k])
    return b.subview(g.b, [first_k, col], [k, nr])


def tiles_on_pairs(g: Gemm, tile: RegisterTile, extents: tuple[int, int, int],
                   cover: TileCover) -> list[Instruction]:  # fmt: skip
    """op(A) packed into VNNI panels, then C's register tiles (laid out by `cover`) on them,
    each reading its own panel and op(B)'s columns where they lie."""
    m, _, k = extents
    k_pairs = (k + 1) // 2
    b = Builder(Region())
    panels = -(-m // tile.mr)
    pack = b.alloca(MemRefType.packed(ScalarType.BF16, [panels * tile.mr * 2 * k_pairs]))
    b.add(TilePack, trans=g.trans_a, pairs=True, source=g.a, row=0, col=0, rows=m, cols=k,
          panel=tile.mr, target=pack)  # fmt: skip

    def micro(body: Builder, row: Index, col: Index, rows: Index, mr: int, nr: int) -> None:
        a = pair_panel(body, pack, row, k_pairs, tile.mr)
        c = body.subview(g.c, [row, col], [rows, nr])
        body.add(
            TileGemm, trans_a=Transpose.N, trans_b=g.trans_b, atomic=g.atomic, pairs=True,
            alpha=g.alpha, a=a, b=b_columns(body, g, col, nr, k), beta=g.beta, c=c, row=0,
            col=0, rows=rows, mr=mr, nr=nr,
        )  # fmt: skip

    cover(b, micro)
    return b.region.instructions
