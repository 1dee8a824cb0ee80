"""The assembly reader finds loops, their nesting and their stack accesses."""

from nanotc.codegen import asm

SAMPLE = """\
\t.text
\t.globl\tk
k:
\tpushq\t%rbx
.LBB0_1:
\tvmovups\t(%rdi), %zmm0
.LBB0_2:
\tvfmadd231ps\t%zmm1, %zmm0, %zmm2
\tvmovups\t-64(%rsp), %zmm3
\tdecq\t%rcx
\tjne\t.LBB0_2
\tvmovups\t(%rbp), %zmm4
\tdecq\t%rdx
\tjne\t.LBB0_1
\tretq
.Lfunc_end0:
"""


def test_loops_and_nesting() -> None:
    loops = {loop.label: loop for loop in asm.loops(SAMPLE, "k")}
    assert set(loops) == {".LBB0_1", ".LBB0_2"}
    assert loops[".LBB0_1"].contains(loops[".LBB0_2"])
    assert not loops[".LBB0_2"].contains(loops[".LBB0_1"])


def test_hot_loop_is_the_innermost_with_the_instruction() -> None:
    (hot,) = asm.hot_loops(SAMPLE, "k")
    assert hot.label == ".LBB0_2"
    assert hot.count("vfmadd") == 1
    assert hot.registers("zmm") == {"zmm0", "zmm1", "zmm2", "zmm3"}


def test_stack_accesses_are_rsp_relative_only() -> None:
    loops = {loop.label: loop for loop in asm.loops(SAMPLE, "k")}
    assert loops[".LBB0_2"].stack_accesses() == ["vmovups\t-64(%rsp), %zmm3"]
    # %rbp is an ordinary register in code without frame pointers
    assert "vmovups\t(%rbp), %zmm4" not in loops[".LBB0_1"].stack_accesses()
