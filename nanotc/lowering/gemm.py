"""gemm lowering: each supported gemm takes the direct path (register tiles straight on the
operands) or, when the direct path would run out of cache, the blocked path (packed blocks),
or for a static gemm whose A (one K block of it) or B fits half of L2 an in-place path (K
blocks of the direct path, or row panels of A). With dynamic sizes the direct and blocked
paths are both generated and a run-time test of the sizes picks one, unless the blocked path
is always taken (`gemm_blocked.needs_blocking`: a gathered A). A gemm into a bf16 or
f16 C takes these paths into f32 scratch (`through_f32_scratch`)."""

from __future__ import annotations

import math

from nanotc.ir.builder import Builder
from nanotc.ir.core import Function, Instruction, Region, rewrite_bottom_up
from nanotc.ir.instructions import Axpby, BinaryOp, Expand, Gemm, Transpose
from nanotc.ir.tile import TilePack
from nanotc.ir.types import DYNAMIC, MemRefType, ScalarType
from nanotc.ir.values import Constant, Value
from nanotc.lowering.choices import DEFAULT_OPTIONS, CompileOptions
from nanotc.lowering.gemm_amx import AmxPath, amx_paths, tile_gemm_amx
from nanotc.lowering.gemm_blocked import block_extent, needs_blocking, tile_gemm_blocked
from nanotc.lowering.gemm_few_rows import (
    few_rows_test,
    row_block_test,
    tile_few_rows,
    tile_row_block,
)
from nanotc.lowering.gemm_in_place import in_place_path, tile_gemm_in_place
from nanotc.lowering.gemm_tiles import (
    Index,
    gemm_extents,
    restaged,
    rows_as_dots,
    supported,
    tile_gemm,
    tile_row_dots,
)
from nanotc.lowering.nanokernel import row_stride_is_unit
from nanotc.targets import Target


def lower_gemms(func: Function, target: Target, options: CompileOptions = DEFAULT_OPTIONS) -> None:
    paths = amx_paths(func, target)

    def lower(inst: Instruction) -> list[Instruction]:
        if not isinstance(inst, Gemm):
            return [inst]
        return lower_gemm(inst, target, options, paths.get(id(inst)))

    rewrite_bottom_up(func.body, lower)


def lower_gemm(
    g: Gemm,
    target: Target,
    options: CompileOptions = DEFAULT_OPTIONS,
    amx: AmxPath | None = None,
) -> list[Instruction]:
    """Tiles for g: AMX tiles by `amx` (`amx_paths` decides for a whole function), else
    vector nanokernels; g itself where no nanokernel computes it (the emitter's loops do);
    nothing where C is statically empty (the paths size panels and tiles by M and N)."""
    m, n, _ = gemm_extents(g)
    if 0 in (m, n):
        return []
    if amx is not None:
        return tile_gemm_amx(g, target, amx)
    if through_f32_scratch(g):
        return _through_f32_scratch(g, target, options)
    if not supported(g):
        return [g]
    if rows_as_dots(g):  # every B column read once: no blocking pays
        return tile_row_dots(g, target)
    b = Builder(Region())
    few_rows = few_rows_test(b, g)
    path = tile_few_rows
    if few_rows is False:
        few_rows = row_block_test(b, g, target)
        path = tile_row_block
    if isinstance(few_rows, bool):
        return path(g, target) if few_rows else _tiles(g, target, options)
    branch = b.if_(few_rows)
    branch.then.region.instructions.extend(path(g, target))
    assert branch.otherwise is not None
    branch.otherwise.region.instructions.extend(_tiles(g, target, options))
    return b.region.instructions


def _tiles(g: Gemm, target: Target, options: CompileOptions) -> list[Instruction]:
    """The register tiles' paths: direct, in place or blocked, or a run-time choice between
    the direct and the blocked path."""
    b = Builder(Region())
    blocked = needs_blocking(b, g, target)
    if isinstance(blocked, bool):
        if not blocked:
            return _direct(g, target, options)
        in_place = in_place_path(g, target)
        if in_place is not None:
            return tile_gemm_in_place(g, in_place, target, options)
        return tile_gemm_blocked(g, target, options)
    branch = b.if_(blocked)
    branch.then.region.instructions.extend(tile_gemm_blocked(g, target, options))
    assert branch.otherwise is not None
    branch.otherwise.region.instructions.extend(_direct(g, target, options))
    return b.region.instructions


def through_f32_scratch(g: Gemm) -> bool:
    """A gemm into a bf16 or f16 C, which computes in f32 and rounds once: its tiles work on
    f32 scratch (`_through_f32_scratch`), as nanokernels store f32 and f64 only."""
    return g.c.type.element in (ScalarType.BF16, ScalarType.F16)


PANEL_ROWS = 2048
PANEL_COLUMNS = 240
"""The C panels a run-time-sized bf16 or f16 gemm computes at a time into f32 scratch (1.9
MiB, heap). Each panel packs its A rows and B columns again: bf16 1000^3 ran at 0.86 of the
same gemm into f32 C in 256 x 120 panels, 0.96 in 1024 x 240, 0.99 in 2048 x 240."""
WHOLE_SCRATCH_BYTES = 16 * 1024 * 1024
"""A static C's f32 copy up to this size is one scratch (every launch chunk, so every
thread, holds one): a larger C is taken in panels, as a run-time one."""


def _through_f32_scratch(g: Gemm, target: Target, options: CompileOptions) -> list[Instruction]:
    """alpha op(A) op(B) into f32 scratch by the f32-output gemm's paths (beta 0: the
    scratch is not read), then C := scratch + beta C (`axpby`, atomic for an atomic gemm):
    the language's f32 arithmetic, rounded once on store. The gemm was computed element by
    element in loops of scalar code (bf16 64^3: 1.7 GFLOP/s against 30 for the same gemm
    into f32 C); the axpby costs a fraction of the gemm's K steps. A static C of at most
    WHOLE_SCRATCH_BYTES in f32 has one scratch of its size; a larger one, or one of run-time
    size, is taken in panels of PANEL_ROWS x PANEL_COLUMNS."""
    b = Builder(Region())
    whole = whole_scratch_gemm(b, g)
    if whole is not None:
        _through_scratch(b, g, whole, g.c, target, options)
        return b.region.instructions
    shape = g.c.type.shape
    scratch = b.alloca(MemRefType.packed(ScalarType.F32, [PANEL_ROWS * PANEL_COLUMNS]))
    rows, cols = (shape[i] if shape[i] != DYNAMIC else b.size(g.c, i) for i in (0, 1))
    with b.for_(0, cols, PANEL_COLUMNS) as (over_columns, j):
        nb = block_extent(over_columns, cols, j, PANEL_COLUMNS)
        with over_columns.for_(0, rows, PANEL_ROWS) as (body, i):
            mb = block_extent(body, rows, i, PANEL_ROWS)
            a, b_, c = _panel_operands(body, g, (i, j), (mb, nb))
            panel = _compact(body, scratch, mb, nb)
            gemm = restaged(g, a=a, b=b_, beta=Constant(0.0, g.beta.type), c=panel, atomic=False)
            _through_scratch(body, g, gemm, c, target, options)
    return b.region.instructions


def whole_scratch_gemm(b: Builder, g: Gemm) -> Gemm | None:
    """The f32-output gemm (beta 0) the tiles of a 16-bit C compute where C takes one f32
    scratch of its own size (static, at most WHOLE_SCRATCH_BYTES), its alloca added to b;
    None where C is taken in panels."""
    shape = g.c.type.shape
    if DYNAMIC in shape or math.prod(shape) * 4 > WHOLE_SCRATCH_BYTES:
        return None
    scratch = b.alloca(MemRefType.packed(ScalarType.F32, list(shape)))
    return restaged(g, beta=Constant(0.0, g.beta.type), c=scratch, atomic=False)


def _panel_operands(b: Builder, g: Gemm, at: tuple[Value, Value], extents: tuple[Index, Index]
                    ) -> tuple[Value, Value, Value]:  # fmt: skip
    """op(A)'s rows, op(B)'s columns and C's block for the C panel at `at` of `extents`."""
    (i, j), (mb, nb) = at, extents
    rows_of_a = [i, 0], [mb, "?"]
    columns_of_b = [0, j], ["?", nb]
    a = b.subview(g.a, *(rows_of_a if g.trans_a is Transpose.N else _swapped(rows_of_a)))
    b_ = b.subview(g.b, *(columns_of_b if g.trans_b is Transpose.N else _swapped(columns_of_b)))
    return a, b_, b.subview(g.c, [i, j], [mb, nb])


def _compact(b: Builder, scratch: Value, rows: Index, cols: Index) -> Value:
    """The first rows x cols of flat scratch as a column-major matrix whose columns are
    adjacent (not PANEL_ROWS apart: a small panel stays in a few pages and cache sets)."""
    flat = b.subview(scratch, [0], [b.index(BinaryOp.MUL, rows, cols)])
    return b.add(Expand, source=flat, mode=0, shape=[rows, cols])


def _swapped(view: tuple[list, list]) -> tuple[list, list]:
    offsets, sizes = view
    return offsets[::-1], sizes[::-1]


def _through_scratch(b: Builder, g: Gemm, gemm: Gemm, c: Value, target: Target,
                     options: CompileOptions) -> None:  # fmt: skip
    """`gemm` (alpha op(A) op(B) into f32 scratch) tiled, then c := scratch + beta c, with
    g's beta and atomicity: one panel of g's C, or all of it."""
    b.region.instructions.extend(lower_gemm(gemm, target, options))
    one = Constant(1.0, ScalarType.F32)
    b.add(Axpby, trans=Transpose.N, atomic=g.atomic, alpha=one, a=gemm.c, beta=g.beta, b=c)


def packed_a(g: Gemm, target: Target) -> ScalarType | None:
    """The element type of the scratch a gathered A of `g` is packed into (None: not
    packed): f32 and f64 as they are, and 16-bit floats widened to f32 on the way where the
    tiles would widen them anyway (not bf16 on a target with fast bf16 dot products, whose
    tiles pack such an A into VNNI pairs: `gemm_pairs`)."""
    element = g.a.type.element
    if element in (ScalarType.F32, ScalarType.F64):
        return element
    widened = element is ScalarType.F16 or (
        element is ScalarType.BF16 and not target.bf16_gemm_by_dot
    )
    return ScalarType.F32 if widened and g.c.type.element is ScalarType.F32 else None


def widens_b(g: Gemm, target: Target) -> bool:
    """Whether the tiles read a static f16 B from an f32 copy made once (`_direct`) rather
    than converting an element at every broadcast (`vpbroadcastw` and `vcvtph2ps`, for each
    row of tiles again). f16 batches in L2 on a Zen 3 ran 1.2-3.1x faster (8^3 3.1x, 32^3
    and 64^3 1.6-1.7x, 56x9x9 2.0x, 35x9x35 1.5x, 20x9x20 1.2x). Not bf16: its broadcast
    widens with an and, and the copy ran 0.88-1.0x. Up to half of L2 for the copy, beside
    the operands."""
    t = g.b.type
    small = DYNAMIC not in t.shape and math.prod(t.shape) * 4 <= target.l2_bytes // 2
    return t.element is ScalarType.F16 and g.c.type.element is ScalarType.F32 and small


def _direct(g: Gemm, target: Target, options: CompileOptions) -> list[Instruction]:
    """Register tiles on the operands, or on the copies `direct_gemm` makes of them."""
    b = Builder(Region())
    b.region.instructions.extend(tile_gemm(direct_gemm(b, g, target), target, options))
    return b.region.instructions


def direct_gemm(b: Builder, g: Gemm, target: Target) -> Gemm:
    """The gemm the direct path's tiles compute (the copies it reads added to b): g with a
    static f16 B first widened into f32 scratch (`widens_b`), and a gathered A (rows of
    op(A) not adjacent: a transposed A) of static size packed column-major into scratch
    (`packed_a`), so the nanokernels load its columns as vectors (the pack transposes in
    registers): .t.n ran 1.1-1.6x faster so at 8^3-35x9x35, 3.8x at 64^3 (f32; f64
    1.4-1.6x)."""
    if widens_b(g, target):
        scratch = b.alloca(MemRefType.packed(ScalarType.F32, list(g.b.type.shape)))
        one, zero = Constant(1.0, ScalarType.F32), Constant(0.0, ScalarType.F32)
        b.add(Axpby, trans=Transpose.N, alpha=one, a=g.b, beta=zero, b=scratch)
        g = restaged(g, b=scratch)
    return _with_packed_a(b, g, target)


def _with_packed_a(b: Builder, g: Gemm, target: Target) -> Gemm:
    """g reading a gathered static A from its pack (`packed_a`), the pack added to b; else g."""
    m, _, k = gemm_extents(g)
    gathered = not row_stride_is_unit(g.a.type, g.trans_a)
    element = packed_a(g, target)
    if not gathered or m is None or k is None or element is None:
        return g
    a = b.alloca(MemRefType.packed(element, [m, k]))
    b.add(TilePack, trans=g.trans_a, source=g.a, row=0, col=0, rows=m, cols=k, panel=m,
          target=a)  # fmt: skip
    return restaged(g, trans_a=Transpose.N, a=a)
