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


# The layout LLVM may choose: the inner (K) loop's blocks before the outer loop's header,
# entered by a jump and left into the epilogue, which returns to the header by falling
# through. Read as text from a label to its last jump back, the inner loop would take in the
# epilogue and its stack access, and the outer loop would not be found.
INNER_LOOP_FIRST = """\
k:
\tpushq\t%rbx
\tjmp\t.LBB0_3
.LBB0_1:
\tvfmadd231ps\t%zmm1, %zmm0, %zmm2
\tdecq\t%rcx
\tjne\t.LBB0_1
.LBB0_2:
\tvfmadd213ps\t-64(%rsp), %zmm3, %zmm2
\tvmovups\t%zmm2, (%rdi)
\tdecq\t%rdx
\tje\t.LBB0_4
.LBB0_3:
\tvmovups\t(%rsi), %zmm0
\tmovq\t%r8, %rcx
\tjmp\t.LBB0_1
.LBB0_4:
\tpopq\t%rbx
\tretq
.Lfunc_end0:
"""


def test_loops_follow_the_control_flow_not_the_layout() -> None:
    loops = {loop.label: loop for loop in asm.loops(INNER_LOOP_FIRST, "k")}
    assert set(loops) == {".LBB0_1", ".LBB0_3"}
    inner, outer = loops[".LBB0_1"], loops[".LBB0_3"]
    assert outer.contains(inner) and not inner.contains(outer)
    assert inner.instructions == ("vfmadd231ps\t%zmm1, %zmm0, %zmm2", "decq\t%rcx", "jne\t.LBB0_1")
    assert outer.stack_accesses() == ["vfmadd213ps\t-64(%rsp), %zmm3, %zmm2"]
    assert outer.count("vfmadd") == 2 and "pushq\t%rbx" not in outer.instructions
    (hot,) = asm.hot_loops(INNER_LOOP_FIRST, "k")
    assert hot == inner and hot.stack_accesses() == []
