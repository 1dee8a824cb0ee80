"""What every verification rule receives: the place to report errors, located precisely."""

from __future__ import annotations

from dataclasses import dataclass

from nanotc.diagnostics import DiagnosticSink, ErrorKind, SourceRange
from nanotc.ir.core import Instruction
from nanotc.ir.types import ScalarType, UnknownType
from nanotc.ir.values import Value


@dataclass
class CheckContext:
    sink: DiagnosticSink

    def error(
        self, kind: ErrorKind, inst: Instruction, operand: str | None = None, *args: object
    ) -> None:
        """Report against one operand (its text and type annotation) or the instruction."""
        self.sink.error(kind, operand_range(inst, operand), *args)


def operand_range(inst: Instruction, operand: str | None) -> SourceRange | None:
    if operand is not None:
        where = inst.operand_locs.get(operand) or inst.operand_locs.get(operand + "[0]")
        if where is not None:
            return where
    return inst.loc


def unknown(*values: Value | None) -> bool:
    """True when an earlier error left a value untyped; rules skip it to avoid cascades."""
    return any(v is not None and isinstance(v.type, UnknownType) for v in values)


def is_scalar(value: Value) -> bool:
    return isinstance(value.type, ScalarType)


def shown(value: Value, role: str) -> str:
    """How a message names an operand: `%name` as written, or its role where it has none (a
    built program's unnamed value)."""
    return f"%{value.name}" if value.name else f"the {role}"
