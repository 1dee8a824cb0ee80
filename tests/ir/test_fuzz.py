"""Fuzzing: random mutations of valid programs (token- and character-level), arbitrary text,
and instructions built from random fields must never raise anything but CompileError; every
error must render and point into the text; whatever is accepted must round-trip."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nanotc
from nanotc.diagnostics import CompileError, Source
from nanotc.ir import instructions as ins
from nanotc.ir.builder import Builder
from nanotc.ir.core import (
    AttrField,
    Flag,
    Function,
    IntAttr,
    MemRefTypeAttr,
    OperandField,
    Program,
    Region,
    RegionField,
    ScalarTypeAttr,
    ScalarTypeListAttr,
    Suffix,
)
from nanotc.ir.types import DYNAMIC, GroupType, MemRefType, ScalarType
from nanotc.ir.values import Constant, Value

from .irfiles import EXAMPLES, VALID, ir_files

SEEDS = [p.read_text() for p in ir_files(VALID) + ir_files(EXAMPLES)]
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))

# whitespace and comments are kept as tokens, so that mutations never comment out the rest
_TOKENS = re.compile(r";[^\n]*|\s+|%\w+|@\w+|0[xX][\w.]+|[\w.]+|->|\S")
INSERTS = [
    *"(){}[]<>,:=?%@;.-+x",
    "->", "\n", "func", "@f", "%0", "%x", "%nx4", "if", "else", "for", "foreach", "yield",
    "gemm.n.t", "gemv.n", "ger", "hadamard_product", "sum.t", "axpby.n", ".atomic", "alloca",
    "load", "store", "subview", "expand", "fuse", "size", "cast", "cmp.lt", "arith.add",
    "arith.not", "group_id", "group_size", "barrier", "lifetime_stop", "i1", "i32", "index",
    "f32", "bf16", "void", "memref<f32x?>", "group<memref<f32>>", "strided<1,?>", "offset",
    "work_group_size(8,1)", "subgroup_size(3)", "0", "-1", "1.5", "true", "false", "0x1p3",
    "9223372036854775808", "-9223372036854775808", "1e999", "0x1p99999", "9" * 5000,
    "0" * 4400 + "1", "1" + "0" * 400 + ".0",
]  # fmt: skip


def check_text(text: str) -> None:
    """The fuzzing oracle for one input text."""
    try:
        program = nanotc.load(text, "fuzz.ir")
    except CompileError as e:
        assert e.diagnostics
        rendered = str(e)
        line_count = len(Source(text).lines())  # lines end at LF, CRLF or a lone CR
        for d in e.diagnostics:
            assert d.range is not None, d
            assert 1 <= d.range.begin.line <= d.range.end.line <= line_count, d
            assert f"fuzz.ir:{d.range}: {d.message}" in rendered
        return
    printed = nanotc.dump(program)
    assert nanotc.dump(nanotc.load(printed)) == printed


mutation = st.one_of(
    st.tuples(st.just("delete"), st.integers(0)),
    st.tuples(st.just("duplicate"), st.integers(0)),
    st.tuples(st.just("swap"), st.integers(0), st.integers(0)),
    st.tuples(st.just("insert"), st.integers(0), st.sampled_from(INSERTS)),
    st.tuples(st.just("replace"), st.integers(0), st.sampled_from(INSERTS)),
    st.tuples(st.just("truncate"), st.integers(0)),
)


def mutate_tokens(text: str, mutations: list[tuple[Any, ...]]) -> str:
    tokens = _TOKENS.findall(text)
    for kind, at, *rest in mutations:
        words = [i for i, t in enumerate(tokens) if not t.isspace() and not t.startswith(";")]
        if not words:
            break
        i = words[at % len(words)]
        if kind == "delete":
            del tokens[i]
        elif kind == "duplicate":
            tokens[i:i] = [tokens[i], " "]
        elif kind == "swap":
            j = words[rest[0] % len(words)]
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif kind == "insert":
            tokens[i:i] = [rest[0], " "]
        elif kind == "replace":
            tokens[i] = rest[0]
        else:
            del tokens[i:]
    return "".join(tokens)


@FUZZ
@given(st.sampled_from(SEEDS), st.lists(mutation, min_size=1, max_size=5))
def test_token_mutations_raise_only_compile_errors(seed: str, mutations: list[Any]) -> None:
    check_text(mutate_tokens(seed, mutations))


@FUZZ
@given(
    st.sampled_from(SEEDS),
    st.lists(
        st.tuples(
            st.integers(0), st.integers(0, 2), st.sampled_from("%@(){}[]<>,:=?x.-+0159eEpP;_\n \t")
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_character_mutations_raise_only_compile_errors(seed: str, edits: list[Any]) -> None:
    chars = list(seed)
    for at, kind, char in edits:
        i = at % (len(chars) + 1)
        if kind == 0:
            chars.insert(i, char)
        elif kind == 1 and i < len(chars):
            chars[i] = char
        else:
            del chars[i : i + 1]
    check_text("".join(chars))


@FUZZ
@given(st.text(max_size=200))
def test_arbitrary_text_raises_only_compile_errors(text: str) -> None:
    check_text(text)


@FUZZ
@given(st.lists(st.sampled_from(INSERTS[:90]), max_size=40))
def test_token_soup_raises_only_compile_errors(words: list[str]) -> None:
    check_text("func @f(%x: f32) {\n" + " ".join(words) + "\n}\n")


# -- the builder, checker and printer on instructions with random fields ------------------------

S = ScalarType
_SCALARS = list(ScalarType)
_MEMREFS = [
    MemRefType.packed(S.F32, []),
    MemRefType.packed(S.F32, [4]),
    MemRefType.packed(S.F64, [DYNAMIC]),
    MemRefType.packed(S.F32, [4, 4]),
    MemRefType.packed(S.I1, [2, 2]),
    MemRefType(S.F32, (4, DYNAMIC), (1, DYNAMIC)),
    MemRefType(S.F32, (2, 3, 4), (1, 2, 8)),
    MemRefType(S.F32, (4, 4), (1, 2)),  # violates the stride rule
]
_TYPES = [*_SCALARS, *_MEMREFS, GroupType(_MEMREFS[1]), GroupType(_MEMREFS[2], DYNAMIC)]


@st.composite
def random_value(draw: Any, args: list[Value]) -> Value:
    if draw(st.booleans()):
        return draw(st.sampled_from(args))
    t = draw(st.sampled_from(_SCALARS))
    if t.is_float:
        return Constant(draw(st.sampled_from([0.0, 1.5, -2.0, float("inf"), float("nan")])), t)
    return Constant(draw(st.integers(-3, 300) | st.just(2**63)), t)


@st.composite
def random_fields(draw: Any, cls: type[ins.Instruction], args: list[Value]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for f in cls.spec.operands:
        fields[f.name] = _operand(draw, f, args)
    for a in cls.spec.attrs:
        fields[a.name] = _attribute(draw, a)
    for r in cls.spec.regions:
        fields[r.name] = _region(draw, cls, r, fields)
    return fields


def _operand(draw: Any, f: OperandField, args: list[Value]) -> Any:
    if not f.variadic:
        return None if f.optional and draw(st.booleans()) else draw(random_value(args))
    values: list[Any] = draw(st.lists(random_value(args), max_size=3))
    if f.holes:
        return [None if draw(st.booleans()) else v for v in values]
    return values


def _attribute(draw: Any, a: AttrField) -> Any:
    kind = a.kind
    if isinstance(kind, Suffix):
        return draw(st.sampled_from(list(kind.enum_type)))
    if isinstance(kind, Flag):
        return draw(st.booleans())
    if isinstance(kind, IntAttr):
        return draw(st.integers(-2, 4))
    if isinstance(kind, ScalarTypeAttr):
        return draw(st.sampled_from(_SCALARS))
    if isinstance(kind, ScalarTypeListAttr):
        return tuple(draw(st.lists(st.sampled_from(_SCALARS), max_size=2)))
    assert isinstance(kind, MemRefTypeAttr)
    return draw(st.sampled_from(_MEMREFS))


def _region(draw: Any, cls: type[ins.Instruction], r: RegionField, fields: dict[str, Any]) -> Any:
    if r.optional and draw(st.booleans()):
        return None
    region = Region(r.region_kind)
    for t in cls.region_param_types(fields, r.name):
        region.add_param(t)
    return region


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_built_instructions_raise_only_compile_errors(data: st.DataObject) -> None:
    func = Function("k", Region())
    for i, t in enumerate(data.draw(st.lists(st.sampled_from(_TYPES), min_size=1, max_size=4))):
        func.body.add_param(t, f"a{i}")
    b = Builder(func.body)
    for _ in range(data.draw(st.integers(1, 4))):
        cls = data.draw(st.sampled_from(ins.LANGUAGE))
        fields = data.draw(random_fields(cls, list(func.body.params)))
        try:
            b.add(cls, **fields)
        except CompileError as e:
            assert str(e)
    program = Program([func])
    diagnostics = nanotc.verify(program)
    if not diagnostics:
        text = nanotc.dump(program)
        assert nanotc.dump(nanotc.load(text)) == text
