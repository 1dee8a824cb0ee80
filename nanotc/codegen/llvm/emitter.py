"""Emission of one kernel body: the value map, region walking and the dispatch table.

Each instruction family registers its emitter with `@emits(Class, ...)` in its own module
(scalar, memory, control, blas). LLVM values are named after the SSA names of the program so
that `--emit llvm` stays readable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llvmlite import ir

from nanotc.codegen.llvm.types import Dim, const, register_type
from nanotc.ir.conversions import from_python
from nanotc.ir.core import Function, Instruction, Region
from nanotc.ir.types import ScalarType
from nanotc.ir.values import Constant, Value
from nanotc.targets import Target

# LLVM clips local names to 1024 characters when it parses the module, so two long program
# names sharing their first 1024 would collide there; llvmlite makes clipped ones unique
LOCAL_NAME_LIMIT = 256

EmitFn = Callable[["FunctionEmitter", Any], None]
EMITTERS: dict[type[Instruction], EmitFn] = {}


def emits(*classes: type[Instruction]) -> Callable[[EmitFn], EmitFn]:
    def register(fn: EmitFn) -> EmitFn:
        for cls in classes:
            EMITTERS[cls] = fn
        return fn

    return register


def local_name(name: str) -> str:
    """A program name for a local LLVM value, clipped to LOCAL_NAME_LIMIT characters."""
    return name[:LOCAL_NAME_LIMIT]


@dataclass
class KernelState:
    """Per-kernel values every emitter may need."""

    target: Target
    group_id: ir.Value
    group_size: ir.Value
    entry: ir.IRBuilder  # positioned in the entry block, for hoisted stack allocations
    scratch: ir.Value | None = None  # per-launch-chunk heap area for large allocas
    scratch_offsets: dict[int, int] = field(default_factory=dict)  # id(alloca) -> byte offset


def representable(value: int | float, t: ScalarType) -> int | float:
    """A literal rounded to its type once, as the reference rounds it (a float literal beyond
    f16's range is inf, as the type's arithmetic would make it; integers are range-checked by
    the checker, and LLVM wraps their unsigned spellings)."""
    if t.is_float and t is not ScalarType.F64:
        return float(from_python(value, t))
    return value


class FunctionEmitter:
    def __init__(self, func: Function, builder: ir.IRBuilder, state: KernelState):
        self.func = func
        self.b = builder
        self.state = state
        self.values: dict[int, Any] = {}

    # -- values ----------------------------------------------------------------------------
    def define(self, value: Value, emitted: Any) -> None:
        if isinstance(emitted, ir.NamedValue) and value.name and not emitted.name:
            emitted.name = local_name(value.name)
        self.values[id(value)] = emitted

    def value(self, v: Value) -> Any:
        if isinstance(v, Constant):
            assert isinstance(v.type, ScalarType) and v.value is not None
            return ir.Constant(register_type(v.type), representable(v.value, v.type))
        return self.values[id(v)]

    def dim(self, v: Value) -> Dim:
        """An index operand: a Python int when it is a literal (so arithmetic folds)."""
        if isinstance(v, Constant):
            assert isinstance(v.value, int)
            return v.value
        return self.values[id(v)]

    def index_value(self, v: Value) -> ir.Value:
        d = self.dim(v)
        return const(d) if isinstance(d, int) else d

    # -- regions ---------------------------------------------------------------------------
    def region(self, region: Region, params: Sequence[ir.Value] = ()) -> list[ir.Value]:
        """Emit a region's instructions; returns the values its final `yield` gives."""
        for param, emitted in zip(region.params, params):
            self.define(param, emitted)
        for inst in region.instructions:
            if inst.terminates_region:
                return [self.value(v) for v in inst.fields["values"]]
            self.instruction(inst)
        return []

    def instruction(self, inst: Instruction) -> None:
        emit = EMITTERS.get(type(inst))
        if emit is None:
            raise NotImplementedError(f"no LLVM emitter for {inst.name}")
        emit(self, inst)
