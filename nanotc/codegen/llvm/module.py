"""Whole-program emission: one native entry per kernel, following `nanotc.codegen.abi`.

    define i32 @NAME(<flattened parameters>, i64 %group_begin, i64 %group_end, i64 %group_size)
    define i32 @NAME__packed(ptr %slots, i64 %group_begin, i64 %group_end, i64 %group_size)

The entry runs work-groups [group_begin, group_end) in order and returns 0, or 1 when the
scratch memory for large allocas could not be allocated (nothing has run then).
"""

from __future__ import annotations

from llvmlite import ir

from nanotc.codegen import abi
from nanotc.codegen.llvm import (  # noqa: F401  (each module registers its emitters)
    amx,
    blas,
    control,
    memory,
    nanokernel,
    packing,
    row_dots,
    scalar,
)
from nanotc.codegen.llvm.emitter import FunctionEmitter, KernelState, local_name
from nanotc.codegen.llvm.helpers import for_range, from_memory, intrinsic
from nanotc.codegen.llvm.memory import STACK_ALLOCA_LIMIT
from nanotc.codegen.llvm.types import (
    I32,
    I64,
    PTR,
    Dim,
    GroupValue,
    MemrefValue,
    abi_type,
    const,
    memory_type,
)
from nanotc.ir.core import Function, Program, walk
from nanotc.ir.instructions import Alloca
from nanotc.ir.types import GroupType, MemRefType, ScalarType
from nanotc.targets import Target

STACK_TOTAL_LIMIT = 256 * 1024
"""Stack bytes a kernel may use for allocas before the rest move to heap scratch (worker
threads have the platform's default stack, typically 8 MiB)."""
PROBE_STACK = '"probe-stack"="inline-asm"'


def emit_module(program: Program, target: Target, name: str = "nanotc") -> ir.Module:
    module = ir.Module(name=name)
    for func in program.functions:
        kernel = emit_kernel(module, func, target)
        emit_packed_entry(module, func, kernel)
    return module


def native_type(arg: abi.NativeArg) -> ir.Type:
    if arg.slot is abi.Slot.SCALAR:
        assert arg.scalar is not None
        return abi_type(arg.scalar)
    return PTR if arg.is_pointer else I64


def _native_name(func: Function, arg: abi.NativeArg) -> str:
    base = func.arguments[arg.param].name or f"arg{arg.param}"
    suffix = {
        abi.Slot.SCALAR: "",
        abi.Slot.DATA: "",
        abi.Slot.MEMBERS: "",
        abi.Slot.SHAPE: f".size{arg.mode}",
        abi.Slot.STRIDE: f".stride{arg.mode}",
        abi.Slot.MEMBER_SHAPES: f".sizes{arg.mode}",
        abi.Slot.MEMBER_STRIDES: f".strides{arg.mode}",
        abi.Slot.OFFSET: ".offset",
    }[arg.slot]
    return base + suffix


class _ProbedAttributes(ir.values.FunctionAttributes):
    """llvmlite's function attributes and the string attribute that asks for stack probes."""

    _known = ir.values.FunctionAttributes._known | {PROBE_STACK}


def emit_kernel(module: ir.Module, func: Function, target: Target) -> ir.Function:
    native = abi.flatten(func)
    fn_type = ir.FunctionType(I32, [native_type(a) for a in native] + [I64] * 3)
    fn = ir.Function(module, fn_type, abi.kernel_symbol(func.name))
    # the frame (allocas up to STACK_TOTAL_LIMIT) is entered a page at a time, so a thread whose
    # stack is smaller meets its guard page instead of writing past it into other memory
    fn.attributes = _ProbedAttributes()
    fn.attributes.add(PROBE_STACK)
    for arg, value in zip(native, fn.args):
        value.name = local_name(_native_name(func, arg))
    begin, end, size = fn.args[len(native) :]
    for value, name in zip((begin, end, size), abi.LAUNCH_ARGS):
        value.name = name
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    allocas = ir.IRBuilder(entry)
    offsets, scratch_bytes = plan_scratch(func)
    scratch = _allocate_scratch(b, fn, scratch_bytes) if scratch_bytes else None
    with for_range(b, begin, end, name="gid") as gid:
        allocas.position_at_start(entry)
        state = KernelState(target, gid, size, allocas, scratch, offsets)
        emitter = FunctionEmitter(func, b, state)
        for param, value in zip(func.arguments, _parameter_values(b, func, native, fn.args)):
            emitter.define(param, value)
        emitter.region(func.body)
    if scratch is not None:
        intrinsic(b, "free", ir.VoidType(), [scratch])
    b.ret(ir.Constant(I32, 0))
    return fn


def plan_scratch(func: Function) -> tuple[dict[int, int], int]:
    """Give large allocas fixed slots in one heap area allocated per launch chunk. A slot per
    instruction is enough: sizes are static and an alloca's region ends before it runs again."""
    offsets: dict[int, int] = {}
    stack = scratch = 0
    for inst in walk(func.body):
        if not isinstance(inst, Alloca):
            continue
        size = (inst.memref.size_in_bytes() + 63) // 64 * 64
        if size <= STACK_ALLOCA_LIMIT and stack + size <= STACK_TOTAL_LIMIT:
            stack += size
        else:
            offsets[id(inst)] = scratch
            scratch += size
    return offsets, scratch


def _allocate_scratch(b: ir.IRBuilder, fn: ir.Function, size: int) -> ir.Value:
    scratch = intrinsic(b, "aligned_alloc", PTR, [const(64), const(size)])
    failed = b.icmp_unsigned("==", scratch, ir.Constant(PTR, None))
    with b.if_then(failed, likely=False):
        b.ret(ir.Constant(I32, 1))
    return scratch


def _parameter_values(
    b: ir.IRBuilder, func: Function, native: list[abi.NativeArg], args: list[ir.Argument]
) -> list[object]:
    by_param: dict[int, list[tuple[abi.NativeArg, ir.Argument]]] = {}
    for arg, value in zip(native, args):
        by_param.setdefault(arg.param, []).append((arg, value))
    values: list[object] = []
    for index, param in enumerate(func.arguments):
        parts = by_param[index]
        t = param.type
        if isinstance(t, ScalarType):
            ((_, value),) = parts
            raw = b.bitcast(value, memory_type(t)) if value.type != memory_type(t) else value
            values.append(from_memory(b, raw, t))
        elif isinstance(t, MemRefType):
            values.append(_memref_value(t, parts))
        else:
            assert isinstance(t, GroupType)
            values.append(_group_value(t, parts))
    return values


def _memref_value(t: MemRefType, parts: list[tuple[abi.NativeArg, ir.Argument]]) -> MemrefValue:
    ptr = next(v for a, v in parts if a.slot is abi.Slot.DATA)
    sizes = {a.mode: v for a, v in parts if a.slot is abi.Slot.SHAPE}
    strides = {a.mode: v for a, v in parts if a.slot is abi.Slot.STRIDE}
    shape: tuple[Dim, ...] = tuple(sizes.get(k, s) for k, s in enumerate(t.shape))  # type: ignore[misc]
    stride: tuple[Dim, ...] = tuple(strides.get(k, s) for k, s in enumerate(t.stride))  # type: ignore[misc]
    return MemrefValue(t, ptr, shape, stride)


def _group_value(t: GroupType, parts: list[tuple[abi.NativeArg, ir.Argument]]) -> GroupValue:
    members = next(v for a, v in parts if a.slot is abi.Slot.MEMBERS)
    offset = next((v for a, v in parts if a.slot is abi.Slot.OFFSET), t.offset)
    return GroupValue(
        t,
        members,
        {a.mode: v for a, v in parts if a.slot is abi.Slot.MEMBER_SHAPES},
        {a.mode: v for a, v in parts if a.slot is abi.Slot.MEMBER_STRIDES},
        offset,  # type: ignore[arg-type]
    )


def emit_packed_entry(module: ir.Module, func: Function, kernel: ir.Function) -> ir.Function:
    """The launcher's entry: arguments read from 8-byte slots, then the kernel."""
    native = abi.flatten(func)
    fn = ir.Function(module, ir.FunctionType(I32, [PTR, I64, I64, I64]), abi.packed_name(func.name))
    slots, *launch = fn.args
    slots.name = "slots"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    args = [
        b.load(b.gep(slots, [const(k)], source_etype=I64), typ=native_type(a))
        for k, a in enumerate(native)
    ]
    b.ret(b.call(kernel, args + list(launch)))
    return fn
