"""Memory and view instructions: load, store, size, subview, expand, fuse, alloca, the
`tile.prefetch` hint, and the instructions with no code on a CPU (lifetime_stop, barrier).

Views never copy: they compute a new data pointer and new sizes/strides. Where the result
type knows a size or stride statically, that value is used and no code is emitted for it.
"""

from __future__ import annotations

from llvmlite import ir

from nanotc.codegen.llvm.emitter import FunctionEmitter, emits
from nanotc.codegen.llvm.helpers import (
    CACHE_LINE_BYTES,
    add,
    as_value,
    div,
    element_ptr,
    for_range,
    linear_offset,
    load_scalar,
    memref_element,
    mul,
    prefetch,
    store_scalar,
    sub,
)
from nanotc.codegen.llvm.types import (
    I8,
    I64,
    PTR,
    Dim,
    GroupValue,
    MemrefValue,
    const,
    memory_type,
    transposed,
)
from nanotc.ir.instructions import (
    Alloca,
    Barrier,
    Expand,
    Fuse,
    LifetimeStop,
    Load,
    Size,
    Store,
    Subview,
)
from nanotc.ir.tile import (
    TileDisjoint,
    TileLineLead,
    TilePrefetch,
    TileStride,
    TileTransposed,
)
from nanotc.ir.types import MemRefType
from nanotc.ir.values import Constant, Value

STACK_ALLOCA_LIMIT = 64 * 1024
"""Allocas up to this size live on the stack; larger ones in the per-chunk scratch area."""
UNROLLED_PREFETCH_LINES = 256
"""`tile.prefetch` of up to this many lines is straight-line code; longer ones loop."""


def _pick(static: int | None, computed: Dim) -> Dim:
    return computed if static is None else static


@emits(Load)
def _load(e: FunctionEmitter, inst: Load) -> None:
    source = e.value(inst.source)
    indices = [e.dim(i) for i in inst.indices]
    if isinstance(source, GroupValue):
        e.define(inst.result, group_member(e.b, source, indices[0]))
    else:
        ptr = memref_element(e.b, source, indices)
        e.define(inst.result, load_scalar(e.b, ptr, source.type.element))


def group_member(b: ir.IRBuilder, g: GroupValue, index: Dim) -> MemrefValue:
    i = as_value(b, index)
    base = b.load(b.gep(g.members, [i], source_etype=PTR), typ=PTR)
    t = g.type.memref
    ptr = element_ptr(b, base, t.element, g.offset)

    def entry(arrays: dict[int, ir.Value], mode: int, static: int | None) -> Dim:
        if static is not None:
            return static
        return b.load(b.gep(arrays[mode], [i], source_etype=I64), typ=I64)

    shape = tuple(entry(g.member_shapes, k, s) for k, s in enumerate(t.shape))
    stride = tuple(entry(g.member_strides, k, s) for k, s in enumerate(t.stride))
    return MemrefValue(t, ptr, shape, stride)


@emits(Store)
def _store(e: FunctionEmitter, inst: Store) -> None:
    target: MemrefValue = e.value(inst.target)
    ptr = memref_element(e.b, target, [e.dim(i) for i in inst.indices])
    store_scalar(e.b, e.value(inst.value), ptr, target.type.element)


@emits(Size)
def _size(e: FunctionEmitter, inst: Size) -> None:
    source: MemrefValue = e.value(inst.source)
    e.define(inst.result, as_value(e.b, source.shape[inst.mode]))


@emits(TileStride)
def _stride(e: FunctionEmitter, inst: TileStride) -> None:
    source: MemrefValue = e.value(inst.source)
    e.define(inst.result, as_value(e.b, source.stride[inst.mode]))


@emits(Subview)
def _subview(e: FunctionEmitter, inst: Subview) -> None:
    source: MemrefValue = e.value(inst.source)
    result_type: MemRefType = inst.result.type
    offsets = [e.dim(o) for o in inst.offsets]
    shape: list[Dim] = []
    stride: list[Dim] = []
    for mode, (offset, size) in enumerate(zip(offsets, inst.sizes)):
        if size is None:
            continue
        if isinstance(size, Constant) and size.is_wildcard:
            computed = sub(e.b, source.shape[mode], offset)
        else:
            computed = e.dim(size)
        shape.append(_pick(result_type.shape[len(shape)], computed))
        stride.append(source.stride[mode])
    ptr = element_ptr(
        e.b, source.ptr, source.type.element, linear_offset(e.b, offsets, source.stride)
    )
    e.define(inst.result, MemrefValue(result_type, ptr, tuple(shape), tuple(stride)))


@emits(TilePrefetch)
def _prefetch(e: FunctionEmitter, inst: TilePrefetch) -> None:
    """One prefetch per cache line of each column (of the whole block when the columns are
    adjacent), at static sizes and any column stride; addresses without `inbounds`, as the
    view may lie past the array (a prefetch never faults). The columns are walked in a loop,
    and a block's lines beyond UNROLLED_PREFETCH_LINES, so large views do not grow the code
    (unrolled, the 14 columns a blocked tile prefetches ahead added 16-24% to its kernels'
    compile times)."""
    view: MemrefValue = e.value(inst.source)
    rows, cols = (view.shape + (1, 1))[:2]
    stride = view.stride[1] if len(view.stride) > 1 else 0
    if stride == rows:  # dense: one block
        rows, cols = rows * cols, 1
    size = view.type.element.size
    column_bytes = rows * size
    lines = [*range(0, column_bytes, CACHE_LINE_BYTES), column_bytes - 1]
    b = e.b
    stride_bytes = mul(b, stride, size)

    def fetch(offset: Dim) -> None:
        prefetch(b, b.gep(view.ptr, [as_value(b, offset)], source_etype=I8), inst.write)

    if cols == 1 and len(lines) <= UNROLLED_PREFETCH_LINES:
        for byte in lines:
            fetch(byte)
    elif cols == 1:
        with for_range(b, 0, column_bytes, CACHE_LINE_BYTES, name="line") as byte:
            fetch(byte)
        fetch(column_bytes - 1)
    else:
        with for_range(b, 0, cols, name="column", vectorize=False, unroll=False) as j:
            start = mul(b, j, stride_bytes)
            for byte in lines:
                fetch(add(b, start, byte))


@emits(TileLineLead)
def _line_lead(e: FunctionEmitter, inst: TileLineLead) -> None:
    b = e.b
    view: MemrefValue = e.value(inst.source)
    address = b.ptrtoint(view.ptr, I64)
    to_boundary = b.and_(b.neg(address), ir.Constant(I64, e.state.target.line_bytes - 1))
    size = ir.Constant(I64, view.type.element.size)
    e.define(inst.result, b.udiv(to_boundary, size))


@emits(TileTransposed)
def _transposed(e: FunctionEmitter, inst: TileTransposed) -> None:
    e.define(inst.result, transposed(e.value(inst.source)))


@emits(TileDisjoint)
def _disjoint(e: FunctionEmitter, inst: TileDisjoint) -> None:
    b = e.b
    (x_start, x_end), (y_start, y_end) = (_byte_span(e, v) for v in (inst.lhs, inst.rhs))
    apart = b.or_(b.icmp_unsigned("<=", x_end, y_start), b.icmp_unsigned("<=", y_end, x_start))
    e.define(inst.result, apart)


def _byte_span(e: FunctionEmitter, value: Value) -> tuple[ir.Value, ir.Value]:
    """[first, last + 1) bytes a view addresses; empty when a mode has size 0."""
    b = e.b
    view: MemrefValue = e.value(value)
    last: Dim = 0
    empty = ir.Constant(ir.IntType(1), 0)
    for size, stride in zip(view.shape, view.stride):
        extent = as_value(b, size)
        empty = b.or_(empty, b.icmp_signed("<=", extent, const(0)))
        last = add(b, last, mul(b, b.sub(extent, const(1)), stride))
    start = b.ptrtoint(view.ptr, I64)
    length = mul(b, add(b, last, 1), view.type.element.size)
    end = b.select(empty, start, b.add(start, as_value(b, length)))
    return start, end


@emits(Expand)
def _expand(e: FunctionEmitter, inst: Expand) -> None:
    source: MemrefValue = e.value(inst.source)
    result_type: MemRefType = inst.result.type
    m = inst.mode
    entries: list[Dim | None] = [
        None if isinstance(v, Constant) and v.is_wildcard else e.dim(v) for v in inst.shape
    ]
    if None in entries:
        known: Dim = 1
        for x in entries:
            if x is not None:
                known = mul(e.b, known, x)
        inferred = _inferred_entry(e.b, source.shape[m], known)
        entries = [inferred if x is None else x for x in entries]
    strides: list[Dim] = []
    current = source.stride[m]
    for x in entries:
        strides.append(current)
        current = mul(e.b, current, x)  # type: ignore[arg-type]
    shape = source.shape[:m] + tuple(entries) + source.shape[m + 1 :]  # type: ignore[operator]
    stride = source.stride[:m] + tuple(strides) + source.stride[m + 1 :]
    e.define(inst.result, _with_static(result_type, source.ptr, shape, stride))


def _inferred_entry(b: ir.IRBuilder, size: Dim, known: Dim) -> Dim:
    """The `?` entry of an expand shape: the mode's size over the other entries' product, or
    0 beside a zero entry (which fits only an empty mode). A zero product known only at run
    time never reaches the division, where it would trap."""
    if isinstance(known, int):
        return div(b, size, known) if known else 0
    zero = b.icmp_signed("==", known, const(0))
    quotient = b.sdiv(as_value(b, size), b.select(zero, const(1), known))
    return b.select(zero, const(0), quotient)


@emits(Fuse)
def _fuse(e: FunctionEmitter, inst: Fuse) -> None:
    source: MemrefValue = e.value(inst.source)
    i, j = inst.first, inst.last
    fused: Dim = 1
    for size in source.shape[i : j + 1]:
        fused = mul(e.b, fused, size)
    shape = source.shape[:i] + (fused,) + source.shape[j + 1 :]
    stride = source.stride[: i + 1] + source.stride[j + 1 :]
    e.define(inst.result, _with_static(inst.result.type, source.ptr, shape, stride))


def _with_static(
    t: MemRefType, ptr: ir.Value, shape: tuple[Dim, ...], stride: tuple[Dim, ...]
) -> MemrefValue:
    return MemrefValue(
        t,
        ptr,
        tuple(_pick(s, c) for s, c in zip(t.shape, shape)),
        tuple(_pick(s, c) for s, c in zip(t.stride, stride)),
    )


@emits(Alloca)
def _alloca(e: FunctionEmitter, inst: Alloca) -> None:
    t: MemRefType = inst.memref
    offset = e.state.scratch_offsets.get(id(inst))
    if offset is not None:
        assert e.state.scratch is not None
        ptr = e.b.gep(e.state.scratch, [ir.Constant(I64, offset)], source_etype=I8)
    else:
        slot = e.state.entry.alloca(ir.ArrayType(memory_type(t.element), t.num_elements()))
        slot.align = 64
        slot.type = PTR  # opaque pointer: element addressing uses typed GEPs
        ptr = slot
    e.define(inst.result, MemrefValue(t, ptr, t.shape, t.stride))  # type: ignore[arg-type]


@emits(LifetimeStop, Barrier)
def _no_code(e: FunctionEmitter, inst: LifetimeStop | Barrier) -> None:
    """A work-group runs on one thread: barriers order nothing; memory of allocas is
    reclaimed when their region ends (lifetime_stop is a hint)."""
