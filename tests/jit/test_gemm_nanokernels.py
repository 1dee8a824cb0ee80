"""GEMM through the generated nanokernels (`tile.gemm`, `tile.batch_gemm`) against the
reference evaluator and numpy, on every target: static shapes on both sides of each register
tile's edges (row masks, narrower column kernels, fully unrolled and looped K), dynamic sizes
(run-time row masks, power-of-two column remainders), gathered A and scattered C, every beta
form (0 never reading C, 1, other, run-time), mixed f16/f32/f64 inputs, empty extents
(static ones on every path, AMX's included), and
batch-reduce loops of gemms accumulating in registers.

What the compiler emits for AVX-512 (the Zen 4 host's rules, `ZEN4`, and split FMA units) is
checked on every host; its results where the host runs the code (`runnable`, `needs_host`)."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import numpy as np
import pytest

import nanotc
from nanotc.codegen import asm
from nanotc.ir.printer import print_program
from nanotc.ir.types import ScalarType, numpy_dtype
from nanotc.lowering.choices import CompileOptions, GemmChoice
from nanotc.lowering.gemm_tiles import COUNTED_COLUMNS, SINGLE_COLUMN_VECTORS
from nanotc.lowering.register_tile import RegisterTile, choose, fits, holds_b_columns, small_gemm
from nanotc.targets import Target, get
from nanotc.tuning.tuner import gemm_sites

from .blas_cases import Case, expected, run_case
from .helpers import (
    DTYPES,
    SHAPES,
    SPLIT_FMA,
    TARGETS,
    ZEN3,
    ZEN4,
    assert_match,
    check,
    compiled,
    fill_garbage,
    needs_host,
    random_array,
    runnable,
    runs_here,
)

TRANSPOSES = list(itertools.product("nt", repeat=2))


def param_id(value: object) -> str:
    """A test id: a target by its name, a tuple's items run together."""
    if isinstance(value, Target):
        return value.name
    return "".join(map(str, value)) if isinstance(value, tuple) else str(value)


def tile_edges(target: str, ty: str) -> list[tuple[int, int, int]]:
    """(m, n, k) around the register tile chosen for a large gemm: one row short of, equal to
    and one past a vector and a tile; one column short of, equal to and past the tile width;
    K fully unrolled (<= 16) and looped with and without a remainder."""
    tile = choose(get(target), ScalarType(ty), None, None, None)
    lanes, mr, nr = tile.lanes, tile.mr, tile.nr
    ms = sorted({1, max(1, lanes - 1), lanes + 1, mr, mr + 1, 2 * mr + 3})
    ns = sorted({1, max(1, nr - 1), nr, nr + 1, 2 * nr + 1})
    ks = [1, 16, 17, 53]
    return [(ms[i % len(ms)], ns[i % len(ns)], ks[i % len(ks)]) for i in range(6)]


def is_lowered_to_tiles(text: str, target: str = "host") -> bool:
    return "tile." in print_program(compiled(text, target).lowered)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_static_shapes_around_the_register_tile(ty: str, target: str, rng) -> None:
    for i, mnk in enumerate(tile_edges(target, ty)):
        trans = TRANSPOSES[i % 4]
        alpha, beta = [(1.0, 0.0), (2.5, 1.0), (-0.5, 1.5)][i % 3]
        case = Case(
            "gemm", trans, (ty,) * 3, ty, ("packed",) * 3, alpha=alpha, beta=beta, static_shape=mnk
        )
        assert is_lowered_to_tiles(case.text(), target)
        run_case(case, target, rng, [mnk])


@pytest.mark.parametrize("target", runnable(ZEN3))
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_k_loops_of_two_steps(ty: str, target: Target, rng) -> None:
    """Zen 3 takes two k steps per iteration of a K loop over static addresses
    (`Target.k_unroll`): even and odd K (a last step after the loop), tile edges around."""
    assert target.k_unroll == 2
    shapes = [(37, 7, 18), (32, 9, 17), (9, 13, 33), (56, 9, 9)]
    for i, mnk in enumerate(shapes):
        case = static_gemm(ty, i, mnk)
        assert "unroll 2" in nanotc.compile(case.text(), target=target).nanokernels()
        run_case(case, target, rng, [mnk])


def static_gemm(ty: str, i: int, mnk: tuple[int, int, int]) -> Case:
    """The i-th static gemm of a list, cycling through the transposes and epilogue forms."""
    alpha, beta = [(1.0, 1.0), (2.5, 0.0), (-0.5, 1.5)][i % 3]
    return Case(
        "gemm", TRANSPOSES[i % 4], (ty,) * 3, ty, ("packed",) * 3,
        alpha=alpha, beta=beta, static_shape=mnk,
    )  # fmt: skip


def run_static_gemms(
    ty: str, target: str | Target, rng, shapes: list[tuple[int, int, int]]
) -> None:
    """One static gemm per shape (`static_gemm`)."""
    for i, mnk in enumerate(shapes):
        run_case(static_gemm(ty, i, mnk), target, rng, [mnk])


@pytest.mark.parametrize("target", ["host", "avx2"])
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_short_gemms_on_narrower_vectors(ty: str, target: str, rng) -> None:
    """Static M of at most half a vector: tiles in the narrowest vectors that hold M (ymm or
    xmm), whole (M a power of two) or masked, every transpose and epilogue form."""
    lanes = choose(get(target), ScalarType(ty), None, None, None).lanes
    ms = range(1, lanes // 2 + 1)
    run_static_gemms(
        ty, target, rng, [(m, 1 + 3 * i % 11, (5, 8, 17)[i % 3]) for i, m in enumerate(ms)]
    )


@pytest.mark.parametrize("target", ["host", "avx2"])
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_whole_narrower_last_vectors(ty: str, target: str, rng) -> None:
    """Static M one to three full vectors plus a quarter or half of one: the last vector of
    each tile column loads and stores a narrower whole vector, every transpose and epilogue
    form, K unrolled and looped."""
    lanes = choose(get(target), ScalarType(ty), None, None, None).lanes
    smallest = 16 // (4 if ty == "f32" else 8)  # lanes of an xmm
    ms = [v * lanes + lanes // d for v in (1, 2, 3) for d in (2, 4) if lanes // d >= smallest]
    run_static_gemms(
        ty, target, rng, [(m, (9, 4, 13)[i % 3], (9, 20, 33)[i % 3]) for i, m in enumerate(ms)]
    )


def split_fma_shapes(ty: str) -> list[tuple[int, int, int]]:
    """Static shapes whose M leaves a narrowed last vector on SPLIT_FMA: whole (a quarter or
    half vector) or masked (three rows in a 4-lane vector), after 1, 2 and 4 vectors."""
    lanes = SPLIT_FMA.lanes(ScalarType(ty))
    ms = [v * lanes + rest for v in (1, 2, 4) for rest in (3, lanes // 4, lanes // 2)]
    return [(m, (9, 4, 13)[i % 3], (9, 20, 35)[i % 3]) for i, m in enumerate(ms)]


@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_last_vectors_compute_narrow_on_split_fma_units(ty: str) -> None:
    """On AVX-512 executed by 256-bit units, a tile's narrowed last vector computes in its
    own width where K loops (compiled on any host; `test_split_fma_units_results` runs the
    kernels)."""
    for i, mnk in enumerate(split_fma_shapes(ty)):
        if mnk[2] > 16:  # a K loop (unrolled K keeps full-width vectors)
            plans = compiled(static_gemm(ty, i, mnk).text(), SPLIT_FMA).nanokernels()
            assert "accumulators (the last in" in plans, mnk


@needs_host(SPLIT_FMA)
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_split_fma_units_results(ty: str, rng) -> None:
    """The narrowed last vectors' results, every transpose and epilogue form, K unrolled and
    looped."""
    run_static_gemms(ty, SPLIT_FMA, rng, split_fma_shapes(ty))


@pytest.mark.parametrize(
    ("types", "target"),
    [
        (("f32",) * 3, "host"),
        (("f64",) * 3, "host"),
        (("f32",) * 3, "avx2"),
        (("f64",) * 3, "avx2"),
        (("f32", "f32", "f64"), "avx2"),
        (("f64",) * 3, "generic"),
    ],
    ids=param_id,
)
def test_dynamic_sizes_every_remainder(types: tuple[str, str, str], target: str, rng) -> None:
    """One kernel for all sizes: every M remainder (run-time masks; on AVX2 sign masks of
    A's f32 or f64 lanes, f32 A into f64 C in half vectors) and N remainder (the power-of-two
    column kernels) from 1 to 70, runtime alpha/beta. (Dynamic gemms compile to much more
    code than static ones: a few kernels, many sizes.)"""
    case = Case("gemm", ("n", "n"), types, types[2], ("dynamic",) * 3)
    sizes = [(m, n, int(rng.choice(SHAPES))) for m, n in zip(range(1, 71, 3), range(70, 0, -3))]
    run_case(case, target, rng, sizes)


def test_run_time_rows_end_in_a_tile_of_half_the_vectors() -> None:
    """A run-time M's last rows, where they fit half a tile's vectors, take a tile of those
    in the direct path's widest column blocks (32 x 13 -> 16 x 13 on Zen 4), behind a
    run-time test; its narrower column blocks, the blocked path's tiles (of a run-time M or
    of a static one's blocks) and bf16 tiles on vdpbf16ps keep one kernel. The direct
    path's last columns (counted ones, then a single one) are SINGLE_COLUMN_VECTORS tall;
    the blocked path's are counted too (but bf16's, whose last columns are half a block and
    single ones)."""

    def tiles(inputs: str, output: str) -> list[str]:
        a, c = f"memref<{inputs}x?x?>", f"memref<{output}x?x?>"
        text = f"""func @k(%A: {a}, %B: {a}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : {output}, {a}, {a}, {output}, {c}
}}"""
        return re.findall(r"tile (\d+ x \d+)", nanotc.compile(text, target=ZEN4).tiled())

    # the blocked path's tiles on 64-row (f64: 32-row) packed panels first, then the direct
    tall, counted = SINGLE_COLUMN_VECTORS, COUNTED_COLUMNS
    assert tiles("f32", "f32") == ["64 x 6", f"64 x {counted}", "64 x 1", "32 x 13", "16 x 13",
                                   f"{16 * tall} x {counted}", f"{16 * tall} x 1"]  # fmt: skip
    assert tiles("f64", "f64") == ["32 x 6", f"32 x {counted}", "32 x 1", "16 x 13", "8 x 13",
                                   f"{8 * tall} x {counted}", f"{8 * tall} x 1"]  # fmt: skip
    assert tiles("bf16", "f32") == ["64 x 6", "64 x 3", "64 x 1", "32 x 13", "32 x 6", "32 x 1"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_single_columns_of_a_run_time_n_match_numpy(ty: str, target: str, rng) -> None:
    """N past whole column blocks by 1 to 4 columns, in tiles SINGLE_COLUMN_VECTORS tall
    (counted ones and a single one): M below, at and past such a tile, run-time and
    static."""
    lanes = get(target).lanes(ScalarType(ty))
    tall = SINGLE_COLUMN_VECTORS * lanes
    rows = [1, lanes + 3, tall - 1, tall, tall + 5, 3 * tall + 1]
    sizes = [(m, n, 37) for m in rows for n in (1, 3, 4, 17)]
    run_case(Case("gemm", ("n", "n"), (ty,) * 3, ty, ("dynamic",) * 3), target, rng, sizes)
    dtype = numpy_dtype(ScalarType(ty))
    for m in (tall - 1, tall + 5):
        a_t, b_t, c_t = f"memref<{ty}x{m}x37>", f"memref<{ty}x37x?>", f"memref<{ty}x{m}x?>"
        text = f"""func @k(%A: {a_t}, %B: {b_t}, %C: {c_t}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : {ty}, {a_t}, {b_t}, {ty}, {c_t}
}}"""
        a = np.asfortranarray(rng.uniform(-1, 1, (m, 37)).astype(dtype))
        b = np.asfortranarray(rng.uniform(-1, 1, (37, 3)).astype(dtype))
        c = np.full((m, 3), np.nan, dtype, order="F")
        compiled(text, target)["k"](a, b, c, group_size=1)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("layouts", [("dynamic",) * 3, ("rowmajor", "strided", "strided")], ids=str)
def test_counted_columns_of_a_run_time_n_match_numpy(layouts: tuple[str, ...], target: str,
                                                    rng) -> None:  # fmt: skip
    """Every count of a run-time N's last columns past the whole blocks (`tile.gemm ...
    valid`: the columns past the count repeat the last one): every argument's whole memory
    against the reference evaluator (nothing past C's columns or rows written), alpha and
    beta (beta 0 never reads C; a repeated column does not add beta C twice)."""
    for ty in ("f32", "f64"):
        nr = choose(get(target), ScalarType(ty), None, None, None).nr
        sizes = [(m, nr * blocks + left, 21) for blocks in (0, 1) for left in range(1, nr)
                 for m in (5, 70)]  # fmt: skip
        run_case(Case("gemm", ("n", "n"), (ty,) * 3, ty, layouts), target, rng, sizes)


@pytest.mark.parametrize(("target", "paths"), [("avx2", 2), ("generic", 1)])
def test_counted_columns_on_the_blocked_path_match_numpy(target: str, paths: int,
                                                         rng) -> None:  # fmt: skip
    """A run-time M past the vectors whose masks the direct path would hold in registers
    takes the blocked path, whose last columns past the whole blocks are counted tiles too
    (`paths`: of the blocked and the direct path, those whose tiles are wide enough; the
    generic target's blocked tiles are 2 columns): every count, every argument's whole
    memory against the reference evaluator."""
    case = Case("gemm", ("n", "n"), ("f32",) * 3, "f32", ("dynamic", "dynamic", "strided"))
    text = case.text()
    tiled = compiled(text, target).tiled()
    counted = re.findall(r"tile \d+ x (\d+) valid", tiled)
    assert len(counted) == paths and max(map(int, counted)) <= COUNTED_COLUMNS
    nr = choose(get(target), ScalarType.F32, None, None, None).nr
    run_case(case, target, rng, [(41, n, 19) for n in range(1, 2 * nr + 1)])


@pytest.mark.parametrize("left", [1, 3, 6])
def test_counted_columns_of_a_large_gemm_match_numpy(left: int, rng) -> None:
    """On the host: A and B past half of L2 take the blocked path, N whole blocks and
    `left` columns."""
    case = Case("gemm", ("n", "n"), ("f32",) * 3, "f32", ("dynamic",) * 3)
    run_case(case, "host", rng, [(100, 296 + left, 1000)])


def test_counted_columns_repeat_the_last_one() -> None:
    """The direct path's counted tile on Zen 4: its columns past the count read op(B) and
    C at the last counted column, and the K
    loop (a broadcast per column) keeps its FMAs on zmm registers without stack accesses."""
    text = """func @k(%A: memref<f32x?x?>, %B: memref<f32x?x?>, %C: memref<f32x?x?>) {
  gemm.n.n 1.0, %A, %B, 1.0, %C : f32, memref<f32x?x?>, memref<f32x?x?>, f32, memref<f32x?x?>
}"""
    compilation = nanotc.compile(text, target=ZEN4)
    counted = re.findall(r"tile (\d+) x (\d+) valid", compilation.tiled())
    # the blocked path's (on 64-row panels) and the direct path's
    assert counted == [(str(16 * SINGLE_COLUMN_VECTORS), str(COUNTED_COLUMNS))] * 2
    fmas = SINGLE_COLUMN_VECTORS * COUNTED_COLUMNS
    loops = [
        loop
        for loop in asm.hot_loops(compilation.assembly(), "k")
        if loop.count("vfmadd") == fmas and loop.count("vbroadcastss") == COUNTED_COLUMNS
    ]
    assert loops
    for loop in loops:
        assert loop.registers("zmm") and not loop.registers("ymm")
        assert loop.stack_accesses() == []


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_run_time_rows_in_half_tiles_match_numpy(ty: str, target: str, rng) -> None:
    """M around a half tile past whole tiles (and below one tile), on the direct path and on
    the blocked one (M x 300 x 1000 overflows half of L2)."""
    case = Case("gemm", ("n", "n"), (ty,) * 3, ty, ("dynamic",) * 3)
    lanes = 16 if target == "host" else 8
    rows = [1, lanes, 2 * lanes + 1, 3 * lanes, 4 * lanes + 3, 5 * lanes + 1]
    run_case(case, target, rng, [(m, 29, 17) for m in rows] + [(100, 300, 1000)])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("trans", TRANSPOSES, ids="".join)
def test_gathered_a_and_scattered_c(trans: tuple[str, str], target: str, rng) -> None:
    """Rows of op(A) not adjacent in memory (a transposed A, or every other row) of static
    size are packed column-major first; a C with a non-unit row stride takes the scatter
    epilogue (static sizes)."""
    for layouts in [
        ("sstrided", "packed", "sstrided"),
        ("packed", "sstrided", "ld"),
        ("subview", "ld", "sstrided"),
    ]:
        mnk = tuple(int(x) for x in rng.choice(SHAPES, 3))
        case = Case("gemm", trans, ("f32",) * 3, "f32", layouts, static_shape=mnk)
        run_case(case, target, rng, [mnk])


def test_gathered_and_scattered_with_dynamic_strides(rng) -> None:
    """The same with every size and stride dynamic (row-major, reversed and gapped views),
    one kernel for several sizes: A's rows, not adjacent, are packed (`gathers_a`)."""
    case = Case("gemm", ("t", "n"), ("f64",) * 3, "f64", ("strided", "rowmajor", "reversed"))
    run_case(case, "host", rng, [(1, 1, 1), (23, 17, 9), (8, 3, 70)])


def test_lane_pointers_are_one_vector_getelementptr() -> None:
    """A scatter's (or gather's) pointers are one getelementptr of a vector of lane offsets:
    a pointer inserted per lane had made a gemm into a `strided<?,?>` C compile in 0.56 s
    (0.26 s so). The pointers still reach vscatter."""
    s, d = "memref<f32x?x?,strided<?,?>>", "memref<f32x?x?>"
    text = f"""func @k(%A: {d}, %B: {d}, %C: {s}) {{
  gemm.n.n 1.0, %A, %B, 0.5, %C : f32, {d}, {d}, f32, {s}
}}"""
    compilation = compiled(text, "avx512")
    assert re.search(r"getelementptr float, ptr %\S+, <16 x i64>", compilation.llvm_ir)
    assert "insertelement <16 x ptr>" not in compilation.llvm_ir
    assert "vscatter" in compilation.assembly()


def test_vectors_of_zeros_and_undefined_lanes_print_as_one_word() -> None:
    """`zeroinitializer` and `undef`, not a lane each: such vectors were a tenth and then a
    third of a dynamic gemm's LLVM IR text (formatted by llvmlite, parsed by LLVM)."""
    d = "memref<f32x?x?>"
    text = f"""func @k(%A: {d}, %B: {d}, %C: {d}) {{
  gemm.n.t 1.0, %A, %B, 0.5, %C : f32, {d}, {d}, f32, {d}
}}"""
    llvm_ir = compiled(text, "avx512").llvm_ir
    assert "<16 x float> zeroinitializer" in llvm_ir and "<16 x float> undef" in llvm_ir
    assert not re.search(r"float (0x0|0\.0|undef), float", llvm_ir)


ALPHA_BETA = {
    "a1b0": (1.0, 0.0),
    "a1b1": (1.0, 1.0),
    "aXb0": (-2.0, 0.0),
    "aXbX": (0.5, -1.0),
    "runtime": (None, None),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("form", list(ALPHA_BETA))
def test_alpha_beta_forms(form: str, target: str, rng) -> None:
    """Each epilogue: store only (beta 0, C NaN-filled), add, fma with beta, and the run-time
    test of beta against 0; alpha 1 skips the scaling."""
    alpha, beta = ALPHA_BETA[form]
    for mnk in [(37, 23, 19), (8, 8, 8)]:
        case = Case(
            "gemm",
            ("n", "t"),
            ("f64",) * 3,
            "f64",
            ("packed",) * 3,
            alpha=alpha,
            beta=beta,
            static_shape=mnk,
        )
        run_case(case, target, rng, [mnk])


MIXED = [("f16", "f16", "f32"), ("f32", "f32", "f64"), ("f64", "f32", "f32"), ("f16", "f64", "f64")]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("types", MIXED, ids="-".join)
def test_mixed_precision_inputs(types: tuple[str, str, str], target: str, rng) -> None:
    """Inputs of another float type are converted to C's type before the FMAs."""
    for mnk in [(29, 11, 47), (16, 3, 1)]:
        case = Case("gemm", ("t", "n"), types, types[2], ("packed",) * 3, static_shape=mnk)
        assert is_lowered_to_tiles(case.text(), target)
        run_case(case, target, rng, [mnk])


# (target, types, (m, n, k), transposes, layouts, alpha, beta) of tiles that are all of C,
# one vector tall, with K unrolled and more than eight columns: whole and masked rows, a
# shorter last column group, A packed from `.t`, a leading dimension, a run-time alpha, f16
# inputs, on 512-bit and 256-bit FMA units (the rule is AVX-512's: the Zen 4 host's cases
# compile for ZEN4 on every host)
RESIDENT_A = [
    (ZEN4, ("f32",) * 3, (16, 16, 16), "nn", "packed", 1.0, 1.0),
    (ZEN4, ("f32",) * 3, (5, 17, 7), "nt", "packed", 2.5, 0.0),
    (ZEN4, ("f32",) * 3, (16, 9, 16), "tn", "ld", None, 1.0),
    (ZEN4, ("f32",) * 3, (12, 30, 1), "tt", "packed", 1.0, 1.0),
    (ZEN4, ("f32",) * 3, (12, 20, 3), "tt", "packed", -0.5, 1.5),
    (ZEN4, ("f64",) * 3, (8, 16, 16), "nn", "ld", 1.0, 1.0),
    (ZEN4, ("f64",) * 3, (3, 12, 5), "tn", "packed", None, 0.0),
    (ZEN4, ("f16", "f16", "f32"), (16, 16, 16), "nt", "packed", 1.0, 1.0),
    ("avx512", ("f64",) * 3, (5, 24, 9), "nn", "packed", -0.5, 1.5),
    (SPLIT_FMA, ("f32",) * 3, (7, 12, 5), "nt", "ld", 1.0, 1.0),
]
RESIDENT_A_RUNS = [
    *(pytest.param(*case, marks=needs_host(case[0])) for case in RESIDENT_A),
    *(("avx2", *case[1:]) for case in RESIDENT_A if case[0] is ZEN4),
]
"""The cases' results on their targets where the host runs them, and the Zen 4 host's cases
(which ran on the host) also on avx2, which runs everywhere (its tiles load A per K step)."""


def resident_a_case(types: tuple[str, str, str], mnk: tuple[int, int, int], trans: str,
                    layout: str, alpha: float | None, beta: float | None) -> Case:  # fmt: skip
    return Case("gemm", tuple(trans), types, types[2], (layout,) * 3, alpha=alpha, beta=beta,
                static_shape=mnk)  # fmt: skip


@pytest.mark.parametrize(
    ("target", "types", "mnk", "trans", "layout", "alpha", "beta"), RESIDENT_A, ids=param_id
)
def test_one_vector_tiles_keep_a_resident(target: str | Target, types: tuple[str, str, str],
                                          mnk: tuple[int, int, int], trans: str, layout: str,
                                          alpha: float | None,
                                          beta: float | None) -> None:  # fmt: skip
    """A's vectors loaded once, the columns eight at a time (compiled on any host;
    `test_one_vector_tiles_results` runs the kernels)."""
    case = resident_a_case(types, mnk, trans, layout, alpha, beta)
    plans = compiled(case.text(), target).nanokernels()
    assert "(A resident)" in plans and "for each group of 8 columns" in plans, plans


@pytest.mark.parametrize(
    ("target", "types", "mnk", "trans", "layout", "alpha", "beta"), RESIDENT_A_RUNS,
    ids=param_id,
)  # fmt: skip
def test_one_vector_tiles_results(target: str | Target, types: tuple[str, str, str],
                                  mnk: tuple[int, int, int], trans: str, layout: str,
                                  alpha: float | None, beta: float | None,
                                  rng) -> None:  # fmt: skip
    """The same results as numpy and the reference evaluator, for every epilogue form."""
    case = resident_a_case(types, mnk, trans, layout, alpha, beta)
    run_case(case, target, rng, [mnk])


@pytest.mark.parametrize(
    ("target", "types", "mnk", "beta"),
    [
        (ZEN4, ("f32",) * 3, (32, 16, 8), 1.0),  # two vectors tall
        (ZEN4, ("f32",) * 3, (16, 8, 16), 1.0),  # one group of columns
        (ZEN4, ("f32",) * 3, (16, 16, 17), 1.0),  # a K loop
        (ZEN4, ("f32",) * 3, (16, 16, 16), None),  # each group would test beta
        ("avx2", ("f32",) * 3, (8, 12, 3), 1.0),  # no broadcast operands: a register each
        (ZEN4, ("bf16", "bf16", "f32"), (16, 16, 16), 1.0),  # dot products on pairs
    ],
    ids=param_id,
)
def test_other_tiles_load_a_per_k_step(target: str | Target, types: tuple[str, str, str],
                                       mnk: tuple[int, int, int], beta: float | None) -> None:  # fmt: skip
    """Tiles the rule leaves out on the Zen 4 host (an AVX-512 rule: on avx2 hosts no tile
    would keep A resident, whatever its shape)."""
    case = Case("gemm", ("n", "n"), types, types[2], ("packed",) * 3, alpha=1.0, beta=beta,
                static_shape=mnk)  # fmt: skip
    assert "(A resident)" not in compiled(case.text(), target).nanokernels()


B_PER_VECTOR_CASES = [
    ("f32", "f32", (20, 9, 20), "n", 1.0, 1.0),  # a zmm and an xmm; accumulators from C
    ("f32", "f32", (19, 7, 24), "t", -2.0, 0.5),  # B transposed; three rows of an xmm masked
    ("f64", "f64", (12, 16, 16), "n", 0.5, 0.0),  # beta 0: C never read
    ("f64", "f64", (11, 5, 20), "n", 1.0, 1.0),  # three rows of a ymm masked
    ("f32", "bf16", (20, 9, 20), "n", 1.0, 1.0),  # dot products, narrow last vector
    ("f32", "bf16", (32, 6, 15), "n", 2.0, -1.0),  # odd K: its last pair broadcast once
    ("f32", "bf16", (30, 5, 8), "n", 1.0, 1.0),  # the second vector masked
    ("f32", "bf16", (30, 5, 8), "t", 1.0, 1.0),  # B's pairs not adjacent: broadcast once
    ("f32", "f32", (32, 7, 13), "n", 1.0, 1.0),  # two whole f32 vectors: broadcast once
]


@pytest.mark.parametrize(("ty", "inputs", "shape", "tb", "alpha", "beta"), B_PER_VECTOR_CASES,
                         ids=str)  # fmt: skip
@pytest.mark.parametrize("target", runnable(ZEN4))
def test_two_vector_tiles_reading_b_per_vector(ty: str, inputs: str, shape: tuple[int, int, int],
                                               tb: str, alpha: float, beta: float,
                                               target: str | Target, rng) -> None:  # fmt: skip
    """Tiles of two vectors whose every multiply-add reads B's broadcast from memory
    (`b_per_vector`: dot tiles, and FMA tiles whose last vector computes narrow), each
    vector from its own copy of B's base, give C = alpha op(A) op(B) + beta C to roundoff:
    masked and narrowed last vectors, B transposed, an odd K; and the tiles beside them
    that broadcast once."""
    m, n, k = shape
    a_t, c_t = f"memref<{inputs}x{m}x{k}>", f"memref<{ty}x{m}x{n}>"
    b_t = f"memref<{inputs}x{n}x{k}>" if tb == "t" else f"memref<{inputs}x{k}x{n}>"
    text = f"""func @k(%A: {a_t}, %B: {b_t}, %C: {c_t}) {{
  gemm.n.{tb} {alpha!r}, %A, %B, {beta!r}, %C : {ty}, {a_t}, {b_t}, {ty}, {c_t}
}}"""
    compilation = compiled(text, target)
    shared = (inputs == "bf16" and tb == "t") or shape == (32, 7, 13)
    assert ("{1toN}" in compilation.nanokernels()) != shared
    dtype = DTYPES[inputs]
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k))).astype(dtype)
    b = np.asfortranarray(rng.uniform(-1, 1, (n, k) if tb == "t" else (k, n))).astype(dtype)
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n))).astype(DTYPES[ty])
    x, y = a.astype(np.float64), b.astype(np.float64)
    y = y.T if tb == "t" else y
    want = alpha * (x @ y) + beta * c
    bound = abs(alpha) * (np.abs(x) @ np.abs(y)) + abs(beta) * np.abs(c)
    compilation["k"](a, b, c, group_size=1)
    eps = float(np.finfo(DTYPES[ty]).eps)
    assert np.all(np.abs(c - want) <= 4 * eps * (np.sqrt(k) + 4) * bound + 1e-30)


def test_empty_extents(target: str = "host") -> None:
    """M, N or K of 0: nothing to do, or C := beta * C (alpha * 0 with beta 0: zeros, the NaN
    in C never read)."""
    text = Case("gemm", ("n", "n"), ("f32",) * 3, "f32", ("dynamic",) * 3).text()
    for m, n, k in [(0, 5, 3), (4, 0, 3), (5, 6, 0), (0, 0, 0)]:
        for beta in (0.0, 2.0):
            a = np.ones((m, k), np.float32, order="F")
            b = np.ones((k, n), np.float32, order="F")
            c = np.full((m, n), 3.0, np.float32, order="F")
            if beta == 0:
                fill_garbage(c)
            check(text, [a, b, c, np.float32(1.5), np.float32(beta)], target=target)
            assert (c == (0.0 if beta == 0 else 6.0)).all()


STATICALLY_EMPTY = {
    # a transposed (or strided) f32 A is packed in panels of M rows: M = 0 divided by zero
    "f32 .t": ("t", "f32", "memref<f32x4x0>", "memref<f32x4x3>", "memref<f32x0x3>"),
    "f64 strided": ("n", "f64", "memref<f64x0x1,strided<2,1>>", "memref<f64x1x3>",
                    "memref<f64x0x3>"),
    # AMX packs bf16 A in tiles of M rows
    "bf16": ("n", "f32", "memref<bf16x0x2>", "memref<bf16x2x2>", "memref<f32x0x2>"),
    "bf16 N = 0": ("n", "f32", "memref<bf16x32x32>", "memref<bf16x32x0>", "memref<f32x32x0>"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(STATICALLY_EMPTY))
@pytest.mark.parametrize("target", [*TARGETS, "amx"])
def test_a_statically_empty_c_compiles_to_nothing(case: str, target: str) -> None:
    """A static C of no rows or no columns: no work, and no path's panel or tile sizes (which
    divide by M) are asked for. The AMX target compiles here without running."""
    trans_a, compute, a, b, c = STATICALLY_EMPTY[case]
    text = f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
    gemm.{trans_a}.n 1.0, %A, %B, 0.0, %C : {compute}, {a}, {b}, {compute}, {c}
}}"""
    compilation = nanotc.compile(text, target=target, cache=False)
    assert compilation.object_code()
    if target != "amx":
        params = compilation.program.function("k").arguments
        arrays = [np.zeros(p.type.shape, numpy_dtype(p.type.element), order="F") for p in params]
        compilation["k"](*arrays, group_size=2)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("beta", [0.0, 1.0, 2.0, None], ids=["b0", "b1", "bX", "runtime"])
def test_atomic_gemm_single_thread(beta: float | None, target: str, rng) -> None:
    """.atomic with a literal beta (the atomic epilogue of the nanokernel) and a run-time beta
    (the plain loop nest) compute the same as without it when one group runs."""
    for mnk in [(19, 13, 7), (1, 1, 1)]:
        case = Case(
            "gemm",
            ("n", "n"),
            ("f32",) * 3,
            "f32",
            ("packed",) * 3,
            atomic=True,
            alpha=1.5,
            beta=beta,
            static_shape=mnk,
        )
        run_case(case, target, rng, [mnk])


# -- batch-reduce ---------------------------------------------------------------------------

BATCH_TEXT = """func @k(%alpha: f32, %a: group<memref<f32x{m}x{k}>>, %b: memref<f32x{k}x{n}x?>,
                   %c: memref<f32x{m}x{n}x?>, %start: index, %stop: index) {{
    %g = group_id
    %cg = subview %c[:, :, %g] : memref<f32x{m}x{n}x?>
    for %j = %start, %stop {{
        %aj = load %a[%j] : group<memref<f32x{m}x{k}>>
        %bj = subview %b[:, :, %j] : memref<f32x{k}x{n}x?>
        gemm.{ta}.n %alpha, %aj, %bj, 1.0, %cg
            : f32, memref<f32x{m}x{k}>, memref<f32x{k}x{n}>, f32, memref<f32x{m}x{n}>
    }}
}}"""


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mnk", [(16, 8, 4), (13, 7, 5), (70, 3, 17)], ids=str)
def test_batch_reduce_loop(mnk: tuple[int, int, int], target: str, rng) -> None:
    """A loop of beta-1 gemms into one C (loads from a group and subviews in the body) is a
    tile.batch_gemm; C := C + alpha * sum_j A_j B_j for trip counts 0, 1 and many."""
    m, n, k = mnk
    text = BATCH_TEXT.format(m=m, n=n, k=k, ta="n")
    assert "tile.batch_gemm" in print_program(compiled(text, target).lowered)
    batches, groups = 6, 3
    for start, stop in [(0, 6), (2, 3), (4, 4), (5, 1)]:
        a = random_array(rng, (m, k, batches), "f32")
        b = random_array(rng, (k, n, batches), "f32")
        c = random_array(rng, (m, n, groups), "f32")
        c0 = c.copy()
        check(
            text,
            [np.float32(0.5), a, b, c, start, stop],
            group_size=groups,
            target=target,
            depth=k * batches,
        )
        want = c0.astype(np.float64)
        for j in range(start, stop):
            want += 0.5 * (a[..., j].astype(np.float64) @ b[..., j])[..., None]
        assert_match(c, want.astype(np.float32), k * batches)


DYNAMIC_BATCH_TEXT = """func @k(%a: memref<{t}x?x{k}x?>, %b: memref<{t}x{k}x{n}x?>, %c: memref<{t}x?x{n}>) {{
    %batch = size %a[2] : memref<{t}x?x{k}x?>
    for %j = 0, %batch {{
        %aj = subview %a[:, :, %j] : memref<{t}x?x{k}x?>
        %bj = subview %b[:, :, %j] : memref<{t}x{k}x{n}x?>
        gemm.n.n 1.0, %aj, %bj, 1.0, %c : {t}, memref<{t}x?x{k}>, memref<{t}x{k}x{n}>, {t}, memref<{t}x?x{n}>
    }}
}}"""


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_batch_reduce_loop_over_run_time_rows(ty: str, target: str, rng) -> None:
    """A batch-reduce loop whose A and C have a run-time number of rows: every row tile's
    A loads are masked (on AVX2 by sign masks) and the sums match for M around the tiles."""
    n, k, batches = 7, 5, 3
    text = DYNAMIC_BATCH_TEXT.format(t=ty, n=n, k=k)
    assert "tile.batch_gemm" in print_program(compiled(text, target).lowered)
    for m in (1, 5, 8, 13, 19, 37):
        a = random_array(rng, (m, k, batches), ty)
        b = random_array(rng, (k, n, batches), ty)
        c = random_array(rng, (m, n), ty)
        want = c.astype(np.float64) + np.einsum("mkj,knj->mn", a, b)
        check(text, [a, b, c], target=target, depth=k * batches)
        assert_match(c, want.astype(c.dtype), k * batches)


EMPTY_BATCH_TEXT = """func @k(%a: memref<f32x8x?>, %b: memref<f32x8x?>, %c: memref<f32x8x8>,
                          %alpha: f32, %step: index) {{
    %n = size %a[1] : memref<f32x8x?>
    for %j = 0, %n, %step {{
        %x = subview %a[:, {column}] : memref<f32x8x?>
        %y = subview %b[:, {column}] : memref<f32x8x?>
        {update} %alpha, %x, %y, 1.0, %c : f32, {view}, {view}, f32, memref<f32x8x8>
    }}
}}"""
EMPTY_BATCH_UPDATES = {  # a rank-1 update as gemm (views of one column) and as ger (vectors)
    "gemm": EMPTY_BATCH_TEXT.format(column="%j:1", update="gemm.n.t", view="memref<f32x8x1>"),
    "ger": EMPTY_BATCH_TEXT.format(column="%j", update="ger", view="memref<f32x8>"),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("update", sorted(EMPTY_BATCH_UPDATES))
def test_batch_reduce_loop_that_runs_no_iteration_leaves_c_alone(update: str, target: str) -> None:
    """C := C + alpha * (an empty sum) is not what a loop without iterations does: with
    alpha = inf or NaN it would write NaN, and -0.0 would come back +0.0. Empty batches
    (step 1, and a run-time step) and steps of 0 and -1 leave every bit of C as it was."""
    text = EMPTY_BATCH_UPDATES[update]
    assert "tile.batch_gemm" in print_program(compiled(text, target).lowered)
    kernel = nanotc.compile(text, target=target)["k"]
    for alpha in (np.inf, np.nan):
        for members, step in [(0, 1), (0, 2), (3, 0), (3, -1)]:
            a = np.ones((8, members), np.float32, order="F")
            c = np.full((8, 8), 2.0, np.float32, order="F")
            c[0, 0] = -0.0
            kernel(a, a.copy(order="F"), c, np.float32(alpha), step, group_size=1)
            assert np.signbit(c[0, 0]) and np.all(c.ravel()[1:] == 2.0), (alpha, members, step)


@pytest.mark.parametrize("target", TARGETS)
def test_batch_reduce_applies_alpha_once_after_the_sum(target: str) -> None:
    """As language.md states: C + alpha * (4 - 4) with alpha = 1e38 keeps C, where updates
    iteration by iteration would overflow to inf - inf = NaN."""
    kernel = nanotc.compile(EMPTY_BATCH_UPDATES["ger"], target=target)["k"]
    a = np.full((8, 2), 2.0, np.float32, order="F")
    b = np.asfortranarray(a * np.float32([1, -1]))
    c = np.ones((8, 8), np.float32, order="F")
    kernel(a, b, c, np.float32(1e38), 1, group_size=1)
    np.testing.assert_array_equal(c, 1.0)


@pytest.mark.parametrize("target", TARGETS)
def test_batch_reduce_into_a_16_bit_c_runs_iteration_by_iteration(target: str) -> None:
    """As language.md states: a bf16 C is updated (and rounded) at each iteration, so the
    first product, 4e38, overflows it, which the f32 and f64 C above never see."""
    c_t, a_t, member = "memref<bf16x?x?>", "memref<bf16x?x?x?>", "memref<bf16x?x?>"
    text = f"""func @k(%alpha: bf16, %A: {a_t}, %B: {a_t}, %C: {c_t}, %steps: index) {{
  for %i = 0, %steps {{
    %a = subview %A[:, :, %i] : {a_t}
    %b = subview %B[:, :, %i] : {a_t}
    gemm.n.n %alpha, %a, %b, 1.0, %C : bf16, {member}, {member}, bf16, {c_t}
  }}
}}"""
    bf16 = numpy_dtype(ScalarType.BF16)
    a = np.full((1, 1, 2), 2, bf16, order="F")
    b = np.asfortranarray(a * np.array([1, -1], bf16))  # products 4 and -4
    c = np.full((1, 1), 0.5, bf16, order="F")
    alpha = np.array(1e38, bf16)[()]
    nanotc.compile(text, target=target)["k"](alpha, a, b, c, np.intp(2), group_size=1)
    assert not np.isfinite(c.astype(np.float32)).any()


@pytest.mark.parametrize("target", TARGETS)
def test_loops_that_are_not_batch_reduce(target: str, rng) -> None:
    """A loop whose gemm has beta != 1, or whose body also stores, keeps per-iteration
    semantics (C is read again each iteration)."""
    text = """func @k(%a: memref<f64x9x4>, %b: memref<f64x4x5>, %c: memref<f64x9x5>,
                      %log: memref<f64x3>) {
        for %j = 0, 3 {
            gemm.n.n 1.0, %a, %b, 0.5, %c
                : f64, memref<f64x9x4>, memref<f64x4x5>, f64, memref<f64x9x5>
        }
        for %j = 0, 3 {
            gemm.n.n 1.0, %a, %b, 1.0, %c
                : f64, memref<f64x9x4>, memref<f64x4x5>, f64, memref<f64x9x5>
            %x = load %c[0, 0] : memref<f64x9x5>
            store %x, %log[%j] : memref<f64x3>
        }
    }"""
    a, b = random_array(rng, (9, 4), "f64"), random_array(rng, (4, 5), "f64")
    c, log = random_array(rng, (9, 5), "f64"), np.zeros(3)
    c0 = c.copy()
    check(text, [a, b, c, log], target=target, depth=16)
    want = c0
    for _ in range(3):
        want = a @ b + 0.5 * want
    logs = []
    for _ in range(3):
        want = a @ b + want
        logs.append(want[0, 0])
    np.testing.assert_allclose(c, want, rtol=1e-12)
    np.testing.assert_allclose(log, logs, rtol=1e-12)


@pytest.mark.parametrize("view", ["subview %c[:, :]", "fuse %c[0,1]"])
def test_a_loop_that_reads_c_through_another_view_is_no_batch_reduce(view: str) -> None:
    """Each iteration picks B's columns by a value it loads from C, through a view of C taken
    before the loop: it must see the previous iteration's update, so C cannot stay in
    registers across the loop."""
    shape = "memref<f64x2x2>" if "subview" in view else "memref<f64x4>"
    index = "[0, 0]" if "subview" in view else "[0]"
    text = f"""func @k(%c: memref<f64x2x2>, %a: memref<f64x2x2>, %b: memref<f64x2x4>) {{
        %cv = {view} : memref<f64x2x2>
        for %k = 0, 2 {{
            %v = load %cv{index} : {shape}
            %i = cast %v : f64 -> index
            %j = arith.rem %i, 2 : index
            %o = arith.mul %j, 2 : index
            %bk = subview %b[:, %o:2] : memref<f64x2x4>
            gemm.n.n 1.0, %a, %bk, 1.0, %c
                : f64, memref<f64x2x2>, memref<f64x2x2>, f64, memref<f64x2x2>
        }}
    }}"""
    assert "tile.batch_gemm" not in print_program(compiled(text, "host").lowered)
    c = np.zeros((2, 2), order="F")
    b = np.asfortranarray([[1.0, 1, 2, 2], [1, 1, 2, 2]])
    check(text, [c, np.asfortranarray(np.eye(2)), b], target="host", depth=4)
    np.testing.assert_array_equal(c, 3.0)  # 0 picks the ones (C = 1), then 1 the twos


# -- what the nanokernels are made of -----------------------------------------------------------


REGISTERS = {512: "zmm", 256: "ymm", 128: "xmm"}
"""The widest vector registers of a target, by its vector width."""


@pytest.mark.parametrize("target", ["host", "avx512", "avx2", "generic"])
def test_assembly_uses_the_targets_vectors(target: str) -> None:
    """The host's (whatever its vectors), avx512's and avx2's kernels multiply-add with FMA
    on their widest registers; the generic target has no FMA and uses SSE multiply and add."""
    register = REGISTERS[get(target).vector_bits]
    text = Case(
        "gemm",
        ("n", "n"),
        ("f32",) * 3,
        "f32",
        ("packed",) * 3,
        alpha=1.0,
        beta=1.0,
        static_shape=(64, 16, 64),
    ).text()
    asm = compiled(text, target).assembly()
    if not get(target).fma:
        assert "vfmadd" not in asm and "mulps" in asm and "addps" in asm
    else:
        assert any(
            f"vfmadd231ps\t%{register}" in line or (f"%{register}" in line and "vfmadd" in line)
            for line in asm.splitlines()
        )


BATCH_STEP_SCRIPT = """
import numpy as np, nanotc
text = '''func @k(%a: memref<f32x8x4>, %b: memref<f32x4x8>, %c: memref<f32x8x8>, %step: index) {
    for %j = 0, 3, %step {
        gemm.n.n 1.0, %a, %b, 1.0, %c
            : f32, memref<f32x8x4>, memref<f32x4x8>, f32, memref<f32x8x8>
    }
}'''
kernel = nanotc.compile(text)["k"]
a, b = np.ones((8, 4), np.float32, order="F"), np.ones((4, 8), np.float32, order="F")
for step, want in [(2, 8.0), (0, 0.0), (-1, 0.0)]:
    c = np.zeros((8, 8), np.float32, order="F")
    kernel(a, b, c, step, group_size=1)
    assert c[0, 0] == want, (step, c[0, 0])
print("ok")
"""


def test_batch_reduce_loop_with_non_positive_runtime_step_runs_no_iteration() -> None:
    """`for %j = 0, 3, %step` around a beta-1 gemm is lowered to tile.batch_gemm, whose batch
    loop (carried_loop in codegen/llvm/nanokernel.py) lacks the `for` semantics of a run-time
    step <= 0 (no iteration, as control.py and the reference do): it spins forever. Run in a
    child process with a time limit."""
    import subprocess
    import sys

    try:
        result = subprocess.run(
            [sys.executable, "-c", BATCH_STEP_SCRIPT], capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the batch-reduce loop with step 0 did not terminate")
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("target", TARGETS)
def test_loops_like_batch_reduce_with_varying_alpha_or_c(target: str, rng) -> None:
    """A beta-1 gemm loop whose alpha is computed from the loop variable, or whose C is a
    different subview each iteration, is no batch reduction: every iteration counts."""
    text = """func @k(%a: memref<f64x9x4x?>, %b: memref<f64x4x5>, %c: memref<f64x9x5>,
                      %d: memref<f64x9x5x?>) {
        %n = size %a[2] : memref<f64x9x4x?>
        for %j = 0, %n {
            %aj = subview %a[:, :, %j] : memref<f64x9x4x?>
            %s = cast %j : index -> f64
            %alpha = arith.add %s, 0.5 : f64
            gemm.n.n %alpha, %aj, %b, 1.0, %c
                : f64, memref<f64x9x4>, memref<f64x4x5>, f64, memref<f64x9x5>
        }
        for %j = 0, %n {
            %aj = subview %a[:, :, %j] : memref<f64x9x4x?>
            %dj = subview %d[:, :, %j] : memref<f64x9x5x?>
            gemm.n.n 2.0, %aj, %b, 1.0, %dj
                : f64, memref<f64x9x4>, memref<f64x4x5>, f64, memref<f64x9x5>
        }
    }"""
    a, b = random_array(rng, (9, 4, 3), "f64"), random_array(rng, (4, 5), "f64")
    c, d = random_array(rng, (9, 5), "f64"), random_array(rng, (9, 5, 3), "f64")
    c0, d0 = c.copy(), d.copy()
    check(text, [a, b, c, d], target=target, depth=16)
    want_c = c0 + sum((j + 0.5) * (a[..., j] @ b) for j in range(3))
    np.testing.assert_allclose(c, want_c, rtol=1e-12, atol=1e-12)
    for j in range(3):
        np.testing.assert_allclose(d[..., j], d0[..., j] + 2 * (a[..., j] @ b), rtol=1e-12)


def test_tile_model_counts_rereading_a_from_l2() -> None:
    """An A beyond L1 is read again from L2 for every column of tiles: the model then avoids
    tiles with many vectors of A per FMA (80 x 5 measured 10-15% slower than 32 x 14 on
    784x512x128); an A in L1 keeps the plain FMA/load model."""
    avx512, f32 = get("avx512"), ScalarType.F32
    from_l2 = choose(avx512, f32, 784, 512, 128)
    assert from_l2.mv <= 2 and from_l2.nr >= 13
    in_l1 = choose(avx512, f32, 80, 100, 64)  # A: 20 KiB
    assert (in_l1.mv, in_l1.nr) == (5, 5)  # all 80 rows in one tile
    # a tile as tall as C streams A's whole columns from L2 faster: chosen for 64x64x256,
    # whose operands stay in L2, not where B streams through it
    assert choose(avx512, f32, 64, 64, 256).mr == 64
    assert choose(avx512, f32, 64, 4096, 256).mr < 64


def test_tile_model_charges_tall_tiles_what_the_target_measured_of_l2() -> None:
    """Without the tall stream's speedup (`Target.tall_stream_speedup` 1, measured on the AMX
    Xeon LLVM names `rocketlake`) tall tiles pay L2 like any other: f32 64x64x256 and
    64x128x256 take two vectors by 13-14 columns instead of 4 x 6 and 4 x 4; an A in L1
    (64x64x64) keeps its tall tile either way."""
    avx512, f32 = get("avx512"), ScalarType.F32
    plain = replace(avx512, tall_stream_speedup=1.0)
    assert (choose(avx512, f32, 64, 128, 256).mv, choose(avx512, f32, 64, 64, 256).mv) == (4, 4)
    for n in (64, 128):
        tile = choose(plain, f32, 64, n, 256)
        assert tile.mv == 2 and tile.nr >= 13, (n, tile)
    assert choose(plain, f32, 64, 64, 64) == choose(avx512, f32, 64, 64, 64)


def test_tiles_without_the_tall_speedup_compute_and_spill_nothing(rng) -> None:
    plain = replace(get("avx512"), tall_stream_speedup=1.0)
    types = "memref<f32x64x256>, memref<f32x256x64>, f32, memref<f32x64x64>"
    text = f"""func @k(%A: memref<f32x64x256>, %B: memref<f32x256x64>, %C: memref<f32x64x64>) {{
    gemm.n.n 1.0, %A, %B, 1.0, %C : f32, {types}
}}"""
    compilation = nanotc.compile(text, target=plain)
    assert "tile 32 x 14" in compilation.tiled()
    loops = asm.hot_loops(compilation.assembly(), "k", "vfmadd")
    assert loops and all(not loop.stack_accesses() for loop in loops)
    if not runs_here(plain):
        return
    a, b, c = (np.asfortranarray(rng.uniform(-1, 1, s), np.float32)
               for s in ((64, 256), (256, 64), (64, 64)))  # fmt: skip
    want = c + a.astype(np.float64) @ b.astype(np.float64)
    compilation["k"](a, b, c, group_size=1)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


def test_tile_model_prefers_tiles_as_tall_as_c_among_equals() -> None:
    """Equal estimates: a tile covering all of M reads A's columns whole and in order (the
    memory-bound batches stream faster), unless it is narrower than 4 columns where a tall
    tile of 4 fits the registers or the target starts two FMAs a cycle, or narrower than 3
    where neither holds (Zen 4)."""
    avx512 = get("avx512")
    tall = choose(avx512, ScalarType.F32, 64, 64, 64)
    assert tall.mr >= 64 and tall.nr >= 4
    assert choose(avx512, ScalarType.F64, 32, 32, 32).mr >= 32
    wide_kept = choose(avx512, ScalarType.F32, 56, 9, 9)  # 64 x 3 would be as tall
    assert wide_kept.mr >= 56 and wide_kept.nr >= 4
    three = choose(ZEN4, ScalarType.F64, 56, 9, 9)  # no tall tile of 4 f64 columns fits
    assert (three.mr, three.nr) == (56, 3)
    two_fmas = choose(avx512, ScalarType.F64, 56, 9, 9)  # 40 x 5: 56 x 3 ran 0.92x there
    assert two_fmas.mr < 56 and two_fmas.nr >= 5
    two_avoided = choose(avx512, ScalarType.F64, 64, 64, 64)  # 64 x 2 would be as tall
    assert two_avoided.nr >= 3


def test_tile_model_splits_small_gemms_into_equal_column_tiles() -> None:
    """Equal estimates on a small gemm (operands within a quarter of L1): column tiles of one
    width, with no narrow remainder kernel (f64 16^3: 16 x 8 twice, not 16 x 12 + 16 x 4)."""
    avx512, f32, f64 = get("avx512"), ScalarType.F32, ScalarType.F64
    assert small_gemm(avx512, f32, 32, 32, 32) and not small_gemm(avx512, f32, 64, 64, 64)
    assert not small_gemm(avx512, f32, 32, None, 32)
    for element, m in ((f64, 16), (f32, 32)):
        tile = choose(avx512, element, m, m, m)
        assert tile.mr >= m and m % tile.nr == 0 and tile.nr >= 4, (element, tile)
    assert choose(avx512, f32, 35, 9, 35).nr == 9  # one tile of all 9 columns
    # not a tile that just covers the FMA latency bound (2 ports x 4 cycles): AVX2's 16^3
    # takes 2 x 6 + 2 x 4, not 2 x 4 four times
    avx2 = get("avx2")
    for element in (f32, f64):
        tile = choose(avx2, element, 16, 16, 16)
        assert (tile.mv, tile.nr) == (2, 6), element
    # beyond a quarter of L1 the larger tile keeps the tie (W3 and W1 unchanged)
    assert choose(avx512, f32, 784, 64, 128).nr not in (4, 8, 16, 32)


def test_tile_model_holds_b_columns_of_tall_narrow_avx2_tiles() -> None:
    """Where FMAs take no broadcast from memory (AVX2), a tile with fewer columns than
    vectors holds its broadcasts of B and one vector of A: libxsmm's 4 x 3 f32 tile (12
    accumulators, 3 broadcasts, 1 vector) fits AVX2's 16 registers and is W2's f32 56x9x9
    choice. On AVX-512 the broadcasts come from memory inside the FMAs: A's vectors stay."""
    avx2, avx512, f32 = get("avx2"), get("avx512"), ScalarType.F32
    assert holds_b_columns(avx2, 4, 3) and not holds_b_columns(avx2, 3, 3)
    assert not holds_b_columns(avx512, 4, 3)
    assert fits(RegisterTile(4, 3, 8), avx2, m=56)
    assert not fits(RegisterTile(5, 3, 8), avx2, m=56)  # 15 + 3 + 1
    assert (choose(avx2, f32, 56, 9, 9).mv, choose(avx2, f32, 56, 9, 9).nr) == (4, 3)


# (types, transposes, static m x n x k or None for run-time sizes, tile, alpha and beta:
# literals, or None for launch arguments, which take two registers): whole vectors (the
# accumulators start as C's tile), a masked last vector and a narrower column tile, B read
# across its rows, run-time rows (AVX2's sign masks beside the held broadcasts), f64, f32
# inputs into an f64 C
HELD_B_COLUMNS = [
    (("f32",) * 3, ("n", "n"), (56, 9, 9), (4, 3), 1.0),
    (("f32",) * 3, ("n", "t"), (37, 5, 20), (4, 2), 1.0),
    (("f32",) * 3, ("n", "n"), (37, 5, 20), (3, 2), None),
    (("f32",) * 3, ("n", "n"), None, (3, 2), None),
    (("f64",) * 3, ("n", "t"), (30, 7, 17), (5, 2), None),
    (("f32", "f32", "f64"), ("n", "n"), (32, 4, 9), (4, 3), 0.0),
]


@pytest.mark.skipif(not runs_here("avx2"), reason="this host cannot run avx2 code")
@pytest.mark.parametrize(("types", "trans", "shape", "tile", "beta"), HELD_B_COLUMNS, ids=param_id)
def test_tiles_holding_b_columns(types: tuple[str, str, str], trans: tuple[str, str],
                                 shape: tuple[int, int, int] | None, tile: tuple[int, int],
                                 beta: float | None, rng) -> None:  # fmt: skip
    """AVX2 tiles holding B's broadcasts (`holds_b_columns`) list that order and compute
    alpha A B + beta C around the tile's edges (alpha 1 with a literal beta, else every
    alpha/beta form)."""
    avx2 = get("avx2")
    layouts = ("packed",) * 3 if shape else ("dynamic",) * 3
    alpha = None if beta is None else 1.0
    case = Case("gemm", trans, types, types[2], layouts, alpha, beta, static_shape=shape)
    text = case.text()
    sites = gemm_sites(nanotc.load(text).function("k"), avx2)
    options = CompileOptions.of({site.key: GemmChoice(tile) for site in sites})
    compilation = nanotc.compile(text, target=avx2, options=options, cache=False)
    listing = compilation.nanokernels()
    assert f"b{tile[1] - 1} = vbroadcast" in listing and f"a{tile[0] - 1} = v" in listing
    forms = [(1.0, beta)] if beta is not None else [(1.0, 0.0), (1.0, 1.0), (-0.75, 1.5)]
    for mnk in [shape] if shape else [(1, 1, 3), (13, 6, 5), (29, 11, 40)]:
        for alpha_value, beta_value in forms:
            args, views = case.arguments(mnk, alpha_value, beta_value, rng)
            before = [v.copy() for v in views]
            compilation["k"](*args, group_size=1, num_threads=1)
            want = expected(case, before, alpha_value, beta_value)
            assert_match(views[-1], np.asarray(want).astype(views[-1].dtype), 4 * mnk[2])
