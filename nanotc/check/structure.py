"""Structural rules: scoping of values, mixed and spmd regions, yields and `if` results,
function signatures and attributes. Dispatches every instruction to its own rule."""

from __future__ import annotations

import math
from collections.abc import Sequence

from nanotc.check.context import CheckContext, shown, unknown
from nanotc.check.scalar_rules import RULES
from nanotc.diagnostics import ErrorKind
from nanotc.ir.core import Function, Instruction, Kind, Program, Region, RegionKind
from nanotc.ir.instructions import Alloca, For, Foreach, If, Yield
from nanotc.ir.types import (
    I1,
    INDEX_MAX,
    GroupType,
    MemRefType,
    ScalarType,
    Type,
    VoidType,
    memref_errors,
)
from nanotc.ir.values import Constant, Poison, Value

# The CPU as a device of the language: a subgroup is a set of SIMD lanes, so any power of two
# up to the widest vector of bytes is a valid subgroup size; work-groups are bounded as on GPUs.
SUBGROUP_SIZES = (1, 2, 4, 8, 16, 32, 64)
MAX_WORK_GROUP_SIZE = 1024


# C library functions the generated code calls (scratch memory) or LLVM calls in place of
# its own instructions (loops it recognises as memset/memcpy/memmove, fma and frem where the
# target lacks them): a kernel of that name would be called instead.
RUNTIME_SYMBOLS = frozenset(
    ["aligned_alloc", "free", "memset", "memcpy", "memmove", "fma", "fmaf", "fmod", "fmodf"]
)


def reserved_name(name: str, kernels: dict[str, Function]) -> str:
    """Why a kernel cannot be called `name` in native code ("" if it can)."""
    if name in RUNTIME_SYMBOLS:
        return "generated code calls the C library function of that name"
    if name.endswith("__packed") and name.removesuffix("__packed") in kernels:
        return f"it is the packed entry point of @{name.removesuffix('__packed')}"
    return ""


class StructureChecker:
    def __init__(self, ctx: CheckContext):
        self.ctx = ctx
        self.visible: list[set[int]] = []

    def program(self, program: Program) -> None:
        seen: dict[str, Function] = {}
        for func in program.functions:
            if func.name in seen:
                self.ctx.sink.error(
                    ErrorKind.REDEFINED_FUNCTION, func.loc, "@" + func.name, seen[func.name].loc
                )
            seen.setdefault(func.name, func)
            self.function(func)
        for func in program.functions:
            why = reserved_name(func.name, seen)
            if why:
                self.ctx.sink.error(
                    ErrorKind.RESERVED_FUNCTION_NAME, func.loc, "@" + func.name, why
                )

    def function(self, func: Function) -> None:
        for param in func.arguments:
            for kind in type_errors(param.type, written=param.loc is not None):
                self.ctx.sink.error(kind, param.loc)
        self.attributes(func)
        self.region(func.body, spmd=False, returns=None)

    def attributes(self, func: Function) -> None:
        sink, wgs, sgs = self.ctx.sink, func.work_group_size, func.subgroup_size
        wgs_loc, sgs_loc = (
            func.attr_locs.get("work_group_size"),
            func.attr_locs.get("subgroup_size"),
        )
        if sgs is not None and sgs not in SUBGROUP_SIZES:
            sink.error(ErrorKind.UNSUPPORTED_SUBGROUP_SIZE, sgs_loc, _listing(SUBGROUP_SIZES))
        if wgs is None:
            return
        if min(wgs) <= 0:
            sink.error(ErrorKind.INVALID_WORK_GROUP_SIZE, wgs_loc)
        elif math.prod(wgs) > MAX_WORK_GROUP_SIZE:
            sink.error(ErrorKind.WORK_GROUP_SIZE_TOO_LARGE, wgs_loc, MAX_WORK_GROUP_SIZE)
        elif sgs in SUBGROUP_SIZES and wgs[0] % sgs != 0:
            sink.error(ErrorKind.WORK_GROUP_NOT_SUBGROUP_MULTIPLE, wgs_loc)

    def region(self, region: Region, spmd: bool, returns: Sequence[Type] | None) -> None:
        """Check a region; `returns` are the types its final yield must give (None: no yield)."""
        self.visible.append({id(p) for p in region.params})
        spmd = spmd or region.kind is RegionKind.SPMD
        for position, inst in enumerate(region.instructions):
            is_last = position == len(region.instructions) - 1
            self.instruction(inst, spmd, returns, is_last)
            self.visible[-1].update(id(r) for r in inst.results)
        if returns is not None:
            last = region.instructions[-1] if region.instructions else None
            if not isinstance(last, Yield):
                self.ctx.sink.error(ErrorKind.MISSING_YIELD, region.loc)
        self.visible.pop()

    def instruction(
        self, inst: Instruction, spmd: bool, returns: Sequence[Type] | None, is_last: bool
    ) -> None:
        for value in inst.operand_values():
            self.operand(inst, value)
        if spmd and isinstance(inst, Foreach):
            self.ctx.error(ErrorKind.NESTED_SPMD, inst)
        elif spmd and inst.kind is Kind.COLLECTIVE:
            self.ctx.error(ErrorKind.COLLECTIVE_IN_SPMD, inst)
        if isinstance(inst, Yield):
            self.yield_(inst, returns, is_last)
        reported = len(self.ctx.sink.diagnostics)
        rule = RULES.get(type(inst))
        if rule is not None:
            rule(inst, self.ctx)
        if len(self.ctx.sink.diagnostics) == reported:  # no cascade from the rule's own errors
            self.result_layouts(inst)
        self.nested_regions(inst, spmd)

    def result_layouts(self, inst: Instruction) -> None:
        """A view whose static sizes break the strided-layout rule cannot fit the memory of
        its source (e.g. a subview of 32 rows of a layout whose column stride is 64 and row
        stride 4): the layout rule is checked on inferred types too."""
        if isinstance(inst, Alloca):
            return  # its type is written, and reported where it is written
        for result in inst.results:
            if isinstance(result.type, MemRefType):
                for kind in memref_errors(result.type):
                    self.ctx.error(kind, inst)

    def operand(self, inst: Instruction, value: Value) -> None:
        if isinstance(value, Constant):
            if isinstance(value.value, float) and not math.isfinite(value.value):
                self.ctx.error(ErrorKind.FLOAT_OUT_OF_RANGE, inst)
            elif value.loc is None and not _literal_fits(value):
                # parsed literals were range-checked where they are written; a built one
                # that does not fit its type could not be printed and parsed back
                self.ctx.error(ErrorKind.CONSTANT_OUT_OF_RANGE, inst, None, value.value, value.type)
        elif not isinstance(value, Poison) and not any(id(value) in s for s in self.visible):
            self.ctx.error(ErrorKind.UNDEFINED_IDENTIFIER, inst, None, f"%{value.name}")

    def nested_regions(self, inst: Instruction, spmd: bool) -> None:
        if isinstance(inst, If):
            self.if_(inst, spmd)
        elif isinstance(inst, For | Foreach):
            self.loop(inst)
            self.region(inst.body, spmd, returns=None)
        else:
            for r in inst.regions():
                self.region(r, spmd, returns=None)

    def if_(self, inst: If, spmd: bool) -> None:
        if not unknown(inst.cond) and inst.cond.type != I1:
            self.ctx.error(ErrorKind.EXPECTED_BOOLEAN, inst, "cond")
        returns = tuple(inst.returns) or None
        self.region(inst.then, spmd, returns)
        if inst.otherwise is not None:
            self.region(inst.otherwise, spmd, returns)
        elif returns is not None:
            self.ctx.error(ErrorKind.MISSING_ELSE, inst)

    def loop(self, inst: For | Foreach) -> None:
        if inst.loop_type == I1:  # a loop steps by adding, which i1 does not
            self.ctx.error(ErrorKind.BOOL_UNSUPPORTED, inst)
            return
        if not inst.loop_type.is_int:
            self.ctx.error(ErrorKind.EXPECTED_INT, inst)
            return
        for name in ("start", "stop", "step"):
            value = inst.fields.get(name)
            if value is not None and not unknown(value) and value.type != inst.loop_type:
                self.ctx.error(ErrorKind.OPERAND_TYPE_MISMATCH, inst, name, shown(value, name),
                               value.type, inst.loop_type)  # fmt: skip
        step = inst.fields.get("step")
        if isinstance(step, Constant) and isinstance(step.value, int) and step.value <= 0:
            self.ctx.error(ErrorKind.INVALID_STEP, inst, "step")

    def yield_(self, inst: Yield, returns: Sequence[Type] | None, is_last: bool) -> None:
        if not is_last:
            self.ctx.error(ErrorKind.YIELD_NOT_LAST, inst)
        elif returns is None:
            if inst.values:
                self.ctx.error(ErrorKind.UNEXPECTED_YIELD, inst)
        elif len(inst.values) != len(returns):
            self.ctx.error(ErrorKind.YIELD_MISMATCH, inst)
        else:
            for i, (value, expected) in enumerate(zip(inst.values, returns)):
                if not unknown(value) and value.type != expected:
                    self.ctx.error(ErrorKind.YIELD_TYPE_MISMATCH, inst, f"values[{i}]")


def type_errors(t: Type, written: bool = False) -> list[ErrorKind]:
    """Well-formedness of an argument type. A type `written` in source text was checked by the
    type parser, which points at the type text; checking it again would report errors twice."""
    if isinstance(t, VoidType):
        return [ErrorKind.VOID_ARGUMENT]
    if written:
        return []
    if isinstance(t, GroupType):
        offset_ok = t.offset is None or t.offset >= 0
        return memref_errors(t.memref) + ([] if offset_ok else [ErrorKind.INVALID_OFFSET])
    if isinstance(t, MemRefType):
        return memref_errors(t)
    return []


def _literal_fits(constant: Constant) -> bool:
    """An integer literal is in -2^63+1 .. 2^63-1 (the reference) and in range of its type."""
    if not isinstance(constant.value, int) or not isinstance(constant.type, ScalarType):
        return True
    lo, hi = constant.type.int_range()
    return lo <= constant.value <= hi and abs(constant.value) <= INDEX_MAX


def _listing(values: Sequence[int]) -> str:
    return ", ".join(map(str, values))
