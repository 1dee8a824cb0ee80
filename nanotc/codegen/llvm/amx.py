"""Emission of the AMX instructions of the tile dialect: `tile.pack_amx` and `tile.amx_gemm`.

Tiles are LLVM `x86_amx` values through the `.internal` intrinsics, which carry each tile's
shape; LLVM assigns tile registers and writes the tile configuration (ldtilecfg) itself.
Accumulator tiles are carried through the K loop in phi nodes, so they stay in tile registers.
A full 32 x 32 block of an f32 C with alpha 1 accumulates onto C's own tiles (loaded before
the K loop, stored after it); other blocks go through a stack buffer and masked vectors.
A process must ask Linux for the AMX state before running such code
(`nanotc.runtime.amx.enable`).
"""

from __future__ import annotations

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
    mul,
)
from nanotc.codegen.llvm.types import F32, I16, I32, PTR, MemrefValue, const
from nanotc.ir.instructions import Transpose
from nanotc.ir.tile import TileAmxGemm, TilePackAmx
from nanotc.ir.types import ScalarType
from nanotc.ir.values import Constant
from nanotc.lowering.gemm_amx import CHUNK, PANEL

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
    args = [_ROWS, _COLS, ptr, const(TILE_BYTES)]
    return intrinsic(b, "llvm.x86.tileloadd64.internal", AMX, args)


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

    c: MemrefValue = e.value(inst.c)
    if not _direct_c(inst, c):
        zero = intrinsic(b, "llvm.x86.tilezero.internal", AMX, [_ROWS, _COLS])
        _epilogue(e, inst, k_loop([zero] * 4))
        return
    full = b.and_(
        b.icmp_signed("==", e.index_value(inst.rows), const(2 * PANEL)),
        b.icmp_signed("==", e.index_value(inst.cols), const(2 * PANEL)),
    )
    with b.if_else(full, likely=True) as (whole, edge):
        with whole:  # accumulate onto C's own tiles: no buffer, no vector pass
            ld = mul(b, c.stride[1], F32_BYTES)
            corners = [_c_tile(b, c, index) for index in range(4)]
            loaded = [
                intrinsic(
                    b, "llvm.x86.tileloadd64.internal", AMX, [_ROWS, _COLS, p, as_value(b, ld)]
                )
                for p in corners
            ]
            for p, tile in zip(corners, k_loop(loaded)):
                intrinsic(
                    b,
                    "llvm.x86.tilestored64.internal",
                    ir.VoidType(),
                    [_ROWS, _COLS, p, as_value(b, ld), tile],
                )
        with edge:
            zero = intrinsic(b, "llvm.x86.tilezero.internal", AMX, [_ROWS, _COLS])
            _epilogue(e, inst, k_loop([zero] * 4))


def _direct_c(inst: TileAmxGemm, c: MemrefValue) -> bool:
    """C's tiles can take the accumulation directly: alpha 1, f32, columns contiguous."""
    alpha_one = isinstance(inst.alpha, Constant) and inst.alpha.value == 1
    return alpha_one and c.type.element is ScalarType.F32 and c.stride[0] == 1


def _c_tile(b: ir.IRBuilder, c: MemrefValue, index: int) -> ir.Value:
    """Tile (n_tile, m_tile) of a 32 x 32 block of C: rows are columns of C."""
    n_tile, m_tile = divmod(index, 2)
    offset = add(b, mul(b, n_tile * PANEL, c.stride[1]), m_tile * PANEL)
    return element_ptr(b, c.ptr, ScalarType.F32, offset)


def _epilogue(e: FunctionEmitter, inst: TileAmxGemm, acc: list[ir.Value]) -> None:
    """The 32 x 32 f32 tile block goes to a stack buffer (column-major: a tile row is a
    column segment of C), then C[:rows, :cols] += alpha * block with masked vectors."""
    b = e.b
    block = e.state.entry.alloca(ir.ArrayType(F32, 32 * 32))
    block.align = 64
    block.type = PTR
    for index, tile in enumerate(acc):
        n_tile, m_tile = divmod(index, 2)
        ptr = element_ptr(b, block, ScalarType.F32, n_tile * PANEL * 32 + m_tile * PANEL)
        args = [_ROWS, _COLS, ptr, const(32 * F32_BYTES), tile]
        intrinsic(b, "llvm.x86.tilestored64.internal", ir.VoidType(), args)
    c: MemrefValue = e.value(inst.c)
    element = c.type.element
    alpha = vec.splat(b, _f32(e, inst), PANEL)
    rows = e.index_value(inst.rows)
    f32x16 = vec.vector_type(F32, PANEL)
    with for_range(b, 0, e.index_value(inst.cols), name="n") as n:
        column = element_ptr(b, c.ptr, element, b.mul(n, as_value(b, c.stride[1])))
        for v in (0, 1):
            mask = vec.dynamic_mask(b, PANEL, v * PANEL, rows)
            at = b.add(b.mul(n, const(32)), const(v * PANEL))
            part = b.load(element_ptr(b, block, ScalarType.F32, at), typ=f32x16, align=4)
            ptr = element_ptr(b, column, element, mul(b, v * PANEL, c.stride[0]))
            raw = vec.load(b, vec.memory_vector(element, PANEL), ptr, mask, element.size)
            old = vec.to_register(b, raw, element, f32x16)
            new = vec.fma(b, part, alpha, old, True)
            stored = float16.narrow(b, new, element) if element is ScalarType.BF16 else new
            vec.store(b, stored, ptr, mask, element.size)


def _f32(e: FunctionEmitter, inst: TileAmxGemm) -> ir.Value:
    return convert(e.b, e.value(inst.alpha), inst.alpha.type, ScalarType.F32)


@emits(TilePackAmx)
def _pack_amx(e: FunctionEmitter, inst: TilePackAmx) -> None:
    """X = op(source)[row:, col:] into 16-row panels, chunks of 32 K (zero beyond the block):
    rows layout  X(r, c) -> panel r//16, chunk c//32, at (r%16)*32 + c%32;
    pairs layout X(r, c) -> panel r//16, chunk c//32, at ((c%32)//2)*32 + (r%16)*2 + c%2."""
    b = e.b
    source: MemrefValue = e.value(inst.source)
    target: MemrefValue = e.value(inst.target)
    r_mode, c_mode = (1, 0) if inst.trans is Transpose.T else (0, 1)
    rows, cols = e.index_value(inst.rows), e.index_value(inst.cols)
    row_offset = b.mul(e.index_value(inst.row), as_value(b, source.stride[r_mode]))
    corner = b.add(row_offset, b.mul(e.index_value(inst.col), as_value(b, source.stride[c_mode])))
    base = element_ptr(b, source.ptr, ScalarType.BF16, corner)
    chunks = b.udiv(b.add(cols, const(CHUNK - 1)), const(CHUNK))
    panels = b.udiv(b.add(rows, const(PANEL - 1)), const(PANEL))
    panel_size = b.mul(chunks, const(PANEL * CHUNK))
    strides = (source.stride[r_mode], source.stride[c_mode])
    with for_range(b, 0, panels, name="panel") as q, for_range(b, 0, chunks, name="chunk") as s:
        start = b.add(b.mul(q, panel_size), b.mul(s, const(PANEL * CHUNK)))
        out = element_ptr(b, target.ptr, ScalarType.BF16, start)
        r0, c0 = b.mul(q, const(PANEL)), b.mul(s, const(CHUNK))
        block = _Block(b, base, strides, r0, c0, b.sub(rows, r0), b.sub(cols, c0))
        store = block.store_pairs if inst.pairs else block.store_rows
        whole = b.and_(
            b.icmp_signed(">=", block.valid_rows, const(PANEL)),
            b.icmp_signed(">=", block.valid_cols, const(CHUNK)),
        )
        with b.if_else(whole, likely=True) as (full, edge):
            with full:  # most blocks: no masks to build or apply
                store(out, masked=False)
            with edge:
                store(out, masked=True)


class _Block:
    """One 16 x 32 piece of X (rows r0.., columns c0..) with `valid_rows`, `valid_cols`."""

    def __init__(self, b: ir.IRBuilder, base: ir.Value, strides: tuple, r0: ir.Value,
                 c0: ir.Value, valid_rows: ir.Value, valid_cols: ir.Value):  # fmt: skip
        self.b, self.base, (self.rs, self.cs) = b, base, strides
        self.r0, self.c0 = r0, c0
        self.valid_rows, self.valid_cols = valid_rows, valid_cols

    def _at(self, r: ir.Value, c: ir.Value) -> ir.Value:
        b = self.b
        row = b.mul(b.add(self.r0, r), as_value(b, self.rs))
        offset = b.add(row, b.mul(b.add(self.c0, c), as_value(b, self.cs)))
        return element_ptr(b, self.base, ScalarType.BF16, offset)

    def store_rows(self, out: ir.Value, masked: bool) -> None:
        """16 rows of 32 consecutive columns: one (masked) 64-byte copy per row where X's
        columns are contiguous, element by element otherwise."""
        b = self.b
        t = vec.vector_type(I16, CHUNK)
        for r in range(PANEL):
            dst = element_ptr(b, out, ScalarType.BF16, r * CHUNK)
            inside = b.icmp_signed("<", const(r), self.valid_rows)
            if self.cs == 1:
                mask = None
                if masked:
                    columns = vec.dynamic_mask(b, CHUNK, 0, self.valid_cols)
                    mask = b.and_(columns, vec.splat(b, inside, CHUNK))
                b.store(vec.load(b, t, self._at(const(r), const(0)), mask, 2), dst, align=2)
            else:
                with for_range(b, 0, CHUNK, name="c") as c:
                    ok = b.and_(inside, b.icmp_signed("<", c, self.valid_cols))
                    self._copy(ok, self._at(const(r), c), element_ptr(b, dst, ScalarType.BF16, c))

    def store_pairs(self, out: ir.Value, masked: bool) -> None:
        """16 K-pairs of 16 rows: two columns interleaved per 64 bytes where X's rows are
        contiguous (the flat-to-VNNI shuffle), element by element otherwise."""
        b = self.b
        t = vec.vector_type(I16, PANEL)
        order = [i // 2 + (PANEL if i % 2 else 0) for i in range(2 * PANEL)]
        for p in range(CHUNK // 2):
            dst = element_ptr(b, out, ScalarType.BF16, p * 2 * PANEL)
            if self.rs == 1:
                halves = []
                for c in (2 * p, 2 * p + 1):
                    mask = None
                    if masked:
                        rows = vec.dynamic_mask(b, PANEL, 0, self.valid_rows)
                        inside = b.icmp_signed("<", const(c), self.valid_cols)
                        mask = b.and_(rows, vec.splat(b, inside, PANEL))
                    halves.append(vec.load(b, t, self._at(const(0), const(c)), mask, 2))
                interleave = ir.Constant(vec.vector_type(I32, 2 * PANEL), order)
                pairs = b.shuffle_vector(halves[0], halves[1], interleave)
                b.store(pairs, dst, align=2)
            else:
                with for_range(b, 0, 2 * PANEL, name="i") as i:
                    r, c = b.udiv(i, const(2)), b.add(const(2 * p), b.urem(i, const(2)))
                    inside_rows = b.icmp_signed("<", r, self.valid_rows)
                    ok = b.and_(inside_rows, b.icmp_signed("<", c, self.valid_cols))
                    self._copy(ok, self._at(r, c), element_ptr(b, dst, ScalarType.BF16, i))

    def _copy(self, ok: ir.Value, src: ir.Value, dst: ir.Value) -> None:
        b = self.b
        with b.if_else(ok) as (inside, outside):
            with inside:
                b.store(b.load(src, typ=I16), dst)  # the bits, as they are
            with outside:
                b.store(ir.Constant(I16, 0), dst)
