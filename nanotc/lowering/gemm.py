"""gemm lowering: each supported gemm takes the direct path (register tiles straight on the
operands) or, when the direct path would run out of cache, the blocked path (packed blocks),
or for a static gemm whose A (one K block of it) or B fits half of L2 an in-place path (K
blocks of the direct path, or row panels of A). With dynamic sizes the direct and blocked
paths are both generated and a run-time test of the sizes picks one. A gemm into a static
bf16 or f16 C takes these paths on an f32 copy of C (`through_f32_scratch`)."""

from __future__ import annotations

from nanotc.ir.builder import Builder
from nanotc.ir.core import Function, Instruction, Region, rewrite_bottom_up
from nanotc.ir.instructions import Axpby, Gemm, Transpose
from nanotc.ir.tile import TilePack
from nanotc.ir.types import DYNAMIC, MemRefType, ScalarType
from nanotc.ir.values import Constant, Value, literal_in
from nanotc.lowering.choices import DEFAULT_OPTIONS, CompileOptions
from nanotc.lowering.gemm_amx import AmxPath, amx_paths, tile_gemm_amx
from nanotc.lowering.gemm_blocked import needs_blocking, tile_gemm_blocked
from nanotc.lowering.gemm_in_place import in_place_path, tile_gemm_in_place
from nanotc.lowering.gemm_tiles import gemm_extents, supported, tile_gemm
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
    """A gemm into a static bf16 or f16 C, which computes in f32 and rounds once: its tiles
    work on an f32 copy of C (`_through_f32_scratch`), as nanokernels store f32 and f64 only.
    Not an atomic one: work-groups update its C together, and a copy would lose their sums."""
    c = g.c.type
    sixteen = c.element in (ScalarType.BF16, ScalarType.F16)
    return sixteen and DYNAMIC not in c.shape and not g.atomic


def _through_f32_scratch(g: Gemm, target: Target, options: CompileOptions) -> list[Instruction]:
    """C widened into an f32 scratch (unless beta is 0: C is not read), the gemm on the
    scratch, then the scratch rounded into C: the language's f32 arithmetic, rounded once on
    store. The gemm was computed element by element in loops of scalar code (bf16 64^3:
    1.7 GFLOP/s against 30 for the same gemm into f32 C); the two passes over C cost a
    fraction of the gemm's K steps."""
    b = Builder(Region())
    scratch = b.alloca(MemRefType.packed(ScalarType.F32, list(g.c.type.shape)))
    if literal_in(g.beta, ScalarType.F32) != 0:
        _convert(b, g.c, scratch)
    staged = Builder(Region())
    staged.gemm(g.trans_a, g.trans_b, g.alpha, g.a, g.b, g.beta, scratch)
    (gemm,) = staged.region.instructions
    assert isinstance(gemm, Gemm)
    b.region.instructions.extend(lower_gemm(gemm, target, options))
    _convert(b, scratch, g.c)
    return b.region.instructions


def _convert(b: Builder, source: Value, target: Value) -> None:
    """target := source, converted (exactly from 16-bit floats to f32, rounded the other way)."""
    one, zero = Constant(1.0, ScalarType.F32), Constant(0.0, ScalarType.F32)
    b.add(Axpby, trans=Transpose.N, alpha=one, a=source, beta=zero, b=target)


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


def _direct(g: Gemm, target: Target, options: CompileOptions) -> list[Instruction]:
    """Register tiles on the operands. A gathered A (rows of op(A) not adjacent: a transposed
    A) of static size is first packed column-major into scratch (`packed_a`), so the
    nanokernels load its columns as vectors (the pack transposes in registers): .t.n ran
    1.1-1.6x faster so at 8^3-35x9x35, 3.8x at 64^3 (f32; f64 1.4-1.6x)."""
    m, _, k = gemm_extents(g)
    gathered = not row_stride_is_unit(g.a.type, g.trans_a)
    if not gathered or m is None or k is None:
        return tile_gemm(g, target, options)
    element = packed_a(g, target)
    if element is None:
        return tile_gemm(g, target, options)
    b = Builder(Region())
    a = b.alloca(MemRefType.packed(element, [m, k]))
    b.add(TilePack, trans=g.trans_a, source=g.a, row=0, col=0, rows=m, cols=k, panel=m,
          target=a)  # fmt: skip
    staged = Builder(Region())
    staged.gemm(Transpose.N, g.trans_b, g.alpha, a, g.b, g.beta, g.c, atomic=g.atomic)
    (packed,) = staged.region.instructions
    assert isinstance(packed, Gemm)
    b.region.instructions.extend(tile_gemm(packed, target, options))
    return b.region.instructions
