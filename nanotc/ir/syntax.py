"""Declarative instruction syntax, shared by the parser and the printer.

An instruction's `syntax` string is compiled once into a `Format`: a list of elements the
parser reads and the printer writes, so the two cannot disagree. The notation:

    $x              operand x (an SSA value, or a literal if the operand allows one);
                    a variadic operand is a comma-separated list
    $body           region `body`;  $body.param binds the name of the region's next parameter
    {a}             attribute a, spelled by its kind (`.t` suffix, `.atomic` flag, integer, type)
    type($x, $y)    one type annotation shared by the listed operands
    types($xs)      one type annotation per element of a variadic operand
    custom<name>    a hand-written piece (subview slices, expand shapes)
    ( ... )?        optional group: parsed when the next token is its first literal,
                    printed when any field inside it is present
    'c'             a quoted literal (needed for parentheses); other words and punctuation
                    are literals as they stand
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeAlias

from nanotc.ir.core import InstrSpec, OperandField


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class OperandRef:
    name: str


@dataclass(frozen=True)
class ParamRef:
    region: str


@dataclass(frozen=True)
class TypeOf:
    operands: tuple[str, ...]


@dataclass(frozen=True)
class TypesOf:
    operand: str


@dataclass(frozen=True)
class AttrRef:
    name: str


@dataclass(frozen=True)
class RegionRef:
    name: str


@dataclass(frozen=True)
class Custom:
    name: str


@dataclass(frozen=True)
class Optional:
    elements: tuple[Element, ...]

    @property
    def anchor(self) -> str:
        first = self.elements[0]
        assert isinstance(first, Lit), "an optional group starts with a literal"
        return first.text


Element: TypeAlias = (
    "Lit | OperandRef | ParamRef | TypeOf | TypesOf | AttrRef | RegionRef | Custom | Optional"
)


@dataclass(frozen=True)
class Format:
    keyword: str
    elements: tuple[Element, ...]


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<type>types?)\((?P<args>[^)]*)\)
    | custom<(?P<custom>\w+)>
    | \$(?P<ref>\w+)(?P<param>\.param)?
    | \{(?P<attr>\w+)\}
    | '(?P<quoted>[^']+)'
    | (?P<open>\()
    | (?P<close>\)\?)
    | (?P<lit>->|[,:\[\]=<>]|\w+)
    )""",
    re.VERBOSE,
)


def compile_format(keyword: str, syntax: str, spec: InstrSpec) -> Format:
    """Compile a syntax string; field references are checked against the declaration."""
    stack: list[list[Element]] = [[]]
    pos = 0
    names = {f.name for f in (*spec.operands, *spec.attrs, *spec.regions)}
    region_names = {f.name for f in spec.regions}
    while pos < len(syntax.rstrip()):
        m = _TOKEN.match(syntax, pos)
        if m is None:
            raise ValueError(f"bad syntax for {keyword!r} at {syntax[pos:]!r}")
        pos = m.end()
        elem = _element(m, names, region_names, keyword)
        if elem == "open":
            stack.append([])
        elif elem == "close":
            group = tuple(stack.pop())
            stack[-1].append(Optional(group))
        else:
            stack[-1].append(elem)  # type: ignore[arg-type]
    if len(stack) != 1:
        raise ValueError(f"unbalanced optional group in syntax of {keyword!r}")
    return Format(keyword, tuple(stack[0]))


def _element(m: re.Match[str], names: set[str], regions: set[str], keyword: str) -> object:
    def known(name: str) -> str:
        if name not in names:
            raise ValueError(f"syntax of {keyword!r} names unknown field {name!r}")
        return name

    if m["type"]:
        refs = tuple(known(a.strip().lstrip("$")) for a in m["args"].split(","))
        return TypeOf(refs) if m["type"] == "type" else TypesOf(refs[0])
    if m["custom"]:
        return Custom(m["custom"])
    if m["ref"]:
        name = known(m["ref"])
        if m["param"]:
            return ParamRef(name)
        return RegionRef(name) if name in regions else OperandRef(name)
    if m["attr"]:
        return AttrRef(known(m["attr"]))
    if m["quoted"]:
        return Lit(m["quoted"])
    if m["open"]:
        return "open"
    if m["close"]:
        return "close"
    return Lit(m["lit"])


def operand_field(spec: InstrSpec, name: str) -> OperandField:
    f = spec.field(name)
    assert isinstance(f, OperandField)
    return f
