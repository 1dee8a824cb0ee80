"""Property: random well-formed programs (see `program_gen`) verify, print, parse back, and
print identically again; other spellings of the same program (the grammar's alternatives that
the printer normalises) parse to the same canonical text."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nanotc
from nanotc.ir.core import Program

from .program_gen import instruction_count, programs

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(programs())
def test_random_programs_roundtrip(program: Program) -> None:
    assert nanotc.verify(program) == []
    text = nanotc.dump(program)
    loaded = nanotc.load(text, "generated.ir")
    assert nanotc.dump(loaded) == text
    assert instruction_count(loaded) == instruction_count(program)


def respell(text: str, draw: st.DataObject) -> str:
    """Spell a canonical program differently without changing its meaning."""
    lines = []
    for line in text.splitlines():
        if draw.draw(st.booleans(), "hadamard_product"):
            line = re.sub(r"^(\s*)hadamard\b", r"\1hadamard_product", line)
        if draw.draw(st.booleans(), "comma after modifiers"):
            line = re.sub(r"^(\s*(?:gemm|gemv|sum|axpby)(?:\.\w+)+) ", r"\1, ", line)
        if "subview" in line and draw.draw(st.booleans(), "0:? for :"):
            line = re.sub(r"(?<=[\[,]):(?=[,\]])", "0:?", line)
        if draw.draw(st.booleans(), "explicit loop type"):
            line = re.sub(r"^(\s*(?:for|foreach) %\w+ = [^:{]*) \{$", r"\1 : index {", line)
        if draw.draw(st.booleans(), "explicit default group offset"):
            line = re.sub(r"group<(memref<[^<>]*(?:<[^<>]*>)?>)>", r"group<\1, offset: 0>", line)
        if draw.draw(st.booleans(), "comment"):
            line += " ; comment { } %x @y"
        indent = draw.draw(st.sampled_from(["", "\t", "  ", " \t "]), "indentation")
        lines.append(indent + line.replace(", ", draw.draw(st.sampled_from([", ", ",", " ,\n "]))))
    return "\n".join(lines)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs(), st.data())
def test_alternative_spellings_print_canonically(program: Program, data: st.DataObject) -> None:
    canonical = nanotc.dump(program)
    variant = respell(canonical, data)
    assert nanotc.dump(nanotc.load(variant, "variant.ir")) == canonical
