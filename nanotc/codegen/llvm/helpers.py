"""Small emission helpers shared by all instruction families: index arithmetic that folds
static values, element addressing, the loop helpers (and the census of their loops that
LLVM's vectorizer or unroller may still work on), and scalar conversions."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from llvmlite import ir

from nanotc.codegen.llvm import float16
from nanotc.codegen.llvm.types import (
    I8,
    I32,
    I64,
    Dim,
    MemrefValue,
    const,
    memory_type,
    register_type,
)
from nanotc.ir.types import ScalarType


def as_value(b: ir.IRBuilder, x: Dim) -> ir.Value:
    return const(x) if isinstance(x, int) else x


def mul(b: ir.IRBuilder, x: Dim, y: Dim) -> Dim:
    if isinstance(x, int) and isinstance(y, int):
        return x * y
    if x == 1:
        return y
    if y == 1:
        return x
    if x == 0 or y == 0:
        return 0
    return b.mul(as_value(b, x), as_value(b, y))


def add(b: ir.IRBuilder, x: Dim, y: Dim) -> Dim:
    if isinstance(x, int) and isinstance(y, int):
        return x + y
    if x == 0:
        return y
    if y == 0:
        return x
    return b.add(as_value(b, x), as_value(b, y))


def sub(b: ir.IRBuilder, x: Dim, y: Dim) -> Dim:
    if isinstance(x, int) and isinstance(y, int):
        return x - y
    if y == 0:
        return x
    return b.sub(as_value(b, x), as_value(b, y))


def minimum(b: ir.IRBuilder, x: Dim, y: Dim) -> Dim:
    if isinstance(x, int) and isinstance(y, int):
        return min(x, y)
    x, y = as_value(b, x), as_value(b, y)
    return b.select(b.icmp_signed("<", x, y), x, y)


def div(b: ir.IRBuilder, x: Dim, y: Dim) -> Dim:
    """Exact division of extents (the checker guarantees divisibility where it is static)."""
    if isinstance(x, int) and isinstance(y, int):
        return x // y
    if y == 1:
        return x
    return b.sdiv(as_value(b, x), as_value(b, y))


def round_down(b: ir.IRBuilder, n: Dim, multiple: int) -> Dim:
    """n rounded down to a multiple of `multiple`."""
    return n - n % multiple if isinstance(n, int) else sub(b, n, b.srem(n, const(multiple)))


def compare_extent(b: ir.IRBuilder, op: str, extent: Dim, bound: int) -> bool | ir.Value:
    """`extent op bound` (op ">=" or "<="): a bool where the extent is static, else an i1."""
    if op not in (">=", "<="):  # a static "==" once answered as "<="
        raise ValueError(f"compare_extent orders extents, not {op!r}")
    if isinstance(extent, int):
        return extent >= bound if op == ">=" else extent <= bound
    return b.icmp_signed(op, extent, const(bound))


def on_element_boundary(b: ir.IRBuilder, m: MemrefValue) -> ir.Value:
    """Whether m's address is a multiple of its element size (numpy allows other ones)."""
    address = b.ptrtoint(m.ptr, I64)
    return b.icmp_unsigned("==", b.and_(address, const(m.type.element.size - 1)), const(0))


def linear_offset(b: ir.IRBuilder, indices: Sequence[Dim], strides: Sequence[Dim]) -> Dim:
    total: Dim = 0
    for i, s in zip(indices, strides):
        total = add(b, total, mul(b, i, s))
    return total


def element_ptr(b: ir.IRBuilder, ptr: ir.Value, element: ScalarType, offset: Dim) -> ir.Value:
    if offset == 0:
        return ptr
    return b.gep(ptr, [as_value(b, offset)], source_etype=memory_type(element), inbounds=True)


def memref_element(b: ir.IRBuilder, m: MemrefValue, indices: Sequence[Dim]) -> ir.Value:
    return element_ptr(b, m.ptr, m.type.element, linear_offset(b, indices, m.stride))


def load_scalar(b: ir.IRBuilder, ptr: ir.Value, t: ScalarType) -> ir.Value:
    return from_memory(b, b.load(ptr, typ=memory_type(t)), t)


def read(b: ir.IRBuilder, m: MemrefValue, indices: list[Dim], ct: ScalarType) -> ir.Value:
    """Element `indices` of m, converted to the compute type ct."""
    return convert(
        b, load_scalar(b, memref_element(b, m, indices), m.type.element), m.type.element, ct
    )


def store_scalar(b: ir.IRBuilder, value: ir.Value, ptr: ir.Value, t: ScalarType) -> None:
    b.store(to_memory(b, value, t), ptr)


def from_memory(b: ir.IRBuilder, raw: ir.Value, t: ScalarType) -> ir.Value:
    """A value as stored to its register form (i1 from a byte, 16-bit floats to f32)."""
    if t is ScalarType.I1:
        return b.icmp_unsigned("!=", raw, ir.Constant(raw.type, 0))
    return float16.widen(b, raw, t) if t in float16.SIXTEEN_BIT else raw


def to_memory(b: ir.IRBuilder, value: ir.Value, t: ScalarType) -> ir.Value:
    """A register value to its stored form (rounding 16-bit floats to nearest even)."""
    if t is ScalarType.I1:
        return b.zext(value, I8)
    return float16.narrow(b, value, t) if t in float16.SIXTEEN_BIT else value


class LoopCensus:
    """Whether a module holds a loop LLVM's loop vectorizer or unroller may still have work
    in: an innermost loop emitted open to either. The compiler's own vector loops, sized as
    they are, are closed to both (`for_range(vectorize=False, unroll=False)`, a
    `carried_loop` of vectors with `unroll=False`), so a module of only those needs neither
    (`runtime.jit.Pipeline`)."""

    def __init__(self) -> None:
        self._holds_loops: list[bool] = []  # per open loop: whether a loop was emitted in it
        self.leaves_work_to_llvm = False

    def enter(self) -> None:
        if self._holds_loops:
            self._holds_loops[-1] = True
        self._holds_loops.append(False)

    def leave(self, open_to_llvm: bool) -> None:
        innermost = not self._holds_loops.pop()
        self.leaves_work_to_llvm |= innermost and open_to_llvm


_CENSUSES: weakref.WeakKeyDictionary[ir.Module, LoopCensus] = weakref.WeakKeyDictionary()


def loop_census(module: ir.Module) -> LoopCensus:
    """The census of the loops emitted into `module` so far."""
    census = _CENSUSES.get(module)
    if census is None:
        census = _CENSUSES[module] = LoopCensus()
    return census


@contextmanager
def loop_body(b: ir.IRBuilder, open_to_llvm: bool) -> Iterator[None]:
    """The with-block is the body of a loop (`open_to_llvm`: to LLVM's loop vectorizer or
    unroller), recorded in the module's census."""
    census = loop_census(b.module)
    census.enter()
    yield
    census.leave(open_to_llvm)


@contextmanager
def for_range(
    b: ir.IRBuilder,
    start: Dim,
    stop: Dim,
    step: Dim = 1,
    name: str = "i",
    type: ir.Type = I64,
    vectorize: bool = True,
    unroll: bool = True,
) -> Iterator[ir.Value]:
    """Emit `for (v = start; v < stop; v += step)` (signed); the body goes in the with-block.
    `vectorize=False` keeps LLVM's loop vectorizer off the loop: for loops whose vectors the
    compiler wrote itself or that run too few times to pay for the code it would add.
    `unroll=False` keeps LLVM's unroller off it: for loops off the hot path, where unrolled
    copies (with their remainder loops) cost compile time and buy nothing."""
    start_v = start if isinstance(start, ir.Value) else ir.Constant(type, start)
    stop_v = stop if isinstance(stop, ir.Value) else ir.Constant(type, stop)
    step_v = step if isinstance(step, ir.Value) else ir.Constant(type, step)
    pre = b.block
    header = b.append_basic_block(f"{name}.header")
    body = b.append_basic_block(f"{name}.body")
    exit_ = b.append_basic_block(f"{name}.exit")
    b.branch(header)
    b.position_at_end(header)
    var = b.phi(type, name=name)
    var.add_incoming(start_v, pre)
    b.cbranch(b.icmp_signed("<", var, stop_v), body, exit_)
    b.position_at_end(body)
    with loop_body(b, open_to_llvm=vectorize or unroll):
        yield var
    latch = b.block
    var.add_incoming(b.add(var, step_v, name=f"{name}.next"), latch)
    back_edge = b.branch(header)
    hints = ([] if vectorize else [VECTORIZE_OFF]) + ([] if unroll else [UNROLL_OFF])
    if hints:
        back_edge.set_metadata("llvm.loop", _loop_id(b.module, *hints))
    b.position_at_end(exit_)


def loop_runs(b: ir.IRBuilder, start: ir.Value, stop: ir.Value, step: ir.Value) -> ir.Value:
    """Whether `for (v = start; v < stop; v += step)` runs at least once (never for step <= 0,
    as `for` runs)."""
    return b.and_(b.icmp_signed("<", start, stop), b.icmp_signed(">", step, const(0)))


def carried_loop(
    b: ir.IRBuilder,
    start: Dim,
    stop: Dim,
    step: Dim,
    init: Sequence[ir.Value],
    body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]],
    name: str = "i",
    unroll: bool = True,
    aligned: bool = False,
) -> list[ir.Value]:
    """`values = init; for (v = start; v < stop; v += step) values = body(v, values)`, with the
    values carried in phi nodes (so they stay in registers); returns the final values.
    `unroll=False` forbids LLVM to unroll the loop (for loops whose body is already sized).
    `aligned` starts the loop's code on a cache line (`LOOP_ON_A_LINE`). A loop carrying a
    vector is the compiler's vector code, closed to LLVM's vectorizer (which widens no
    vector phi); one carrying only scalars is left open to it (`LoopCensus`)."""
    pre = b.block
    header = b.append_basic_block(f"{name}.header")
    block = b.append_basic_block(f"{name}.body")
    exit_ = b.append_basic_block(f"{name}.exit")
    b.branch(header)
    b.position_at_end(header)
    var = b.phi(I64, name=name)
    var.add_incoming(as_value(b, start), pre)
    carried = [b.phi(v.type) for v in init]
    for phi, value in zip(carried, init):
        phi.add_incoming(value, pre)
    b.cbranch(b.icmp_signed("<", var, as_value(b, stop)), block, exit_)
    b.position_at_end(block)
    vectors = any(isinstance(v.type, ir.VectorType) for v in init)
    with loop_body(b, open_to_llvm=unroll or not vectors):
        updated = body(var, list(carried))
    latch = b.block
    var.add_incoming(b.add(var, as_value(b, step)), latch)
    for phi, value in zip(carried, updated):
        phi.add_incoming(value, latch)
    back_edge = b.branch(header)
    hints = ([] if unroll else [UNROLL_OFF]) + ([LOOP_ON_A_LINE] if aligned else [])
    if hints:
        back_edge.set_metadata("llvm.loop", _loop_id(b.module, *hints))
    b.position_at_end(exit_)
    return list(carried)


CACHE_LINE_BYTES = 64
# llvm.prefetch's locality operand: 3 keeps the line in every level (x86: prefetcht0), 2 in
# L2 and beyond (prefetcht1)
L1_LOCALITY = 3
L2_LOCALITY = 2

# LLVM loop hints (https://llvm.org/docs/LangRef.html#llvm-loop): a name and its operand
LoopHint = tuple[str, ir.Constant | None]
VECTORIZE_OFF: LoopHint = ("llvm.loop.vectorize.enable", ir.Constant(ir.IntType(1), 0))
UNROLL_OFF: LoopHint = ("llvm.loop.unroll.disable", None)
# A hot loop's code starts on a 64-byte line: Zen 3 fetches and caches decoded instructions by
# such lines, and the same nanokernel loop ran up to 1.2x slower or faster as unrelated code
# before it moved it across them (W1 f64 256^3: 0.84-0.87x of numpy or 0.99-1.0x by what other
# kernels the function held; aligned, 0.97-1.02x whatever they were).
LOOP_ON_A_LINE: LoopHint = ("llvm.loop.align", ir.Constant(ir.IntType(32), CACHE_LINE_BYTES))


def _loop_id(module: ir.Module, *hints: LoopHint) -> ir.MDValue:
    """A loop ID carrying `hints` (loop IDs refer to themselves)."""
    properties = [module.add_metadata(_hint_fields(module, hint)) for hint in hints]
    loop_id = module.add_metadata([None, *properties])
    loop_id.operands = [loop_id, *properties]
    return loop_id


def _hint_fields(module: ir.Module, hint: LoopHint) -> list[ir.Value]:
    name, operand = hint
    fields: list[ir.Value] = [ir.MetaDataString(module, name)]
    if operand is not None:
        fields.append(operand)
    return fields


def opaque_value(b: ir.IRBuilder, value: ir.Value, register_class: str) -> ir.Value:
    """`value` passed through an empty asm statement (in a register of `register_class`, an
    inline-asm constraint letter), which LLVM cannot see through."""
    copy = ir.InlineAsm(ir.FunctionType(value.type, [value.type]), "", f"={register_class},0")
    return b.call(copy, [value])


def convert(b: ir.IRBuilder, value: ir.Value, src: ScalarType, dst: ScalarType) -> ir.Value:
    """Scalar conversion with the language's semantics (docs/language.md, casts)."""
    if src == dst:
        return value
    if dst in float16.SIXTEEN_BIT:
        if src is ScalarType.F64:
            return float16.from_f64(b, value, dst)
        as_f32 = convert(b, value, src, ScalarType.F32)
        return float16.round_to(b, as_f32, dst)  # exact when src is the other 16-bit type
    if src in float16.SIXTEEN_BIT:
        return convert(b, value, ScalarType.F32, dst)  # held as f32, exactly
    if register_type(src) == register_type(dst) and src.is_int == dst.is_int:
        return value
    to = register_type(dst)
    if src.is_int and dst.is_int:
        if dst is ScalarType.I1:
            return b.icmp_signed("!=", value, ir.Constant(value.type, 0))
        if src is ScalarType.I1:
            return b.zext(value, to)
        return b.trunc(value, to) if src.bits > dst.bits else b.sext(value, to)
    if src.is_int:
        return b.uitofp(value, to) if src is ScalarType.I1 else b.sitofp(value, to)
    if dst is ScalarType.I1:
        return b.fcmp_unordered("!=", value, ir.Constant(value.type, 0.0))
    if dst.is_int:
        # LLVM's saturating conversion mishandles NaN from half; go through f32
        wide = b.fpext(value, register_type(ScalarType.F32)) if src.bits < 32 else value
        return fptosi_sat(b, wide, to)
    return b.fpext(value, to) if src.bits < dst.bits else b.fptrunc(value, to)


def fptosi_sat(b: ir.IRBuilder, value: ir.Value, to: ir.IntType) -> ir.Value:
    """Float to int, saturating at the type's bounds, NaN to 0."""
    module = b.module
    name = f"llvm.fptosi.sat.i{to.width}.{_float_suffix(value.type)}"
    fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(to, [value.type]), name)
    return b.call(fn, [value])


def _float_suffix(t: ir.Type) -> str:
    return {"half": "f16", "float": "f32", "double": "f64"}[str(t)]


def prefetch(b: ir.IRBuilder, ptr: ir.Value, write: bool = False) -> None:
    """Ask for the cache line of `ptr` in L1 (to be written: `write`); never faults."""
    args = [ptr, const(int(write), I32), const(L1_LOCALITY, I32), const(1, I32)]
    intrinsic(b, "llvm.prefetch.p0", ir.VoidType(), args)


def prefetch_into_l2(b: ir.IRBuilder, ptr: ir.Value) -> None:
    """Ask for the cache line of `ptr` in L2 (x86: prefetcht1), to be read: x86's
    prefetchw has no L2 form. Never faults."""
    args = [ptr, const(0, I32), const(L2_LOCALITY, I32), const(1, I32)]
    intrinsic(b, "llvm.prefetch.p0", ir.VoidType(), args)


def intrinsic(b: ir.IRBuilder, name: str, ret: ir.Type, args: Sequence[ir.Value]) -> ir.Value:
    module = b.module
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, [a.type for a in args]), name)
    return b.call(fn, list(args))
