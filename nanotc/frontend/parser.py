"""Recursive-descent parser: text -> IR, with a source range on everything.

Functions, types and regions are parsed by hand; each instruction is parsed by interpreting
its declared syntax (`nanotc.ir.syntax`), the same description the printer follows. Names are
resolved while parsing (regions see the values of enclosing regions, never the reverse).

Error handling: a syntax error ends the parse; every other error (undefined or redefined
names, annotated types that do not match, bad literals, impossible result types) is recorded
and parsing goes on with a placeholder, so one run reports them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nanotc.diagnostics import (
    CompileError,
    Diagnostic,
    DiagnosticSink,
    ErrorKind,
    Source,
    SourceRange,
)
from nanotc.frontend.lexer import Tok, Token, tokenize
from nanotc.frontend.types import TypeParser
from nanotc.ir.core import (
    AttrField,
    ConstKind,
    Flag,
    Function,
    Instruction,
    IntAttr,
    IRError,
    MemRefTypeAttr,
    OperandField,
    Program,
    Region,
    RegionField,
    ScalarTypeAttr,
    ScalarTypeListAttr,
    Suffix,
)
from nanotc.ir.instructions import LANGUAGE
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
    operand_field,
)
from nanotc.ir.types import INDEX, ScalarType, Type, UnknownType
from nanotc.ir.values import Constant, Poison, Value

MAX_NESTING = 64
"""Regions nested deeper than this are rejected (a limit far above real kernels)."""


class ParseFailure(Exception):
    """A syntax error was recorded; parsing cannot continue."""


@dataclass
class _Literal:
    """A literal operand whose type is known only later in the instruction."""

    token: Token
    wildcard: bool = False


@dataclass
class _InstrState:
    cls: type[Instruction]
    fields: dict[str, Any] = field(default_factory=dict)
    locs: dict[str, SourceRange] = field(default_factory=dict)
    param_names: dict[str, list[Token]] = field(default_factory=dict)


class Parser(TypeParser):
    def __init__(self, source: Source, instructions: Iterable[type[Instruction]] = LANGUAGE):
        self.source = source
        self.sink = DiagnosticSink()
        super().__init__(tokenize(source, self.sink), self.sink)
        self.scopes: list[dict[str, Value]] = []
        self.by_keyword: dict[str, list[type[Instruction]]] = {}
        for cls in instructions:
            for keyword in (cls.name, *cls.aliases):
                self.by_keyword.setdefault(keyword, []).append(cls)

    # -- program and functions ---------------------------------------------------------------
    def program(self) -> Program | None:
        """The program, or None after a syntax error; diagnostics are in `self.sink`."""
        program = Program(source=self.source)
        try:
            while True:
                program.functions.append(self.function())
                if self.peek().kind is Tok.EOF:
                    return program
        except ParseFailure:
            return None

    def function(self) -> Function:
        """A function. A second `@name` is reported by the checker, which sees built programs."""
        start = self.expect("func")
        name_tok = self.expect_kind(Tok.GLOBAL)
        name = name_tok.text[1:]
        self.expect("(")
        body = Region()
        self.scopes.append({})
        if not self.peek().is_(")"):
            self.parameter(body)
            while self.accept(","):
                self.parameter(body)
        end = self.expect(")")
        func = Function(name, body, loc=start.range.to(end.range))
        self.function_attributes(func)
        self.region_body(body)
        self.scopes.pop()
        return func

    def parameter(self, body: Region) -> None:
        tok = self.expect_kind(Tok.LOCAL)
        self.expect(":")
        param_type, _ = self.type_()
        self.define(tok, body.add_param(param_type, tok.text[1:], tok.range))

    def function_attributes(self, func: Function) -> None:
        while self.peek().text in ("work_group_size", "subgroup_size"):
            tok = self.next()
            self.expect("(")
            values = [self.integer()]
            if tok.text == "work_group_size":
                self.expect(",")
                values.append(self.integer())
            end = self.expect(")")
            where = tok.range.to(end.range)
            if tok.text in func.attr_locs:
                self.sink.error(ErrorKind.DUPLICATE_ATTRIBUTE, where, tok.text)
                continue
            func.attr_locs[tok.text] = where
            if tok.text == "work_group_size":
                func.work_group_size = (values[0], values[1])
            else:
                func.subgroup_size = values[0]

    def integer(self) -> int:
        """An attribute's size: digits only, no sign (the grammar's `1*DIGIT`)."""
        if self.peek().text[:1] in ("+", "-"):
            self.fail("digits")
        tok = self.expect_kind(Tok.INTEGER)
        assert isinstance(tok.value, int)
        return tok.value

    # -- regions and names -------------------------------------------------------------------
    def region_body(self, region: Region) -> None:
        """Parse `{ instruction* }` into `region`, whose params are already in scope."""
        open_ = self.expect("{")
        if len(self.scopes) > MAX_NESTING:  # every later stage recurses once per region
            self.sink.error(ErrorKind.NESTING_TOO_DEEP, open_.range, MAX_NESTING)
            raise ParseFailure
        while not self.peek().is_("}"):
            if self.peek().kind is Tok.EOF:
                self.fail('"}"')
            region.append(self.instruction())
        region.loc = open_.range.to(self.next().range)

    def define(self, tok: Token, value: Value) -> None:
        name = tok.text[1:]
        for scope in self.scopes:
            if name in scope:
                previous = scope[name].loc
                self.sink.error(ErrorKind.REDEFINED_IDENTIFIER, tok.range, tok.text, previous)
                return
        value.name = name
        value.loc = tok.range
        self.scopes[-1][name] = value

    def lookup(self, tok: Token) -> Value:
        name = tok.text[1:]
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        self.sink.error(ErrorKind.UNDEFINED_IDENTIFIER, tok.range, tok.text)
        return Poison(UnknownType(), name, tok.range)

    # -- instructions ------------------------------------------------------------------------
    def instruction(self) -> Instruction:
        lhs: list[Token] = []
        if self.peek().kind is Tok.LOCAL:
            lhs.append(self.next())
            while self.accept(","):
                lhs.append(self.expect_kind(Tok.LOCAL))
            self.expect("=")
        keyword = self.peek()
        cls = self.select_instruction(keyword)
        self.next()
        state = _InstrState(cls)
        self.elements(state, cls.format.elements)
        self.resolve_literals(state)
        where = keyword.range.to(self.previous().range)
        inst = self.build(state, where, len(lhs))
        self.bind_results(inst, lhs)
        return inst

    def select_instruction(self, keyword: Token) -> type[Instruction]:
        candidates = self.by_keyword.get(keyword.text) if keyword.kind is Tok.KEYWORD else None
        if not candidates:
            self.fail("instruction")
        if len(candidates) == 1:
            return candidates[0]
        suffix = self.peek(1)
        options = []
        for cls in candidates:
            enum_type = _leading_suffix_enum(cls)
            names = [f".{e.value}" for e in enum_type]
            if suffix.text in names:
                return cls
            options.extend(names)
        self.next()
        self.fail(" or ".join(f'"{o}"' for o in options))

    def elements(self, state: _InstrState, elements: Sequence[Element]) -> None:
        for elem in elements:
            if isinstance(elem, Lit):
                self.expect(elem.text)
            elif isinstance(elem, OperandRef):
                self.operand_ref(state, operand_field(state.cls.spec, elem.name))
            elif isinstance(elem, ParamRef):
                state.param_names.setdefault(elem.region, []).append(self.expect_kind(Tok.LOCAL))
            elif isinstance(elem, TypeOf):
                self.type_of(state, elem.operands)
            elif isinstance(elem, TypesOf):
                self.types_of(state, elem.operand)
            elif isinstance(elem, AttrRef):
                f = state.cls.spec.field(elem.name)
                assert isinstance(f, AttrField)
                state.fields[f.name] = self.attribute(f)
            elif isinstance(elem, RegionRef):
                self.region_ref(state, elem.name)
            elif isinstance(elem, Custom):
                CUSTOM_PARSERS[elem.name](self, state)
            elif isinstance(elem, Optional):
                if self.peek().is_(elem.anchor):
                    self.elements(state, elem.elements)
            else:
                raise AssertionError(elem)

    def operand_ref(self, state: _InstrState, f: OperandField) -> None:
        if not f.variadic:
            start = self.peek().range
            state.fields[f.name] = self.operand(f.constants)
            state.locs[f.name] = start
            return
        values: list[Value | _Literal] = []
        more = self.starts_operand(f.constants)
        while more:  # after a comma an operand must follow: `%a[0,]` is a syntax error
            state.locs[f"{f.name}[{len(values)}]"] = self.peek().range
            values.append(self.operand(f.constants))
            more = self.accept(",") is not None
        state.fields[f.name] = values

    def starts_operand(self, constants: ConstKind) -> bool:
        tok = self.peek()
        return (
            tok.kind is Tok.LOCAL
            or (tok.kind in (Tok.INTEGER, Tok.BOOLEAN) and bool(constants & ConstKind.INT))
            or (tok.kind is Tok.FLOAT and bool(constants & ConstKind.FLOAT))
            or (tok.is_("?") and bool(constants & ConstKind.WILDCARD))
        )

    def operand(self, constants: ConstKind) -> Value | _Literal:
        tok = self.peek()
        if tok.kind is Tok.LOCAL:
            return self.lookup(self.next())
        if self.starts_operand(constants):
            return _Literal(self.next(), wildcard=tok.is_("?"))
        expected = ["local identifier"]
        if constants & ConstKind.INT:
            expected.append("integer constant")
        if constants & ConstKind.FLOAT:
            expected.append("floating constant")
        if constants & ConstKind.WILDCARD:
            expected.append('"?"')
        self.fail(" or ".join(expected))

    def type_of(self, state: _InstrState, names: Sequence[str]) -> None:
        annotated, type_range = self.type_()
        for name in names:
            entries = state.fields[name]
            for i, entry in enumerate(entries if isinstance(entries, list) else [entries]):
                key = name if not isinstance(entries, list) else f"{name}[{i}]"
                self.annotate(state, name, i, entry, annotated, state.locs[key].to(type_range))

    def types_of(self, state: _InstrState, name: str) -> None:
        entries = state.fields[name]
        types: list[tuple[Type, SourceRange]] = []
        if self.starts_type():
            types.append(self.type_())
            while self.accept(","):
                types.append(self.type_())
        if len(types) != len(entries):
            where = types[0][1].to(types[-1][1]) if types else self.previous().range
            self.sink.error(ErrorKind.TYPE_LIST_LENGTH, where, len(entries), len(types))
        for i, (entry, (annotated, type_range)) in enumerate(zip(entries, types)):
            self.annotate(
                state, name, i, entry, annotated, state.locs[f"{name}[{i}]"].to(type_range)
            )

    def annotate(
        self,
        state: _InstrState,
        name: str,
        index: int,
        entry: Value | _Literal,
        annotated: Type,
        where: SourceRange,
    ) -> None:
        """Give a literal its annotated type, or check an SSA value against the annotation.
        From here on, errors about the operand span the operand and its annotation. A value
        that contradicts its annotation becomes a placeholder, so that the checker does not
        report the same mistake again (as `Scalar type mismatch`, say)."""
        is_list = isinstance(state.fields[name], list)
        state.locs[f"{name}[{index}]" if is_list else name] = where
        if isinstance(entry, _Literal):
            self.store_literal(state, name, index, self.literal(entry, annotated))
        elif entry.type != annotated and not isinstance(entry.type, UnknownType):
            self.sink.error(ErrorKind.OPERAND_TYPE_MISMATCH, where, f"%{entry.name}", entry.type,
                            annotated)  # fmt: skip
            self.store_literal(state, name, index, Poison(UnknownType(), entry.name, entry.loc))

    def literal(self, lit: _Literal, annotated: Type) -> Value:
        tok = lit.token
        if lit.wildcard:
            return Constant(None, INDEX, tok.range)
        if not isinstance(annotated, ScalarType):
            self.sink.error(ErrorKind.EXPECTED_SCALAR, tok.range)
            return Poison(UnknownType(), None, tok.range)
        if tok.kind is Tok.BOOLEAN and annotated is not ScalarType.I1:
            self.sink.error(ErrorKind.CONSTANT_OUT_OF_RANGE, tok.range, tok.text, annotated)
        elif isinstance(tok.value, float) and annotated.is_int:
            self.sink.error(ErrorKind.FLOAT_CONSTANT_FOR_INT, tok.range, annotated)
        elif isinstance(tok.value, int) and annotated.is_int:
            lo, hi = annotated.int_range()
            if not lo <= tok.value <= hi:
                self.sink.error(ErrorKind.CONSTANT_OUT_OF_RANGE, tok.range, tok.text, annotated)
        return Constant(tok.value, annotated, tok.range)

    def store_literal(self, state: _InstrState, name: str, index: int, value: Value) -> None:
        current = state.fields[name]
        if isinstance(current, list):
            current[index] = value
        else:
            state.fields[name] = value

    def resolve_literals(self, state: _InstrState) -> None:
        """Type the literals no annotation covered, by their operand's declared rule."""
        for f in state.cls.spec.operands:
            entries = state.fields.get(f.name)
            listed = entries if isinstance(entries, list) else [entries]
            for i, entry in enumerate(listed):
                if isinstance(entry, _Literal):
                    rule = f.const_type
                    t = (
                        state.fields.get(rule, _attr_default(state.cls, rule))
                        if isinstance(rule, str)
                        else rule
                    )
                    self.store_literal(state, f.name, i, self.literal(entry, t or INDEX))

    def attribute(self, f: AttrField) -> Any:
        kind = f.kind
        if isinstance(kind, Suffix):
            tok = self.peek()
            names = {f".{e.value}": e for e in kind.enum_type}
            if tok.kind is Tok.SUFFIX and tok.text in names:
                return names[self.next().text]
            self.fail(" or ".join(f'"{n}"' for n in names))
        if isinstance(kind, Flag):
            return self.accept("." + kind.spelling) is not None
        if isinstance(kind, IntAttr):
            return self.integer()
        if isinstance(kind, ScalarTypeAttr):
            return self.scalar_type()
        if isinstance(kind, ScalarTypeListAttr):
            types = [self.scalar_type()]
            while self.accept(","):
                types.append(self.scalar_type())
            return tuple(types)
        if isinstance(kind, MemRefTypeAttr):
            return self.memref_type()
        raise AssertionError(kind)

    def region_ref(self, state: _InstrState, name: str) -> None:
        self.resolve_literals(state)
        f = state.cls.spec.field(name)
        assert isinstance(f, RegionField)
        region = Region(f.region_kind)
        attrs = {a.name: state.fields.get(a.name, a.default) for a in state.cls.spec.attrs}
        names = state.param_names.get(name, [])
        self.scopes.append({})
        for tok, param_type in zip(names, state.cls.region_param_types(attrs, name)):
            self.define(tok, region.add_param(param_type, tok.text[1:], tok.range))
        self.region_body(region)
        self.scopes.pop()
        state.fields[name] = region

    def build(self, state: _InstrState, where: SourceRange, num_lhs: int) -> Instruction:
        try:
            inst = state.cls(loc=where, **state.fields)
        except IRError as e:
            self.sink.error(e.kind, state.locs.get(e.operand or "", where), *e.args_)
            inst = state.cls(loc=where, result_types=[UnknownType()] * num_lhs, **state.fields)
        inst.operand_locs = state.locs
        return inst

    def bind_results(self, inst: Instruction, lhs: list[Token]) -> None:
        if len(lhs) != len(inst.results):
            where = lhs[0].range.to(lhs[-1].range) if lhs else inst.loc
            self.sink.error(ErrorKind.RESULT_COUNT, where, len(lhs), len(inst.results))
            for tok in lhs:
                self.define(tok, Poison(UnknownType()))
            return
        for tok, result in zip(lhs, inst.results):
            self.define(tok, result)


def _leading_suffix_enum(cls: type[Instruction]) -> Any:
    first = cls.format.elements[0]
    assert isinstance(first, AttrRef)
    kind = cls.spec.field(first.name)
    assert isinstance(kind, AttrField) and isinstance(kind.kind, Suffix)
    return kind.kind.enum_type


def _attr_default(cls: type[Instruction], name: str) -> Any:
    f = cls.spec.field(name)
    assert isinstance(f, AttrField)
    return f.default


def _position(diag: Diagnostic) -> tuple[int, int]:
    r = diag.range
    return (r.begin.line, r.begin.column) if r is not None else (0, 0)


# -- custom pieces of syntax ------------------------------------------------------------------


def _parse_slices(p: Parser, state: _InstrState) -> None:
    """`index-or-slice` list of subview: `%i`, `off:size`, `off:?`, or a bare `:`."""
    offsets: list[Value | _Literal] = []
    sizes: list[Value | _Literal | None] = []
    int_or_value = ConstKind.INT
    more = not p.peek().is_("]")
    while more:  # after a comma a slice must follow
        mode = len(offsets)
        if p.peek().is_(":"):
            colon = p.next()
            state.locs[f"offsets[{mode}]"] = state.locs[f"sizes[{mode}]"] = colon.range
            offsets.append(Constant(0, INDEX, colon.range))
            sizes.append(Constant(None, INDEX, colon.range))
        else:
            start = p.peek().range
            offsets.append(p.operand(int_or_value))
            if p.accept(":"):
                state.locs[f"sizes[{mode}]"] = p.peek().range
                sizes.append(p.operand(int_or_value | ConstKind.WILDCARD))
            else:
                sizes.append(None)
            state.locs[f"offsets[{mode}]"] = start.to(p.previous().range)
        more = p.accept(",") is not None
    state.fields["offsets"] = offsets
    state.fields["sizes"] = sizes


def _parse_expand_shape(p: Parser, state: _InstrState) -> None:
    """`x`-separated expand shape entries: integers, `?` or index values."""
    entries: list[Value | _Literal] = []
    allowed = ConstKind.INT | ConstKind.WILDCARD
    state.locs["shape[0]"] = p.peek().range
    entries.append(p.operand(allowed))
    while p.accept("x"):
        state.locs[f"shape[{len(entries)}]"] = p.peek().range
        entries.append(p.operand(allowed))
    state.fields["shape"] = entries


CUSTOM_PARSERS = {"slices": _parse_slices, "expand_shape": _parse_expand_shape}


def parse_source(source: Source) -> tuple[Program | None, list[Diagnostic]]:
    """Parse as far as possible: the program (None after a syntax error) and all errors."""
    parser = Parser(source)
    program = parser.program()
    return program, sorted(parser.sink.diagnostics, key=_position)


def parse(text: str, name: str = "<memory>") -> Program:
    """Parse a program (without verifying it); raises CompileError listing every error."""
    source = Source(text, name)
    program, diagnostics = parse_source(source)
    if program is None or diagnostics:
        raise CompileError(diagnostics, source)
    return program
