"""How errors are reported: the rendered text (`name:RANGE: message`, the source lines, `~`
under the range), ranges of one character, one line and several lines, errors of built
programs, and inputs that must give a CompileError rather than any other exception."""

from __future__ import annotations

import pytest

import nanotc
from nanotc.diagnostics import (
    CompileError,
    Diagnostic,
    ErrorKind,
    Source,
    SourcePos,
    SourceRange,
    render,
)
from nanotc.ir import instructions as ins
from nanotc.ir.builder import FunctionBuilder
from nanotc.ir.core import Program
from nanotc.ir.types import DYNAMIC, INDEX, MemRefType, ScalarType
from nanotc.ir.values import Constant

from .irfiles import diagnostics_of

S = ScalarType
F32 = S.F32
F64 = S.F64


def error_of(text: str, name: str = "<memory>") -> CompileError:
    with pytest.raises(CompileError) as info:
        nanotc.load(text, name)
    return info.value


@pytest.mark.parametrize(
    ("begin", "end", "text"),
    [
        ((3, 7), (3, 7), "3.7"),
        ((3, 7), (3, 12), "3.7-12"),
        ((7, 9), (8, 9), "7.9-8.9"),
    ],
)
def test_range_notation(begin: tuple[int, int], end: tuple[int, int], text: str) -> None:
    assert str(SourceRange(SourcePos(*begin), SourcePos(*end))) == text


def test_one_line_error_is_rendered_with_marker() -> None:
    text = "func @f(%a: f32) {\n    %b = arith.shl %a, %a : f32\n}\n"
    assert str(error_of(text, "kernel.ir")) == (
        "kernel.ir:2.10-31: Floating point type unsupported for instruction\n"
        "    %b = arith.shl %a, %a : f32\n"
        "         ~~~~~~~~~~~~~~~~~~~~~~"
    )


def test_markers_under_tabs_keep_the_tabs() -> None:
    """Columns count a tab as one character; the marker line repeats the tabs so that it
    lines up however wide a terminal shows them."""
    text = "func @f(%a: f32) {\n\t%b = arith.shl\t%a, %a : f32\n}\n"
    assert str(error_of(text, "kernel.ir")) == (
        "kernel.ir:2.7-28: Floating point type unsupported for instruction\n"
        "\t%b = arith.shl\t%a, %a : f32\n"
        "\t     ~~~~~~~~~~~~~~~~~~~~~~"
    )


def test_markers_under_wide_characters_take_two_columns() -> None:
    """Columns count characters; the marker line gives a wide (CJK) character the two columns
    a terminal shows it in, so the markers stay under the characters they mark."""
    text = "func @f() {\n    %x = group_id 漢字 $\n}\n"
    assert str(error_of(text)).splitlines()[:4] == [
        "<memory>:2.19-20: Unknown token",
        "    %x = group_id 漢字 $",
        "                  ~~~~",
        "<memory>:2.22: Unknown token",
    ]
    assert str(error_of(text)).splitlines()[-1] == " " * 23 + "~"


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_carriage_return_files_count_lines_as_newline_files_do(newline: str) -> None:
    text = newline.join(["func @f(%a: f32) {", "    %b = arith.shl %a, %a : f32", "}", ""])
    assert str(error_of(text, "kernel.ir")) == (
        "kernel.ir:2.10-31: Floating point type unsupported for instruction\n"
        "    %b = arith.shl %a, %a : f32\n"
        "         ~~~~~~~~~~~~~~~~~~~~~~"
    )


def test_single_character_range_has_one_marker() -> None:
    text = "func @f() {\n    %x = group_id $\n}\n"
    error = error_of(text)
    assert str(error) == "<memory>:2.19: Unknown token\n    %x = group_id $\n                  ~"


def test_region_instruction_spans_to_its_closing_brace() -> None:
    """The reference convention: an instruction with a region runs to its `}` (7.9-8.9)."""
    text = (
        "func @f(%n: index) {\n"
        "    ; two\n"
        "    ; three\n"
        "    ; four\n"
        "    ; five\n"
        "    foreach %i = 0, %n {\n"
        "        foreach %j = 0, %n {\n"
        "        }\n"
        "    }\n"
        "}\n"
    )
    error = error_of(text, "nested.ir")
    assert [str(d.range) for d in error.diagnostics] == ["7.9-8.9"]
    assert str(error) == (
        "nested.ir:7.9-8.9: SPMD regions must not be nested\n"
        "        foreach %j = 0, %n {\n"
        "        ~~~~~~~~~~~~~~~~~~~~\n"
        "        }\n"
        "        ~"
    )


def test_gemm_error_spans_the_whole_instruction() -> None:
    """The example of SPEC-NOTES: a one-line gemm from column 9 to 99 is `7.9-99`."""
    gemm = "gemm.n.n 1.0, %a, %a, 0.0, %a : f32, memref<f32x8x8>, memref<f32x8x8>, f32, "
    gemm += "memref<f32x8x8>"
    lines = ["func @f(%a: memref<f32x8x8>) {", "    foreach %i = 0, 4 {"]
    lines += ["    ; padding"] * 4 + ["        " + gemm, "    }", "}"]
    error = error_of("\n".join(lines), "kernel.ir")
    first = str(error).splitlines()
    assert (
        first[0] == "kernel.ir:7.9-99: Collective instruction must not be called from SPMD region"
    )
    assert first[1] == "        " + gemm
    assert first[2] == " " * 8 + "~" * len(gemm)


def test_every_error_is_rendered_in_source_order() -> None:
    text = (
        "func @f(%a: i32) {\n"
        "    %b = arith.add %a, %nope : i32\n"
        "    %c = arith.not 1.5 : f32\n"
        "}\n"
        "func @f() {\n"
        "}\n"
    )
    error = error_of(text, "many.ir")
    headers = [line for line in str(error).splitlines() if line.startswith("many.ir:")]
    assert headers == [
        "many.ir:2.24-28: Undefined identifier %nope",
        "many.ir:3.10-28: Floating point type unsupported for instruction",
        "many.ir:5.1-9: Function @f was already defined at 1.1-16",
    ]
    assert error.first.kind is ErrorKind.UNDEFINED_IDENTIFIER


def test_source_name_defaults_to_memory() -> None:
    assert str(error_of("func")).startswith("<memory>:1.5: syntax error, unexpected end of file")


def test_diagnostic_without_range_renders_message_only() -> None:
    diag = Diagnostic(ErrorKind.EXPECTED_MEMREF)
    assert render(diag, Source("", "x.ir")) == "x.ir: Expected memref type"
    assert render(diag, None) == "Expected memref type"
    assert str(CompileError([diag])) == "Expected memref type"


def test_message_arguments_are_formatted() -> None:
    [(where, message)] = diagnostics_of("func @f() subgroup_size(5) {\n}\n")
    assert (where, message) == (
        "1.11-26",
        "Unsupported subgroup size (supported: 1, 2, 4, 8, 16, 32, 64)",
    )


# -- inputs that once escaped as other exceptions ----------------------------------------------


@pytest.mark.parametrize("digits", [20, 4300, 5000, 100_000])
def test_huge_integer_literal_is_an_overflow(digits: int) -> None:
    """int() refuses texts of over 4300 digits (ValueError); it must be `Integer overflow`."""
    literal = "9" * digits
    text = f"func @f(%a: memref<f32x{literal}>) {{\n    %x = cast {literal} : i64 -> i64\n}}\n"
    assert diagnostics_of(text) == [
        (f"1.24-{23 + digits}", "Integer overflow"),
        (f"2.15-{14 + digits}", "Integer overflow"),
    ]


def test_leading_zeros_do_not_overflow() -> None:
    text = "func @f() {\n    %x = cast " + "0" * 5000 + "42 : i64 -> i64\n}\n"
    program = nanotc.load(text)
    assert "cast 42 : i64 -> i64" in nanotc.dump(program)


@pytest.mark.parametrize("literal", ["1" + "0" * 400 + ".0", "0x1p99999", "1e99999999999999999999"])
def test_huge_float_literal_is_out_of_range(literal: str) -> None:
    text = f"func @f() {{\n    %x = cast {literal} : f64 -> f64\n}}\n"
    assert diagnostics_of(text) == [
        (f"2.15-{14 + len(literal)}", "Floating point value out of range")
    ]


# -- programs built with the Python API --------------------------------------------------------


def test_builder_error_is_a_compile_error_without_location() -> None:
    f = FunctionBuilder("k", a=MemRefType.packed(F32, [4, 4]))
    with pytest.raises(CompileError) as info:
        f.body.add(ins.Fuse, source=f.args["a"], first=1, last=1)
    assert [(d.kind, d.range) for d in info.value.diagnostics] == [(ErrorKind.OUT_OF_BOUNDS, None)]
    assert str(info.value) == (
        "Argument is out of bounds: modes 1 to 1 of a memref of order 2"
        " (fused: first < last, both from 0 to 1)"
    )


def test_verify_reports_rules_of_built_programs() -> None:
    """Built programs have no locations; the checker still applies every rule, including the
    ones the parser applies to text (visibility of values, well-formed argument types)."""
    other = FunctionBuilder("other", n=INDEX)
    f = FunctionBuilder(
        "k",
        bad=MemRefType(F32, (4, 4), (1, 2)),
        a=MemRefType.packed(F32, [4, DYNAMIC]),
    )
    f.body.add(ins.Alloca, memref=MemRefType(F64, (4, 4), (1, 3)))
    f.body.arith(ins.BinaryOp.ADD, other.args["n"], other.args["n"])
    with f.body.for_(0, 4, parallel=True) as (body, _):
        body.add(ins.Barrier)
    program = Program([f.finish(), other.finish(), FunctionBuilder("k").finish()])
    found = [(d.kind, d.range) for d in nanotc.verify(program)]
    assert found == [
        (ErrorKind.INVALID_STRIDE, None),
        (ErrorKind.INVALID_STRIDE, None),
        (ErrorKind.UNDEFINED_IDENTIFIER, None),
        (ErrorKind.UNDEFINED_IDENTIFIER, None),
        (ErrorKind.COLLECTIVE_IN_SPMD, None),
        (ErrorKind.REDEFINED_FUNCTION, None),
    ]
    with pytest.raises(CompileError):
        nanotc.check(program)


@pytest.mark.parametrize(
    ("value", "t"),
    [(2**63, S.I64), (-(2**63), S.INDEX), (300, S.I8), (-129, S.I8), (2, S.I1), (70000, S.I16)],
)
def test_verify_rejects_built_literals_that_cannot_be_written(value: int, t: ScalarType) -> None:
    """The printer could not write them so that they parse back: the checker rejects them."""
    f = FunctionBuilder("k")
    f.body.add(ins.Cast, a=Constant(value, t), to=t)
    found = [(d.kind, d.message) for d in nanotc.verify(Program([f.finish()]))]
    assert found == [(ErrorKind.CONSTANT_OUT_OF_RANGE, f"Constant {value} does not fit type {t}")]


@pytest.mark.parametrize(
    ("value", "t"),
    [(2**63 - 1, S.I64), (-(2**63) + 1, S.INDEX), (255, S.I8), (-128, S.I8), (1, S.I1)],
)
def test_built_literals_at_the_limits_roundtrip(value: int, t: ScalarType) -> None:
    f = FunctionBuilder("k")
    f.body.add(ins.Cast, a=Constant(value, t), to=t)
    program = Program([f.finish()])
    assert nanotc.verify(program) == []
    text = nanotc.dump(program)
    assert nanotc.dump(nanotc.load(text)) == text


def test_built_program_prints_and_reloads() -> None:
    f = FunctionBuilder("scale", alpha=F32, x=MemRefType.packed(F32, [DYNAMIC]))
    b = f.body
    n = b.size(f.args["x"], 0)
    with b.for_(0, n, parallel=True) as (loop, i):
        v = loop.load(f.args["x"], [i])
        loop.store(loop.arith(ins.BinaryOp.MUL, v, f.args["alpha"]), f.args["x"], [i])
    program = Program([f.finish()])
    assert nanotc.verify(program) == []
    text = nanotc.dump(program)
    assert text == (
        "func @scale(%alpha: f32, %x: memref<f32x?>) {\n"
        "    %0 = size %x[0] : memref<f32x?>\n"
        "    foreach %1 = 0, %0 {\n"
        "        %2 = load %x[%1] : memref<f32x?>\n"
        "        %3 = arith.mul %2, %alpha : f32\n"
        "        store %3, %x[%1] : memref<f32x?>\n"
        "    }\n"
        "}\n"
    )
    assert nanotc.dump(nanotc.load(text)) == text


@pytest.mark.parametrize("function", ["compile", "load", "parse", "check", "verify", "dump"])
@pytest.mark.parametrize("value", [None, 5, b"func @k() {}"], ids=["None", "int", "bytes"])
def test_public_functions_name_what_they_expected_instead_of_a_program(
    function: str, value: object
) -> None:
    """A TypeError that says what was given, not an AttributeError from inside."""
    with pytest.raises(TypeError, match=f"got {type(value).__name__} "):
        getattr(nanotc, function)(value)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"options": 5}, "options must be CompileOptions, got int"),
        ({"cache": "yes"}, "cache must be True, False or None, got str"),
        ({"name": 5}, "a program's name must be a str, got int"),
    ],
)
def test_compile_options_of_the_wrong_type_are_refused(options: dict, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        nanotc.compile("func @k() {}", **options)


def test_a_mismatched_operand_type_names_the_value_and_both_types() -> None:
    """From text the value's name; in a built program, where a loop bound may have none,
    the operand's role."""
    text = "func @f(%i: i32) {\n    %y = arith.add %i, %i : i64\n}\n"
    expected = "Type of SSA value does not match operand type: %i is i32, not i64"
    assert [d.message for d in error_of(text).diagnostics] == [expected, expected]
    f = FunctionBuilder("k", n=S.I32)
    start = f.body.arith(ins.BinaryOp.ADD, f.args["n"], f.args["n"])
    with f.body.for_(start, f.args["n"], loop_type=S.I64):
        pass
    found = [d.message for d in nanotc.verify(Program([f.finish()]))]
    assert found == [
        "Type of SSA value does not match operand type: the start is i32, not i64",
        "Type of SSA value does not match operand type: %n is i32, not i64",
    ]


def test_a_scalar_mismatch_names_both_types() -> None:
    """Text annotates each operand, so only a built program's arithmetic gets this far."""
    f = FunctionBuilder("k", x=F32, y=F64)
    f.body.arith(ins.BinaryOp.ADD, f.args["x"], f.args["y"])
    halved = f.body.arith(ins.BinaryOp.DIV, f.args["y"], f.args["y"])
    f.body.cmp(ins.CmpCond.LT, f.args["x"], halved)
    found = [d.message for d in nanotc.verify(Program([f.finish()]))]
    assert found == [
        "Scalar type mismatch: %x is f32, %y is f64",
        "Scalar type mismatch: %x is f32, the rhs is f64",
    ]
