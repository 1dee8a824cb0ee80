"""Runs the file-based front-end tests (format: see `irfiles`): every valid program loads,
round-trips through the printer and has the annotated types; every invalid program is
rejected with exactly the listed diagnostics; dump cases print exactly as expected."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import nanotc
from nanotc.diagnostics import ErrorKind

from .irfiles import (
    DUMP,
    EXAMPLES,
    INVALID,
    ROOT,
    VALID,
    canonical_type,
    diagnostics_of,
    error_directives,
    file_id,
    ir_files,
    roundtrip,
    type_directives,
    values_named,
)

VALID_FILES = ir_files(VALID)
INVALID_FILES = ir_files(INVALID)
DUMP_FILES = ir_files(DUMP)
EXAMPLE_FILES = ir_files(EXAMPLES)


def test_the_suite_has_files() -> None:
    # a wrong glob must not silently turn the file tests into zero tests
    assert len(VALID_FILES) >= 15
    assert len(INVALID_FILES) >= 60
    assert len(DUMP_FILES) >= 5
    assert EXAMPLES / "fused_kernel.ir" in EXAMPLE_FILES


@pytest.mark.parametrize("path", VALID_FILES + EXAMPLE_FILES, ids=file_id)
def test_valid_program_loads_and_roundtrips(path: Path) -> None:
    text = path.read_text()
    assert diagnostics_of(text, path.name) == []
    first, second = roundtrip(text, path.name)
    assert second == first


@pytest.mark.parametrize("path", VALID_FILES, ids=file_id)
def test_valid_program_types(path: Path) -> None:
    text = path.read_text()
    assert "; ERROR" not in text, "valid programs must not carry ERROR directives"
    program = nanotc.load(text, path.name)
    for directive in type_directives(text):
        values = values_named(program, directive.name)
        where = f"{path.name}:{directive.line}: %{directive.name}"
        assert len(values) == 1, f"{where} names {len(values)} values, expected exactly one"
        assert str(values[0].type) == canonical_type(directive.type), where


@pytest.mark.parametrize("path", INVALID_FILES, ids=file_id)
def test_invalid_program_diagnostics(path: Path) -> None:
    text = path.read_text()
    expected = error_directives(text)
    assert expected, f"{path.name} lists no ERROR directive"
    assert diagnostics_of(text, path.name) == expected


@pytest.mark.parametrize("path", DUMP_FILES, ids=file_id)
def test_dump_output(path: Path) -> None:
    expected = path.with_suffix(".expected").read_text()
    assert nanotc.dump(nanotc.load(path.read_text(), path.name)) == expected
    # the canonical text is itself canonical
    assert nanotc.dump(nanotc.load(expected)) == expected


def test_every_dump_case_has_expected_output() -> None:
    missing = [p.name for p in DUMP_FILES if not p.with_suffix(".expected").exists()]
    orphans = [p.name for p in DUMP.glob("*.expected") if not p.with_suffix(".ir").exists()]
    assert (missing, orphans) == ([], [])


def _reported_kinds() -> set[ErrorKind]:
    kinds = set()
    for path in INVALID_FILES:
        try:
            nanotc.load(path.read_text(), path.name)
        except nanotc.CompileError as e:
            kinds.update(d.kind for d in e.diagnostics)
    return kinds


def _kinds_used_by_nanotc() -> set[ErrorKind]:
    """Every ErrorKind the front end (parser, IR, checker) can report."""
    used = set()
    for package in ("frontend", "ir", "check"):
        for source in (ROOT / "nanotc" / package).rglob("*.py"):
            used.update(re.findall(r"ErrorKind\.([A-Z0-9_]+)", source.read_text()))
    return {ErrorKind[name] for name in used}


def test_every_reported_error_kind_has_an_invalid_case() -> None:
    """One invalid program per verification rule: each kind the compiler reports is hit."""
    missing = sorted(k.name for k in _kinds_used_by_nanotc() - _reported_kinds())
    assert not missing, f"add a tests/ir/invalid/<rule>.ir that reports each of {missing}"
