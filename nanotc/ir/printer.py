"""Canonical text form of programs, driven by each instruction's declared syntax.

The output parses back to the same program and prints identically again. Values keep their
source names; unnamed values (from the builder API) get the lowest free number, and a name
that would shadow a visible one is renamed, so the text is always well-scoped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nanotc.diagnostics import require_type
from nanotc.ir.core import (
    AttrField,
    Flag,
    Function,
    Instruction,
    IntAttr,
    MemRefTypeAttr,
    Program,
    Region,
    ScalarTypeAttr,
    ScalarTypeListAttr,
    Suffix,
)
from nanotc.ir.syntax import (
    AttrRef,
    Custom,
    Element,
    Lit,
    OperandRef,
    Optional,
    ParamRef,
    RegionRef,
    TypeOf,
    TypesOf,
)
from nanotc.ir.values import Constant, Value

INDENT = "    "
_NO_SPACE_BEFORE = {",", "[", "]", ")"}
_NO_SPACE_AFTER = {"[", "("}


class Namer:
    """Assigns printed names to values, respecting region scoping."""

    def __init__(self, used: set[str]):
        self.used = used
        self.names: dict[int, str] = {}
        self.scopes: list[set[str]] = [set()]
        self.counter = 0

    def define(self, value: Value) -> str:
        name = value.name
        if name is None or any(name in s for s in self.scopes):
            name = self._fresh()
        self.scopes[-1].add(name)
        self.names[id(value)] = name
        return "%" + name

    def _fresh(self) -> str:
        while str(self.counter) in self.used or any(str(self.counter) in s for s in self.scopes):
            self.counter += 1
        self.counter += 1
        return str(self.counter - 1)

    def ref(self, value: Value) -> str:
        if isinstance(value, Constant):
            return value.literal()
        name = self.names.get(id(value))
        if name is None:  # printed out of context (a single instruction): its own name
            name = value.name if value.name is not None else f"<{type(value).__name__}>"
        return "%" + name


class Printer:
    def __init__(self, namer: Namer):
        self.namer = namer
        self.lines: list[str] = []
        self.param_scope: set[str] | None = None  # names of loop variables awaiting their body

    def function(self, func: Function) -> None:
        self.namer.scopes.append(set())
        args = ", ".join(f"{self.namer.define(p)}: {p.type}" for p in func.body.params)
        attrs = ""
        if func.work_group_size is not None:
            attrs += " work_group_size({},{})".format(*func.work_group_size)
        if func.subgroup_size is not None:
            attrs += f" subgroup_size({func.subgroup_size})"
        self.lines.append(f"func @{func.name}({args}){attrs} {{")
        self.region_body(func.body, 1)
        self.lines.append("}")
        self.namer.scopes.pop()

    def region_body(self, region: Region, depth: int) -> None:
        for inst in region.instructions:
            self.instruction(inst, depth)

    def instruction(self, inst: Instruction, depth: int) -> None:
        """Print `results = keyword ...`; regions open `{` blocks and text after a region
        (`else`) continues the line of its closing brace."""
        segments: list[_Pieces | Region] = [_Pieces()]
        self.elements(inst, inst.format.elements, segments)
        results = ", ".join(self.namer.define(r) for r in inst.results)
        prefix = INDENT * depth + (f"{results} = " if results else "")
        head = segments[0]
        assert isinstance(head, _Pieces)
        self.lines.append(prefix + head.text(inst.format.keyword))
        for segment in segments[1:]:
            if isinstance(segment, Region):
                self.block(segment, depth)
            elif segment.parts:
                self.lines[-1] += " " + segment.text("")

    def block(self, region: Region, depth: int) -> None:
        self.lines[-1] += " {"
        self.namer.scopes.append(self.param_scope or set())
        self.param_scope = None
        self.region_body(region, depth + 1)
        self.namer.scopes.pop()
        self.lines.append(INDENT * depth + "}")

    def elements(
        self, inst: Instruction, elements: tuple[Element, ...], segments: list[_Pieces | Region]
    ) -> None:
        for elem in elements:
            if isinstance(elem, RegionRef):
                segments.append(inst.fields[elem.name])
                segments.append(_Pieces())
            elif isinstance(elem, Optional):
                if _present(inst, elem):
                    self.elements(inst, elem.elements, segments)
            else:
                pieces = segments[-1]
                assert isinstance(pieces, _Pieces)
                self.element(inst, elem, pieces)

    def element(self, inst: Instruction, elem: Element, pieces: _Pieces) -> None:
        if isinstance(elem, Lit):
            pieces.add(elem.text)
        elif isinstance(elem, OperandRef):
            value = inst.fields[elem.name]
            if isinstance(value, list):
                pieces.add(", ".join(self.namer.ref(v) for v in value))
            else:
                pieces.add(self.namer.ref(value))
        elif isinstance(elem, ParamRef):
            self.namer.scopes.append(set())
            pieces.add(self.namer.define(inst.fields[elem.region].params[0]))
            self.param_scope = self.namer.scopes.pop()
        elif isinstance(elem, TypeOf):
            pieces.add(str(inst.operands_of(elem.operands[0])[0].type))
        elif isinstance(elem, TypesOf):
            pieces.add(", ".join(str(v.type) for v in inst.operands_of(elem.operand)))
        elif isinstance(elem, AttrRef):
            f = inst.spec.field(elem.name)
            assert isinstance(f, AttrField)
            text = attr_text(f, inst.fields[elem.name])
            if text:
                pieces.add(text, glue=text.startswith("."))
        elif isinstance(elem, Custom):
            pieces.add(CUSTOM_PRINTERS[elem.name](inst, self.namer.ref))
        else:
            raise AssertionError(elem)


class _Pieces:
    """Joins printed tokens with the spacing conventions of the reference text."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.glued: list[bool] = []

    def add(self, text: str, glue: bool = False) -> None:
        self.parts.append(text)
        self.glued.append(glue)

    def text(self, keyword: str) -> str:
        out = keyword
        prev = keyword
        for part, glue in zip(self.parts, self.glued):
            if not part:
                continue
            if glue or part in _NO_SPACE_BEFORE or prev in _NO_SPACE_AFTER or not out:
                out += part
            else:
                out += " " + part
            prev = part
        return out


def _present(inst: Instruction, group: Optional) -> bool:
    for elem in group.elements:
        if isinstance(elem, OperandRef | RegionRef) and inst.fields[elem.name] not in (None, []):
            return True
        if isinstance(elem, AttrRef):
            f = inst.spec.field(elem.name)
            assert isinstance(f, AttrField)
            if inst.fields[elem.name] != f.default:
                return True
    return False


def attr_text(f: AttrField, value: Any) -> str:
    kind = f.kind
    if isinstance(kind, Suffix):
        return "." + value.value
    if isinstance(kind, Flag):
        return "." + kind.spelling if value else ""
    if isinstance(kind, IntAttr | ScalarTypeAttr | MemRefTypeAttr):
        return str(value)
    if isinstance(kind, ScalarTypeListAttr):
        return ", ".join(map(str, value))
    raise AssertionError(kind)


def _print_slices(inst: Any, ref: Callable[[Value], str]) -> str:
    parts = []
    for offset, size in zip(inst.offsets, inst.sizes):
        if size is None:
            parts.append(ref(offset))
        elif isinstance(offset, Constant) and offset.value == 0 and _wild(size):
            parts.append(":")
        else:
            parts.append(f"{ref(offset)}:{ref(size)}")
    return ",".join(parts)


def _print_expand_shape(inst: Any, ref: Callable[[Value], str]) -> str:
    """Literals are glued (`2x8`); an identifier is spaced (`%n x ?`), because an identifier
    may contain `x` and digits, so `%nx?` or `%nx4` would lex as a single identifier."""
    out = ""
    for prev, value in zip([None, *inst.shape], inst.shape):
        if prev is not None:
            spaced = not isinstance(prev, Constant) or not isinstance(value, Constant)
            out += " x " if spaced else "x"
        out += ref(value)
    return out


def _wild(value: Value) -> bool:
    return isinstance(value, Constant) and value.is_wildcard


CUSTOM_PRINTERS: dict[str, Callable[[Any, Callable[[Value], str]], str]] = {
    "slices": _print_slices,
    "expand_shape": _print_expand_shape,
}


def print_program(program: Program) -> str:
    require_type(program, Program, "expected a Program to print")
    chunks = []
    for func in program.functions:
        chunks.append(print_function(func))
    return "\n".join(chunks)


def print_function(func: Function) -> str:
    from nanotc.ir.core import walk

    used = {p.name for p in func.body.params if p.name}
    for inst in walk(func.body):
        used.update(r.name for r in inst.results if r.name)
    printer = Printer(Namer({u for u in used if u is not None}))
    printer.function(func)
    return "\n".join(printer.lines) + "\n"


def print_instruction(inst: Instruction) -> str:
    printer = Printer(Namer(set()))
    printer.instruction(inst, 0)
    return "\n".join(printer.lines)
