"""The file-based test format of `tests/ir` and helpers shared by the front-end tests.

    tests/ir/valid/*.ir      must load; print -> parse -> print is a fixpoint. A line
                             `; TYPE: %name : <type>` asserts the type of the value %name.
    tests/ir/invalid/*.ir    lines `; ERROR: LINE.COL[-...]: message` list every expected
                             diagnostic, in the order nanotc reports them.
    tests/ir/dump/X.ir       `nanotc.dump(nanotc.load(X.ir))` must equal X.expected.

Directives are comments, so they take part in the line numbering of the file they are in.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nanotc
from nanotc.diagnostics import DiagnosticSink, Source
from nanotc.frontend.lexer import tokenize
from nanotc.frontend.parser import ParseFailure
from nanotc.frontend.types import TypeParser
from nanotc.ir.core import Program, Region, walk
from nanotc.ir.values import Value

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
VALID = HERE / "valid"
INVALID = HERE / "invalid"
DUMP = HERE / "dump"
EXAMPLES = ROOT / "examples"

_TYPE = re.compile(r"^\s*;\s*TYPE:\s*%(?P<name>\w+)\s*:\s*(?P<type>.+?)\s*$")
_ERROR = re.compile(
    r"^\s*;\s*ERROR:\s*(?P<range>\d+\.\d+(?:-\d+(?:\.\d+)?)?):\s(?P<message>.*?)\s*$"
)


def ir_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.ir"))


def file_id(path: Path) -> str:
    return path.stem


@dataclass(frozen=True)
class TypeDirective:
    name: str
    type: str
    line: int


def type_directives(text: str) -> list[TypeDirective]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        m = _TYPE.match(line)
        if m:
            out.append(TypeDirective(m["name"], m["type"], number))
        elif re.match(r"^\s*;\s*TYPE\b", line):
            raise ValueError(f"line {number}: malformed TYPE directive: {line!r}")
    return out


def error_directives(text: str) -> list[tuple[str, str]]:
    """The expected diagnostics as (range, message) pairs."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        m = _ERROR.match(line)
        if m:
            out.append((m["range"], m["message"]))
        elif re.match(r"^\s*;\s*ERROR\b", line):
            raise ValueError(f"line {number}: malformed ERROR directive: {line!r}")
    return out


def diagnostics_of(text: str, name: str = "<memory>") -> list[tuple[str, str]]:
    """What nanotc reports for a program, as (range, message) pairs; [] if it is valid."""
    try:
        nanotc.load(text, name)
    except nanotc.CompileError as e:
        return [(str(d.range), d.message) for d in e.diagnostics]
    return []


def canonical_type(text: str) -> str:
    """A type as nanotc prints it, read by the front end's own type parser."""
    sink = DiagnosticSink()
    parser = TypeParser(tokenize(Source(text), sink), sink)
    try:
        t, _ = parser.type_()
    except ParseFailure:
        t = None
    rest = parser.peek()
    if t is None or sink.diagnostics or rest.text != "":
        raise ValueError(f"not a well-formed type: {text!r} ({sink.diagnostics})")
    return str(t)


def values_named(program: Program, name: str) -> list[Value]:
    """Every value called %name in any function: arguments, loop variables and results."""
    found: list[Value] = []
    for func in program.functions:
        found.extend(_named(func.body, name))
    return found


def _named(region: Region, name: str) -> Iterator[Value]:
    yield from (p for p in region.params if p.name == name)
    for inst in walk(region):
        yield from (r for r in inst.results if r.name == name)
        for r in inst.regions():
            yield from (p for p in r.params if p.name == name)


def roundtrip(text: str, name: str = "<memory>") -> tuple[str, str]:
    """dump(load(text)) and dump(load(dump(load(text))))."""
    first = nanotc.dump(nanotc.load(text, name))
    return first, nanotc.dump(nanotc.load(first, name))
