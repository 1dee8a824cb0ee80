"""Emission of the AMX instructions of the tile dialect: `tile.pack_amx`, `tile.amx_gemm`,
`tile.amx_small_gemm` and `tile.amx_batch_gemm`.

Tiles are LLVM `x86_amx` values through the `.internal` intrinsics, which carry each tile's
shape; LLVM assigns tile registers and writes the tile configuration (ldtilecfg) itself.
Accumulator tiles are carried through the K loop in phi nodes, so they stay in tile registers.
A full 32 x 32 block of an f32 C with alpha 1 accumulates onto C's own tiles (loaded before
the K loop, stored after it); other blocks go through a stack buffer and masked vectors.
A process must ask Linux for the AMX state before running such code
(`nanotc.runtime.amx.enable`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

from llvmlite import ir

from nanotc.codegen.llvm import float16
from nanotc.codegen.llvm import vector as vec
from nanotc.codegen.llvm.emitter import FunctionEmitter, emits
from nanotc.codegen.llvm.helpers import (
    add,
    as_value,
    carried_loop,
    convert,
    element_ptr,
    for_range,
    intrinsic,
    loop_runs,
    mul,
)
from nanotc.codegen.llvm.types import F32, I16, I32, PTR, Dim, MemrefValue, const
from nanotc.ir.instructions import Transpose
from nanotc.ir.tile import TileAmxBatchGemm, TileAmxGemm, TileAmxSmallGemm, TilePackAmx
from nanotc.ir.types import ScalarType
from nanotc.ir.values import is_literal
from nanotc.lowering.gemm_amx import CHUNK, PANEL, SMALL_C, SmallTiles

AmxGemm = TileAmxGemm | TileAmxSmallGemm | TileAmxBatchGemm
TILE_BYTES = 64  # a full tile row: 16 f32 or 32 bf16
F32_BYTES = 4


class AmxType(ir.Type):
    """LLVM's `x86_amx`, which llvmlite does not define."""

    def _to_string(self) -> str:
        return "x86_amx"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AmxType)

    def __hash__(self) -> int:
        return hash("x86_amx")


AMX = AmxType()
_ROWS, _COLS = ir.Constant(I16, PANEL), ir.Constant(I16, TILE_BYTES)


def _tile_load(b: ir.IRBuilder, ptr: ir.Value) -> ir.Value:
    """A full 16 x 64-byte tile of a packed panel."""
    return _load(b, [_ROWS, _COLS], ptr, TILE_BYTES)


def _shape(rows: int, bytes_per_row: int) -> list[ir.Value]:
    return [ir.Constant(I16, rows), ir.Constant(I16, bytes_per_row)]


def _load(b: ir.IRBuilder, shape: list[ir.Value], ptr: ir.Value, stride: Dim) -> ir.Value:
    args = [*shape, ptr, as_value(b, stride)]
    return intrinsic(b, "llvm.x86.tileloadd64.internal", AMX, args)


def _store(
    b: ir.IRBuilder, shape: list[ir.Value], ptr: ir.Value, stride: Dim, tile: ir.Value
) -> None:
    args = [*shape, ptr, as_value(b, stride), tile]
    intrinsic(b, "llvm.x86.tilestored64.internal", ir.VoidType(), args)


@emits(TileAmxGemm)
def _amx_gemm(e: FunctionEmitter, inst: TileAmxGemm) -> None:
    b = e.b
    a: MemrefValue = e.value(inst.a)
    bp: MemrefValue = e.value(inst.b)
    chunks = e.index_value(inst.chunks)
    panel = b.mul(chunks, const(PANEL * CHUNK))  # elements of one packed panel
    a_base = element_ptr(b, a.ptr, ScalarType.BF16, b.mul(e.index_value(inst.a_panel), panel))
    b_base = element_ptr(b, bp.ptr, ScalarType.BF16, b.mul(e.index_value(inst.b_panel), panel))

    def tiles(base: ir.Value, offset: ir.Value) -> list[ir.Value]:
        """The tiles of two neighbouring panels at one chunk."""
        at = [b.add(offset, b.mul(const(t), panel)) for t in (0, 1)]
        return [_tile_load(b, element_ptr(b, base, ScalarType.BF16, x)) for x in at]

    def chunk(s: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        offset = b.mul(s, const(PANEL * CHUNK))
        rows, pairs = tiles(b_base, offset), tiles(a_base, offset)
        out = []
        for n_tile in (0, 1):
            for m_tile in (0, 1):
                args = [_ROWS, _COLS, _COLS, acc[2 * n_tile + m_tile], rows[n_tile], pairs[m_tile]]
                out.append(intrinsic(b, "llvm.x86.tdpbf16ps.internal", AMX, args))
        return out

    def k_loop(init: list[ir.Value]) -> list[ir.Value]:
        return carried_loop(b, 0, chunks, 1, init, chunk, name="chunk", unroll=False)

    def from_zero() -> list[ir.Value]:
        # a tilezero per accumulator: a copy between tile registers would go through memory
        return k_loop([_tile_zero(b) for _ in range(4)])

    c: MemrefValue = e.value(inst.c)
    accumulate = b.icmp_signed("!=", e.index_value(inst.accumulate), const(0))
    if not _direct_c(inst, c):
        _epilogue(e, inst, from_zero(), accumulate)
        return
    full = b.and_(
        b.icmp_signed("==", e.index_value(inst.rows), const(2 * PANEL)),
        b.icmp_signed("==", e.index_value(inst.cols), const(2 * PANEL)),
    )
    with b.if_else(full, likely=True) as (whole, edge):
        with whole:
            _onto_c_tiles(b, c, accumulate, k_loop)
        with edge:
            _epilogue(e, inst, from_zero(), accumulate)


def _onto_c_tiles(b: ir.IRBuilder, c: MemrefValue, accumulate: ir.Value,
                  k_loop: Callable[[list[ir.Value]], list[ir.Value]]) -> None:  # fmt: skip
    """A whole 32 x 32 block accumulated onto C's own tiles (loaded, or zero where not
    `accumulate`) and stored back: no buffer, no vector pass."""
    ld = mul(b, c.stride[1], F32_BYTES)
    corners = [_c_tile(b, c, index) for index in range(4)]
    with b.if_else(accumulate, likely=True) as (add, overwrite):
        with add:
            loaded = [_load(b, [_ROWS, _COLS], p, ld) for p in corners]
            add_end = b.block
        with overwrite:
            zeros = [_tile_zero(b) for _ in corners]
            overwrite_end = b.block
    start = []
    for tile, zero in zip(loaded, zeros):
        phi = b.phi(AMX)
        phi.add_incoming(tile, add_end)
        phi.add_incoming(zero, overwrite_end)
        start.append(phi)
    _store_c(b, corners, ld, k_loop(start))


def _tile_zero(b: ir.IRBuilder) -> ir.Value:
    """A full 16 x 64-byte tile of zeros."""
    return intrinsic(b, "llvm.x86.tilezero.internal", AMX, [_ROWS, _COLS])


def _store_c(b: ir.IRBuilder, corners: list[ir.Value], ld: ir.Value, acc: list[ir.Value]) -> None:
    for p, tile in zip(corners, acc):
        _store(b, [_ROWS, _COLS], p, ld, tile)


def _direct_c(inst: AmxGemm, c: MemrefValue) -> bool:
    """C's tiles can take the accumulation directly: alpha 1, f32, columns contiguous."""
    alpha_one = is_literal(inst.alpha, 1)
    return alpha_one and c.type.element is ScalarType.F32 and c.stride[0] == 1


def _c_tile(b: ir.IRBuilder, c: MemrefValue, index: int) -> ir.Value:
    """Tile (n_tile, m_tile) of a 32 x 32 block of C: rows are columns of C."""
    n_tile, m_tile = divmod(index, 2)
    offset = add(b, mul(b, n_tile * PANEL, c.stride[1]), m_tile * PANEL)
    return element_ptr(b, c.ptr, ScalarType.F32, offset)


def _epilogue(
    e: FunctionEmitter, inst: TileAmxGemm, acc: list[ir.Value], accumulate: ir.Value
) -> None:
    """The 32 x 32 f32 tile block goes to a stack buffer (column-major: a tile row is a
    column segment of C), then C[:rows, :cols] := alpha * block (+ C where `accumulate`)
    with masked vectors."""
    b = e.b
    block = _stack_block(e, 32 * 32)
    for index, tile in enumerate(acc):
        n_tile, m_tile = divmod(index, 2)
        ptr = element_ptr(b, block, ScalarType.F32, n_tile * PANEL * 32 + m_tile * PANEL)
        _store(b, [_ROWS, _COLS], ptr, 32 * F32_BYTES, tile)
    rows, cols = e.index_value(inst.rows), e.index_value(inst.cols)
    buffer = _Buffer(block, 32, rows, cols, 2)
    with b.if_else(accumulate, likely=True) as (add, overwrite):
        with add:
            _add_block(e, inst, e.value(inst.c), buffer, (0, 0), read_c=True)
        with overwrite:
            _add_block(e, inst, e.value(inst.c), buffer, (0, 0), read_c=False)


def _stack_block(e: FunctionEmitter, floats: int) -> ir.Value:
    block = e.state.entry.alloca(ir.ArrayType(F32, floats))
    block.align = 64
    block.type = PTR
    return block


class _Buffer(NamedTuple):
    """f32 values in a stack buffer, column j of them at ptr + j * ld, `rows` x `cols` valid."""

    ptr: ir.Value
    ld: int
    rows: ir.Value
    cols: ir.Value
    vectors: int  # of 16 rows per column, enough to cover `rows`


def _add_block(e: FunctionEmitter, inst: AmxGemm, c: MemrefValue,
               block: _Buffer, corner: tuple[int, int], read_c: bool) -> None:  # fmt: skip
    """C[m0 + i, n0 + j] := alpha * block(i, j) (+ C[m0 + i, n0 + j] when `read_c`) with
    masked vectors down C's contiguous columns."""
    b = e.b
    element = c.type.element
    alpha = vec.splat(b, _f32(e, inst), PANEL)
    f32x16 = vec.vector_type(F32, PANEL)
    m0, n0 = corner
    with for_range(b, 0, block.cols, name="n") as n:
        offset = add(b, mul(b, b.add(n, const(n0)), c.stride[1]), m0)
        column = element_ptr(b, c.ptr, element, offset)
        for v in range(block.vectors):
            mask = vec.dynamic_mask(b, PANEL, v * PANEL, block.rows)
            at = b.add(b.mul(n, const(block.ld)), const(v * PANEL))
            part = b.load(element_ptr(b, block.ptr, ScalarType.F32, at), typ=f32x16, align=4)
            ptr = element_ptr(b, column, element, mul(b, v * PANEL, c.stride[0]))
            if read_c:
                raw = vec.load(b, vec.memory_vector(element, PANEL), ptr, mask, element.size)
                old = vec.to_register(b, raw, element, f32x16)
                new = vec.fma(b, part, alpha, old, True)
            else:
                new = b.fmul(part, alpha)
            stored = float16.narrow(b, new, element) if element is ScalarType.BF16 else new
            vec.store(b, stored, ptr, mask, element.size)


def _f32(e: FunctionEmitter, inst: AmxGemm) -> ir.Value:
    return convert(e.b, e.value(inst.alpha), inst.alpha.type, ScalarType.F32)


@emits(TileAmxSmallGemm)
def _amx_small_gemm(e: FunctionEmitter, inst: TileAmxSmallGemm) -> None:
    """Per block of 16 columns of C: its accumulator tiles, then per chunk of K one row tile
    of op(B)^T and one VNNI tile of op(A) per accumulator, then C's tiles stored; all loads
    of a block precede its stores, which the overlapping last accumulator relies on."""
    b = e.b
    c: MemrefValue = e.value(inst.c)
    m, n = c.shape
    k = e.dim(inst.k)
    assert isinstance(m, int) and isinstance(n, int) and isinstance(k, int)
    tiles = SmallTiles(m, n, k)
    pairs: ir.Value = e.value(inst.a).ptr
    rows = _RowTiles(b, e.value(inst.b), inst.trans_b, len(tiles.chunk_bytes))
    block = None if _direct_c(inst, c) else _stack_block(e, SMALL_C * PANEL)
    for n0, nr in tiles.n_blocks:
        shape = _shape(nr, tiles.width * F32_BYTES)
        from_c = _direct_c(inst, c) and not inst.zero
        acc = [_small_start(b, c, (m0, n0), shape, from_c) for m0 in tiles.m_offsets]
        acc = _small_products(b, tiles, (rows, pairs), [(n0, nr)], acc)
        _small_finish_block(e, inst, (c, block), tiles, (n0, nr), acc, read_c=not inst.zero)


def _small_products(
    b: ir.IRBuilder,
    tiles: SmallTiles,
    sources: tuple[_RowTiles, ir.Value],
    blocks: list[tuple[int, int]],
    acc: list[ir.Value],
) -> list[ir.Value]:
    """The accumulators of C's column `blocks` (first column, count), one per row offset
    each, after every chunk of K: per chunk and block one row tile of op(B)^T, and one VNNI
    tile of op(A) (packed at `pairs`) per accumulator."""
    rows, pairs = sources
    height = -(-tiles.m // PANEL) * PANEL
    c_bytes, per = tiles.width * F32_BYTES, len(tiles.m_offsets)
    out = list(acc)
    for s, k_bytes in enumerate(tiles.chunk_bytes):
        for j, (n0, nr) in enumerate(blocks):
            row = rows.load(n0, nr, s, k_bytes)
            shape = [*_shape(nr, c_bytes), ir.Constant(I16, k_bytes)]
            for i, m0 in enumerate(tiles.m_offsets, start=j * per):
                at = _pairs_at(b, pairs, height, m0, s)
                vnni = _load(b, _shape(k_bytes // 4, c_bytes), at, 4 * height)
                args = [*shape, out[i], row, vnni]
                out[i] = intrinsic(b, "llvm.x86.tdpbf16ps.internal", AMX, args)
    return out


def _small_finish_block(e: FunctionEmitter, inst: TileAmxSmallGemm | TileAmxBatchGemm,
                        into: tuple[MemrefValue, ir.Value | None], tiles: SmallTiles,
                        columns: tuple[int, int], acc: list[ir.Value], read_c: bool,
                        ) -> None:  # fmt: skip
    """A column block's accumulators into C = `into`[0], in place, or through the stack
    block `into`[1] and the vector epilogue (which reads C where `read_c`)."""
    (c, block), (n0, nr) = into, columns
    for m0, tile in zip(tiles.m_offsets, acc):
        _small_finish(e, inst, c, (m0, n0), _shape(nr, tiles.width * F32_BYTES), tile, block)
    if block is not None:
        buffer = _Buffer(block, SMALL_C, const(tiles.m), const(nr), -(-tiles.m // PANEL))
        _add_block(e, inst, c, buffer, (0, n0), read_c=read_c)


@emits(TileAmxBatchGemm)
def _amx_batch_gemm(e: FunctionEmitter, inst: TileAmxBatchGemm) -> None:
    """C's accumulator tiles loaded once, then per iteration b (A_b interleaved into one half
    of a double buffer by the iteration before, the next A packed into the other half) the
    row tiles of op(B_b)^T and the tile products; C's tiles stored once after the loop."""
    b = e.b
    c: MemrefValue = e.value(inst.c)
    m, n = c.shape
    a_type = inst.panels()[0].type
    k = a_type.shape[0 if inst.trans_a is Transpose.T else 1]
    assert isinstance(m, int) and isinstance(n, int) and isinstance(k, int)
    tiles = SmallTiles(m, n, k)
    height = -(-m // PANEL) * PANEL
    size = height * len(tiles.chunk_bytes) * CHUNK  # bf16 values of one packed A
    buffer = e.state.entry.alloca(ir.ArrayType(I16, 2 * size))
    buffer.align = 64
    buffer.type = PTR
    start, stop, step = (e.index_value(v) for v in (inst.start, inst.stop, inst.step))
    per = len(tiles.m_offsets)  # accumulators per column block
    direct = _direct_c(inst, c)
    acc = [
        _small_start(b, c, (m0, n0), _shape(nr, tiles.width * F32_BYTES), direct)
        for n0, nr in tiles.n_blocks
        for m0 in tiles.m_offsets
    ]

    def operands(index: ir.Value) -> list[MemrefValue]:
        return e.region(inst.body, [index])

    def pack(a: MemrefValue, half: ir.Value) -> None:
        r_mode, c_mode = (1, 0) if inst.trans_a is Transpose.T else (0, 1)
        strides = (a.stride[r_mode], a.stride[c_mode])
        _pack_static(e, _StaticPack(a.ptr, strides, half, (m, k), height, True))

    def half(parity: ir.Value) -> ir.Value:
        return element_ptr(b, buffer, ScalarType.BF16, b.mul(parity, const(size)))

    runs = loop_runs(b, start, stop, step)
    with b.if_then(runs):
        pack(operands(start)[0], buffer)

    def iteration(index: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        parity = b.and_(b.udiv(b.sub(index, start), step), const(1))
        following = b.add(index, step)
        with b.if_then(b.icmp_signed("<", following, stop)):
            pack(operands(following)[0], half(b.sub(const(1), parity)))
        rows = _RowTiles(b, operands(index)[1], inst.trans_b, len(tiles.chunk_bytes))
        return _small_products(b, tiles, (rows, half(parity)), tiles.n_blocks, acc)

    acc = carried_loop(b, start, stop, step, acc, iteration, name="batch", unroll=False)
    block = None if direct else _stack_block(e, SMALL_C * PANEL)
    with b.if_then(runs):  # no iteration leaves C as it was (not C + alpha * 0)
        for j, columns in enumerate(tiles.n_blocks):
            _small_finish_block(
                e, inst, (c, block), tiles, columns, acc[j * per : (j + 1) * per], read_c=True
            )


def _pairs_at(b: ir.IRBuilder, pairs: ir.Value, height: int, m0: int, chunk: int) -> ir.Value:
    """The VNNI rows of op(A) from row m0 at chunk `chunk`, in one panel of `height` rows."""
    return element_ptr(b, pairs, ScalarType.BF16, chunk * height * CHUNK + 2 * m0)


class _RowTiles:
    """Row tiles of op(B)^T: straight from op(B) (rows are its columns) or from row panels."""

    def __init__(self, b: ir.IRBuilder, source: MemrefValue, trans_b: Transpose, chunks: int):
        self.b, self.chunks = b, chunks
        self.ptr = source.ptr
        self.packed = len(source.shape) == 1
        if not self.packed:  # K runs along mode 0 of B (.n) or mode 1 (.t), contiguously
            self.row_stride = source.stride[1 if trans_b is Transpose.N else 0]

    def load(self, n0: int, rows: int, chunk: int, k_bytes: int) -> ir.Value:
        b, shape = self.b, _shape(rows, k_bytes)
        if self.packed:
            at = ((n0 // PANEL) * self.chunks + chunk) * PANEL * CHUNK
            return _load(b, shape, element_ptr(b, self.ptr, ScalarType.BF16, at), TILE_BYTES)
        at = add(b, mul(b, n0, self.row_stride), chunk * CHUNK)
        ptr = element_ptr(b, self.ptr, ScalarType.BF16, at)
        return _load(b, shape, ptr, mul(b, self.row_stride, 2))


def _small_start(b: ir.IRBuilder, c: MemrefValue, corner: tuple[int, int],
                 shape: list[ir.Value], from_c: bool) -> ir.Value:  # fmt: skip
    """The accumulator of one C tile: C's own values (`from_c`), or zero (beta 0, or a C
    updated through the epilogue)."""
    if from_c:
        return _load(b, shape, _c_at(b, c, corner), mul(b, c.stride[1], F32_BYTES))
    return intrinsic(b, "llvm.x86.tilezero.internal", AMX, shape)


def _small_finish(e: FunctionEmitter, inst: TileAmxSmallGemm | TileAmxBatchGemm, c: MemrefValue,
                  corner: tuple[int, int], shape: list[ir.Value], tile: ir.Value,
                  block: ir.Value | None) -> None:  # fmt: skip
    """The tile into C in place, or into `block` (a stack buffer of the block's columns, for
    the vector epilogue) at the same place."""
    b = e.b
    if block is None:
        _store(b, shape, _c_at(b, c, corner), mul(b, c.stride[1], F32_BYTES), tile)
        return
    _store(b, shape, element_ptr(b, block, ScalarType.F32, corner[0]), SMALL_C * F32_BYTES, tile)


def _c_at(b: ir.IRBuilder, c: MemrefValue, corner: tuple[int, int]) -> ir.Value:
    m0, n0 = corner
    return element_ptr(b, c.ptr, ScalarType.F32, add(b, mul(b, n0, c.stride[1]), m0))


@emits(TilePackAmx)
def _pack_amx(e: FunctionEmitter, inst: TilePackAmx) -> None:
    """X = op(source)[row:, col:] into panels of H = `panel` rows, chunks of 32 K (zero beyond
    the block); the pairs layout takes any multiple of 16 for H, the rows layout 16:
    rows layout  X(r, c) -> panel r//16, chunk c//32, at (r%16)*32 + c%32;
    pairs layout X(r, c) -> panel r//H, chunk c//32, at ((c%32)//2)*2H + (r%H)*2 + c%2.
    Each panel is packed in groups of 16 rows; `.exact` leaves out the rows and K pairs past
    the block instead of zeroing them."""
    b = e.b
    source: MemrefValue = e.value(inst.source)
    target: MemrefValue = e.value(inst.target)
    height = inst.panel
    assert height % PANEL == 0 and (inst.pairs or height == PANEL)
    r_mode, c_mode = (1, 0) if inst.trans is Transpose.T else (0, 1)
    rows, cols = e.index_value(inst.rows), e.index_value(inst.cols)
    row_offset = b.mul(e.index_value(inst.row), as_value(b, source.stride[r_mode]))
    corner = b.add(row_offset, b.mul(e.index_value(inst.col), as_value(b, source.stride[c_mode])))
    base = element_ptr(b, source.ptr, ScalarType.BF16, corner)
    chunks = b.udiv(b.add(cols, const(CHUNK - 1)), const(CHUNK))
    panels = b.udiv(b.add(rows, const(height - 1)), const(height))
    panel_size = b.mul(chunks, const(height * CHUNK))
    strides = (source.stride[r_mode], source.stride[c_mode])
    pair_stride = 2 * height if inst.pairs else None
    static = e.dim(inst.rows), e.dim(inst.cols)
    if inst.exact and isinstance(static[0], int) and isinstance(static[1], int):
        extents = (static[0], static[1])
        _pack_static(e, _StaticPack(base, strides, target.ptr, extents, height, inst.pairs))
        return
    with _block_loops(b, panels, chunks, rows_contiguous=strides[0] == 1) as (q, s):
        start = b.add(b.mul(q, panel_size), b.mul(s, const(height * CHUNK)))
        c0 = b.mul(s, const(CHUNK))
        for first, group in _groups(height, inst.pairs):
            out = element_ptr(b, target.ptr, ScalarType.BF16, b.add(start, const(2 * first)))
            r0 = b.add(b.mul(q, const(height)), const(first))
            valid = (b.sub(rows, r0), b.sub(cols, c0))
            block = _Block(b, base, strides, (r0, c0), valid, group, inst.exact)
            _pack_block(b, block, out, pair_stride)


@contextmanager
def _block_loops(
    b: ir.IRBuilder, panels: ir.Value, chunks: ir.Value, rows_contiguous: bool
) -> Iterator[tuple[ir.Value, ir.Value]]:
    """Loops over (panel, chunk), the inner one along the source's contiguous direction: down
    a column-major op(A)'s columns panel after panel, so each of a chunk's 32 columns is read
    in order (panel-major, every panel touched all 1024 columns of the MLP layer's A, pages
    too many for the hardware prefetchers: its packing alone ran 1.2x faster this way), and
    along K where K is contiguous."""
    loops = [(panels, "panel"), (chunks, "chunk")]
    outer, inner = reversed(loops) if rows_contiguous else loops
    with (
        for_range(b, 0, outer[0], name=outer[1]) as x,
        for_range(b, 0, inner[0], name=inner[1]) as y,
    ):
        yield (y, x) if rows_contiguous else (x, y)


class _StaticPack(NamedTuple):
    """An exact pack of static size: op(X) from `base` with (row, column) `strides`, `extents`
    rows by columns, into `target` in panels of `height` rows (`pairs`: the VNNI layout)."""

    base: ir.Value
    strides: tuple[Dim, Dim]
    target: ir.Value
    extents: tuple[int, int]
    height: int
    pairs: bool


def _pack_static(e: FunctionEmitter, pack: _StaticPack) -> None:
    """The same for the whole operand of an exact-tile gemm (static and at most 64 rows): whole
    chunks of 32 K in one loop, a last partial chunk after it, each group of rows masked only
    where it is cut, and the rows and K pairs past the block left out at compile time (half
    the LLVM IR of the general form: a loop of 35 x 9 x 35 gemms compiled in 0.4 s)."""
    b = e.b
    rows, cols = pack.extents
    whole, tail = divmod(cols, CHUNK)
    for q in range(-(-rows // pack.height)):
        if whole:
            with for_range(b, 0, const(whole), name="chunk") as s:
                _pack_static_chunk(e, pack, (q, s))
        if tail:
            _pack_static_chunk(e, pack, (q, whole))


def _pack_static_chunk(
    e: FunctionEmitter, pack: _StaticPack, at: tuple[int, ir.Value | int]
) -> None:
    """Panel q, chunk s (a loop index: a whole chunk) of a static block."""
    b, height = e.b, pack.height
    (q, s), (rows, cols) = at, pack.extents
    chunks = -(-cols // CHUNK)
    valid_cols = cols - s * CHUNK if isinstance(s, int) else CHUNK
    blocks = []
    for first, group in _groups(height, pack.pairs):
        start = b.add(
            b.mul(as_value(b, s), const(height * CHUNK)), const(q * chunks * height * CHUNK)
        )
        out = element_ptr(b, pack.target, ScalarType.BF16, b.add(start, const(2 * first)))
        r0 = q * height + first
        valid = (rows - r0, valid_cols)
        corner = (const(r0), b.mul(as_value(b, s), const(CHUNK)))
        values = (const(valid[0]), const(valid[1]))
        block = _Block(b, pack.base, pack.strides, corner, values, group, True, valid)
        blocks.append((block, out, valid[0] < group))  # rows cut
    if pack.pairs and pack.strides[0] == 1:
        _store_pairs_in_loop(b, blocks, valid_cols, 2 * height)
        return
    for block, out, rows_cut in blocks:
        masked = rows_cut or valid_cols < CHUNK
        _store_block(block, out, 2 * height if pack.pairs else None, masked)


def _store_pairs_in_loop(b: ir.IRBuilder, blocks: list[tuple[_Block, ir.Value, bool]],
                         valid_cols: int, pair_stride: int) -> None:  # fmt: skip
    """The K pairs of a static chunk whose rows are contiguous, in a loop over the pairs with
    both columns inside, each step interleaving one pair of every group of rows (masked
    where the group's rows are cut); then a last pair with one column. Unrolled, LLVM loaded
    all of a chunk's columns before storing any pair, spilling a third of them to the stack,
    and a batch loop of 35 x 9 x 35 gemms took 0.46 s to compile instead of 0.2 (it runs as
    fast either way)."""
    whole = min(valid_cols, CHUNK) // 2

    def pair(p: ir.Value, _: list[ir.Value]) -> list[ir.Value]:
        for block, out, rows_cut in blocks:
            block.store_pair_at(p, out, pair_stride, rows_cut)
        return []

    carried_loop(b, 0, whole, 1, [], pair, name="pair", unroll=False)
    if whole < CHUNK // 2 and valid_cols % 2:
        for block, out, _ in blocks:
            block.store_pair_at(const(whole), out, pair_stride, masked=True)


def _groups(height: int, pairs: bool) -> list[tuple[int, int]]:
    """(first row, rows) of the groups a panel is packed in: 32 rows where the pairs layout
    has them (one shuffle of two 32-row columns fills 128 contiguous bytes), else 16."""
    out, first = [], 0
    while first < height:
        rows = 2 * PANEL if pairs and height - first >= 2 * PANEL else PANEL
        out.append((first, rows))
        first += rows
    return out


def _pack_block(b: ir.IRBuilder, block: _Block, out: ir.Value, pair_stride: int | None) -> None:
    """One block of 32 K in the pairs layout (`pair_stride` elements between K pairs) or the
    rows layout (None), without masks where the block is whole."""

    def store(masked: bool) -> None:
        _store_block(block, out, pair_stride, masked)

    whole = b.and_(
        b.icmp_signed(">=", block.valid_rows, const(block.height)),
        b.icmp_signed(">=", block.valid_cols, const(CHUNK)),
    )
    with b.if_else(whole, likely=True) as (full, edge):
        with full:  # most blocks: no masks to build or apply
            store(masked=False)
        with edge:
            store(masked=True)


def _store_block(block: _Block, out: ir.Value, pair_stride: int | None, masked: bool) -> None:
    if pair_stride is None:
        block.store_rows(out, masked)
    else:
        block.store_pairs(out, masked, pair_stride)


class _Block:
    """One `height` x 32 piece of X (rows r0.., columns c0..: `corner`) with `valid` rows and
    columns (16 rows for the rows layout); `exact`: rows and K pairs past them are not
    written."""

    def __init__(self, b: ir.IRBuilder, base: ir.Value, strides: tuple,
                 corner: tuple[ir.Value, ir.Value], valid: tuple[ir.Value, ir.Value],
                 height: int, exact: bool,
                 static: tuple[int, int] | None = None):  # fmt: skip
        self.b, self.base, (self.rs, self.cs) = b, base, strides
        self.r0, self.c0 = corner
        self.valid_rows, self.valid_cols = valid
        self.height, self.exact, self.static = height, exact, static

    def _width(self, mode: int, full: int, narrow: int) -> int:
        """Elements a vector along rows (mode 0) or K (1) takes: `narrow` where an exact
        block of static size has no more, whose pack then moves only what the tiles read
        (bf16 8x8x8 gemm pairs packed 1.2x faster), else `full`."""
        fits = self.exact and self.static is not None and self.static[mode] <= narrow
        return narrow if fits else full

    def _left_out(self, index: int, mode: int) -> bool:
        """Row (mode 0) or column (1) `index` is past a block of static size that `.exact`
        leaves unwritten: not emitted at all."""
        return self.exact and self.static is not None and index >= self.static[mode]

    def _at(self, r: ir.Value, c: ir.Value) -> ir.Value:
        b = self.b
        row = b.mul(b.add(self.r0, r), as_value(b, self.rs))
        offset = b.add(row, b.mul(b.add(self.c0, c), as_value(b, self.cs)))
        return element_ptr(b, self.base, ScalarType.BF16, offset)

    def store_rows(self, out: ir.Value, masked: bool) -> None:
        """16 rows of 32 consecutive columns: one (masked) 64-byte copy per row where X's
        columns are contiguous, element by element otherwise."""
        b = self.b
        if self.cs != 1 and self.rs == 1:
            self._store_rows_from_columns(out, masked)
            return
        for r in range(PANEL):
            if self._left_out(r, 0):
                continue
            dst = element_ptr(b, out, ScalarType.BF16, r * CHUNK)
            inside = b.icmp_signed("<", const(r), self.valid_rows)
            with self._written(inside, masked):
                self._store_row(r, inside, dst, masked)

    def _store_rows_from_columns(self, out: ir.Value, masked: bool) -> None:
        """X's rows contiguous down its columns (a transposed B): neighbouring columns
        interleaved give 16 words of K pairs per row, and a 16 x 16 transpose of those words
        gives each row's 32 K values."""
        b = self.b
        words = vec.vector_type(I32, PANEL)
        pairs = [
            b.bitcast(self._pair_vector(p, masked, self.height), words) for p in range(CHUNK // 2)
        ]
        for r, row in enumerate(vec.transpose(b, pairs)):
            if self._left_out(r, 0):
                continue
            dst = element_ptr(b, out, ScalarType.BF16, r * CHUNK)
            with self._written(b.icmp_signed("<", const(r), self.valid_rows), masked):
                b.store(row, dst, align=2)

    def _store_row(self, r: int, inside: ir.Value, dst: ir.Value, masked: bool) -> None:
        """One row of 32 K values, or of the first 16 (`_width`)."""
        b = self.b
        width = self._width(1, CHUNK, CHUNK // 2)
        t = vec.vector_type(I16, width)
        if self.cs == 1:
            mask = None
            if masked:
                columns = vec.dynamic_mask(b, width, 0, self.valid_cols)
                mask = b.and_(columns, vec.splat(b, inside, width))
            b.store(vec.load(b, t, self._at(const(r), const(0)), mask, 2), dst, align=2)
        else:
            with for_range(b, 0, CHUNK, name="c") as c:
                ok = b.and_(inside, b.icmp_signed("<", c, self.valid_cols))
                self._copy(ok, self._at(const(r), c), element_ptr(b, dst, ScalarType.BF16, c))

    def store_pairs(self, out: ir.Value, masked: bool, pair_stride: int) -> None:
        """16 K-pairs of `height` rows, `pair_stride` elements apart: two columns interleaved
        where X's rows are contiguous (the flat-to-VNNI shuffle), element by element
        otherwise."""
        b = self.b
        if self.rs != 1 and self.cs == 1:
            self._store_pairs_from_rows(out, masked, pair_stride)
            return
        for p in range(CHUNK // 2):
            if self._left_out(2 * p, 1):
                continue
            dst = element_ptr(b, out, ScalarType.BF16, p * pair_stride)
            with self._written(b.icmp_signed("<", const(2 * p), self.valid_cols), masked):
                self._store_pair(p, dst, masked)

    def _store_pairs_from_rows(self, out: ir.Value, masked: bool, pair_stride: int) -> None:
        """X's K values contiguous along its rows (a transposed A): each row's 32 K values
        are 16 K pairs, 32-bit words; a 16 x 16 transpose of the words of 16 rows gives 16
        K-pair rows of the VNNI layout."""
        b = self.b
        halves = vec.vector_type(I16, CHUNK)
        for group in range(self.height // PANEL):
            words = []
            for r in range(group * PANEL, (group + 1) * PANEL):
                mask = None
                if masked:
                    inside = b.icmp_signed("<", const(r), self.valid_rows)
                    columns = vec.dynamic_mask(b, CHUNK, 0, self.valid_cols)
                    mask = b.and_(columns, vec.splat(b, inside, CHUNK))
                row = vec.load(b, halves, self._at(const(r), const(0)), mask, 2)
                words.append(b.bitcast(row, vec.vector_type(I32, PANEL)))
            for p, pairs in enumerate(vec.transpose(b, words)):
                if self._left_out(2 * p, 1):
                    continue
                dst = element_ptr(b, out, ScalarType.BF16, p * pair_stride + 2 * PANEL * group)
                with self._written(b.icmp_signed("<", const(2 * p), self.valid_cols), masked):
                    b.store(pairs, dst, align=2)

    def store_pair_at(self, p: ir.Value, out: ir.Value, pair_stride: int, masked: bool) -> None:
        """K pair p (a run-time index) of rows contiguous in X, `pair_stride` elements apart
        from `out`."""
        dst = element_ptr(self.b, out, ScalarType.BF16, self.b.mul(p, const(pair_stride)))
        self._store_pair(p, dst, masked)

    def _store_pair(self, p: int | ir.Value, dst: ir.Value, masked: bool) -> None:
        """K pair p of the block's rows, or of its first 8 (`_width`)."""
        b = self.b
        if self.rs == 1:
            height = self._width(0, self.height, PANEL // 2)
            b.store(self._pair_vector(p, masked, height), dst, align=2)
            return
        assert isinstance(p, int)
        with for_range(b, 0, 2 * self.height, name="i") as i:
            r, c = b.udiv(i, const(2)), b.add(const(2 * p), b.urem(i, const(2)))
            inside_rows = b.icmp_signed("<", r, self.valid_rows)
            ok = b.and_(inside_rows, b.icmp_signed("<", c, self.valid_cols))
            self._copy(ok, self._at(r, c), element_ptr(b, dst, ScalarType.BF16, i))

    def _pair_vector(self, p: int | ir.Value, masked: bool, height: int) -> ir.Value:
        """Columns 2p and 2p + 1 of the first `height` of X's rows (contiguous), interleaved:
        the flat-to-VNNI shuffle."""
        b = self.b
        t = vec.vector_type(I16, height)
        halves = []
        for half in (0, 1):
            c = as_value(b, add(b, mul(b, p, 2), half))
            mask = None
            if masked:
                rows = vec.dynamic_mask(b, height, 0, self.valid_rows)
                inside = b.icmp_signed("<", c, self.valid_cols)
                mask = b.and_(rows, vec.splat(b, inside, height))
            halves.append(vec.load(b, t, self._at(const(0), c), mask, 2))
        return vec.interleave(b, halves[0], halves[1])

    @contextmanager
    def _written(self, holds_data: ir.Value, masked: bool) -> Iterator[None]:
        """Around the store of one row or K pair of an edge block: for readers of exact
        tiles, only where it holds data (a full tile reads the zeros of the rest)."""
        if not (masked and self.exact):
            yield
            return
        with self.b.if_then(holds_data):
            yield

    def _copy(self, ok: ir.Value, src: ir.Value, dst: ir.Value) -> None:
        b = self.b
        with b.if_else(ok) as (inside, outside):
            with inside:
                b.store(b.load(src, typ=I16), dst)  # the bits, as they are
            with outside:
                b.store(ir.Constant(I16, 0), dst)
