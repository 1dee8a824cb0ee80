"""LLVM's pipeline per module (`jit.Pipeline`): O2 where a loop leaves LLVM's vectorizer or
unroller work, O2's function simplification alone where every loop is the compiler's own
vector code, whose hot loops it leaves as O2 does."""

from __future__ import annotations

import pytest
from llvmlite import ir

import nanotc
from bench import kernels
from nanotc.codegen import asm
from nanotc.codegen.llvm.helpers import carried_loop, for_range, loop_census
from nanotc.codegen.llvm.types import I64
from nanotc.runtime import jit
from nanotc.targets import get

SCALAR_LOOP = """func @double(%X: memref<f32x?>) {
  %n = size %X[0] : memref<f32x?>
  for %i = 0, %n {
    %x = load %X[%i] : memref<f32x?>
    %y = arith.add %x, %x : f32
    store %y, %X[%i] : memref<f32x?>
  }
}
"""


def builder() -> ir.IRBuilder:
    module = ir.Module()
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64]), "f")
    return ir.IRBuilder(function.append_basic_block("entry"))


def test_an_open_loop_counts_only_where_innermost() -> None:
    b = builder()
    # the outer loop is open to the vectorizer and the unroller, but holds a loop
    closed = {"vectorize": False, "unroll": False}
    with for_range(b, 0, b.function.args[0]), for_range(b, 0, 4, **closed):
        pass
    assert not loop_census(b.module).leaves_work_to_llvm
    with for_range(b, 0, 4):
        pass
    assert loop_census(b.module).leaves_work_to_llvm


@pytest.mark.parametrize(("vectorize", "unroll"), [(True, False), (False, True)])
def test_a_loop_open_to_the_vectorizer_or_the_unroller_leaves_llvm_work(
    vectorize: bool, unroll: bool
) -> None:
    b = builder()
    with for_range(b, 0, 4, vectorize=vectorize, unroll=unroll):
        pass
    assert loop_census(b.module).leaves_work_to_llvm


def test_a_loop_carrying_a_vector_is_closed_one_of_scalars_open() -> None:
    b = builder()
    vector = ir.Constant(ir.VectorType(ir.FloatType(), 4), [0.0] * 4)
    scalar = ir.Constant(ir.FloatType(), 0.0)
    carried_loop(b, 0, 8, 1, [vector, scalar], lambda k, values: values, unroll=False)
    assert not loop_census(b.module).leaves_work_to_llvm
    carried_loop(b, 0, 8, 1, [scalar], lambda k, values: values, unroll=False)
    assert loop_census(b.module).leaves_work_to_llvm


@pytest.mark.parametrize(
    ("source", "pipeline"),
    [
        (kernels.dynamic("f32", "n.t"), jit.Pipeline.SIMPLIFY),
        (kernels.single("f32", 12544, 64, 147), jit.Pipeline.SIMPLIFY),
        (kernels.batched_repeated("f64", 35, 9, 35), jit.Pipeline.SIMPLIFY),
        (SCALAR_LOOP, jit.Pipeline.O2),
        (kernels.dynamic("f32", "n.t") + SCALAR_LOOP, jit.Pipeline.O2),
        (kernels.dynamic("f64", "t.t"), jit.Pipeline.SIMPLIFY),  # its packs' element copies
        # a gemv.t's reduction is unrolled by LLVM (1.18x in L1, f32)
        (kernels.sliced("gemv.t", "f32"), jit.Pipeline.O2),
        # K unrolled: the work-group loop holds no loop and is open to the vectorizer
        (kernels.batched("f32", 8, 8, 8), jit.Pipeline.O2),
    ],
    ids=[
        "dynamic gemm",
        "W3 static",
        "W2 35x9x35 looped",
        "scalar loop",
        "both",
        "dynamic t.t f64",
        "gemv.t",
        "W2 8^3",
    ],
)
def test_a_module_takes_o2_where_a_loop_leaves_llvm_work(
    source: str, pipeline: jit.Pipeline
) -> None:
    assert nanotc.compile(source, target="avx512", cache=False).pipeline is pipeline


def test_o2_vectorizes_the_user_loop_simplification_vectorizes_nothing() -> None:
    """The premise of the choice: function simplification runs no loop vectorizer."""
    compilation = nanotc.compile(SCALAR_LOOP, target="avx512", cache=False)
    o2, simplified = (jit.optimize(compilation.llvm_ir, get("avx512"), p) for p in jit.Pipeline)
    assert "vector.body" in str(o2) and "vector.body" not in str(simplified)


def hot_loop(source: str, target: str, pipeline: jit.Pipeline) -> asm.Loop:
    compilation = nanotc.compile(source, target=target, cache=False)
    native = get(target)
    code = jit.assembly(jit.optimize(compilation.llvm_ir, native, pipeline), native)
    name = compilation.program.functions[0].name
    return max(asm.hot_loops(code, name), key=lambda loop: loop.count("vfmadd"))


@pytest.mark.parametrize("target", ["avx512", "avx2"])
@pytest.mark.parametrize(
    "source",
    [
        kernels.dynamic("f32", "n.t"),
        kernels.dynamic("f64", "t.n"),
        kernels.single("f32", 12544, 64, 147),
        kernels.batched_repeated("f32", 56, 9, 9),
        kernels.column_blocks("f64", 512),
    ],
    ids=["dynamic n.t f32", "dynamic t.n f64", "W3 12544x64x147", "W2 56x9x9", "W1 f64"],
)
def test_simplification_leaves_the_hot_loop_as_o2_does(source: str, target: str) -> None:
    """As many instructions, FMAs and memory operands, and no spill: the loop counter's
    form and aligned against unaligned moves may differ."""

    def shape(loop: asm.Loop) -> tuple[int, int, int]:
        memory = sum("(" in instruction for instruction in loop.instructions)
        return len(loop.instructions), loop.count("vfmadd"), memory

    o2 = hot_loop(source, target, jit.Pipeline.O2)
    simplified = hot_loop(source, target, jit.Pipeline.SIMPLIFY)
    assert shape(simplified) == shape(o2)
    assert simplified.count("vfmadd") > 0 and simplified.stack_accesses() == []


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("trans", ["n.t", "t.n", "t.t"])
def test_no_innermost_loop_of_a_dynamic_gemm_spills(dt: str, trans: str) -> None:
    """Under function simplification, every innermost loop of a gemm of run-time sizes
    (packs, their element copies, tiles of C and of C^T) keeps its values in registers on
    AVX-512: fully unrolled by LLVM, the packs' element copies had held a pointer per row
    of a panel and spilled them (f64 `.t.n`: 21 stack accesses an iteration)."""
    compilation = nanotc.compile(kernels.dynamic(dt, trans), target="avx512", cache=False)
    assert compilation.pipeline is jit.Pipeline.SIMPLIFY
    found = asm.loops(compilation.assembly(), "gemm")
    innermost = [a for a in found if not any(a.contains(b) and b is not a for b in found)]
    assert len(innermost) > 10 and all(loop.stack_accesses() == [] for loop in innermost)
