"""Verification of programs: every rule of the language reference, never mutating the IR.

`verify` returns all diagnostics of a program; `check` raises one CompileError listing them
in source order; `load` parses and checks text, reporting parse and check errors together.
"""

from __future__ import annotations

from nanotc.check import blas_rules  # noqa: F401  (registers the linear-algebra rules)
from nanotc.check.context import CheckContext
from nanotc.check.structure import StructureChecker
from nanotc.diagnostics import CompileError, Diagnostic, DiagnosticSink, Source, require_type
from nanotc.frontend.parser import parse_source
from nanotc.ir.core import Program


def verify(program: Program) -> list[Diagnostic]:
    require_type(program, Program, "expected a Program (nanotc.parse or nanotc.load makes one)")
    sink = DiagnosticSink()
    StructureChecker(CheckContext(sink)).program(program)
    return sink.diagnostics


def check(program: Program) -> Program:
    """Return the program unchanged if it is valid; raise CompileError otherwise."""
    diagnostics = verify(program)
    if diagnostics:
        raise CompileError(_in_order(diagnostics), program.source)
    return program


def load(text: str, name: str = "<memory>") -> Program:
    """Parse and verify a program text; every error of both stages is reported at once."""
    source = Source(text, name)
    program, diagnostics = parse_source(source)
    if program is not None:
        diagnostics = diagnostics + verify(program)
    if program is None or diagnostics:
        raise CompileError(_in_order(diagnostics), source)
    return program


def _in_order(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    unique = list(dict.fromkeys(diagnostics))
    return sorted(
        unique, key=lambda d: (d.range.begin.line, d.range.begin.column) if d.range else (0, 0)
    )
