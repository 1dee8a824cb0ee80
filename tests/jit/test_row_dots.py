"""The last few rows of C as dot products along K (`tile.row_dots`): when the direct path takes
them, its results against numpy for every remainder of 1 to 4 rows, f32 and f64, K with a
vector remainder, alpha and beta (beta 0 never using C, as a literal or at run time), on
every target; and its machine code.

Which rows the direct path leaves to dot products depends on the target's vector width and
its path on its caches: those choices are checked for explicit targets on every host (the Zen
4 host they were written for, `ZEN4`, and avx2), their results where the host runs the code
(`runnable`, `needs_host`)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from nanotc.codegen import asm
from nanotc.codegen.llvm.row_dots import INDEPENDENT_FMAS
from nanotc.ir.types import ScalarType
from nanotc.lowering.gemm_tiles import dot_columns
from nanotc.targets import Target, get

from .helpers import ZEN4, compiled, needs_host
from .test_gemm_blocked import DTYPES, check


def target_id(target: str | Target) -> str:
    return target.name if isinstance(target, Target) else target


def gemm_text(ty: str, m: int, n: int, k: int) -> str:
    """C = alpha A B + beta C with static shapes."""
    a, b, c = f"memref<{ty}x{m}x{k}>", f"memref<{ty}x{k}x{n}>", f"memref<{ty}x{m}x{n}>"
    return f"""func @k(%alpha: {ty}, %A: {a}, %B: {b}, %beta: {ty}, %C: {c}) {{
  gemm.n.n %alpha, %A, %B, %beta, %C : {ty}, {a}, {b}, {ty}, {c}
}}"""


def dot_rows(tiled: str) -> set[int]:
    return {int(r) for r in re.findall(r"tile\.row_dots\S* .* rows (\d+) cols", tiled)}


def run(ty: str, m: int, n: int, k: int, alpha: float, beta: float, rng,
        target: str | Target = "host") -> None:  # fmt: skip
    compilation = compiled(gemm_text(ty, m, n, k), target)
    dt = DTYPES[ty]
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k)).astype(dt))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n)).astype(dt))
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n)).astype(dt))
    if beta == 0:
        c[...] = np.nan
    want = alpha * (a.astype(np.float64) @ b.astype(np.float64))
    if beta != 0:
        want = want + beta * c
    compilation["k"](dt(alpha), a, b, dt(beta), c, group_size=1)
    check(c, want, ty, k)


REMAINDERS = [
    (target, ty, rows)
    for target in (ZEN4, "avx2")
    for ty in ("f32", "f64")
    for rows in range(1, 5)
    if rows < get(target).lanes(ScalarType(ty))
]
"""(target, type, rows left): 1 to 4 rows after whole vectors, on the Zen 4 host's 512-bit
vectors and on avx2's 256-bit ones, which run on every host (4 f64 fill one: 3 rows at most)."""


def remainder_shape(target: str | Target, ty: str, rows: int) -> tuple[int, int, int]:
    """Two vectors of rows and `rows` more; K 100: whole vectors of f32 and a remainder of 4."""
    return 2 * get(target).lanes(ScalarType(ty)) + rows, 37, 100


@pytest.mark.parametrize(("target", "ty", "rows"), REMAINDERS, ids=target_id)
def test_remainders_of_one_to_four_rows_are_dot_products(
    target: str | Target, ty: str, rows: int
) -> None:
    """The rows after the last whole vector go to `tile.row_dots` (compiled on any host;
    `test_remainders_of_one_to_four_rows` runs them)."""
    text = gemm_text(ty, *remainder_shape(target, ty, rows))
    assert dot_rows(compiled(text, target).tiled()) == {rows}


@pytest.mark.parametrize(
    ("target", "ty", "rows"),
    [pytest.param(*case, marks=needs_host(case[0])) for case in REMAINDERS],
    ids=target_id,
)
def test_remainders_of_one_to_four_rows(target: str | Target, ty: str, rows: int, rng) -> None:
    """The row dots' results for every epilogue form, beta 0 never reading C's NaNs."""
    m, n, k = remainder_shape(target, ty, rows)
    for alpha, beta in [(1.0, 0.0), (1.0, 1.0), (-1.5, 0.5)]:
        run(ty, m, n, k, alpha, beta, rng, target)


def test_a_run_time_beta_of_zero_does_not_use_c(rng) -> None:
    """beta is an argument here: 0 at run time must still leave C's NaNs out."""
    run("f32", 49, 30, 96, 1.0, 0.0, rng)


@pytest.mark.parametrize("target", ["avx2", "generic"])
def test_narrower_targets(target: str, rng) -> None:
    """Their vectors hold 8 and 4 f32: 35 rows leave 3 and 3."""
    compilation = compiled(gemm_text("f32", 35, 24, 70), target)
    assert dot_rows(compilation.tiled()) == {3}
    run("f32", 35, 24, 70, 1.0, 1.0, rng, target)


@pytest.mark.parametrize(
    ("shape", "why"),
    [
        ((40, 30, 100), "8 rows left: a masked tile costs no more than 8 rows of dots"),
        ((49, 30, 48), "K below 64: the sums across lanes would weigh"),
        ((48, 30, 100), "no rows left"),
    ],
)
def test_where_register_tiles_keep_the_rows(shape: tuple[int, int, int], why: str) -> None:
    """On the Zen 4 host's 16 f32 a vector (on 8, 40 rows would leave none)."""
    assert dot_rows(compiled(gemm_text("f32", *shape), ZEN4).tiled()) == set(), why


def test_transposed_b_keeps_register_tiles() -> None:
    """op(B)'s columns are B's rows, not contiguous along K: no vector of them to load."""
    a, b, c = "memref<f32x49x100>", "memref<f32x30x100>", "memref<f32x49x30>"
    text = f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.t 1.0, %A, %B, 0.0, %C : f32, {a}, {b}, f32, {c}
}}"""
    assert dot_rows(compiled(text).tiled()) == set()


def test_dot_loop_is_full_width_fmas_without_spills() -> None:
    """The dot products' K loop (the only hot loop loading op(B) without broadcasts): zmm
    FMAs, one per row and column of the group, and nothing through the stack."""
    code = compiled(gemm_text("f32", 52, 30, 512), "avx512").assembly()
    dot_loops = [
        loop
        for loop in asm.hot_loops(code, "k", "vfmadd")
        if not any("{1to16}" in i or "vbroadcast" in i for i in loop.instructions)
    ]
    assert dot_loops
    for loop in dot_loops:
        fmas = [i for i in loop.instructions if i.startswith("vfmadd")]
        assert fmas and all("%zmm" in i for i in fmas)
        assert loop.stack_accesses() == []


@pytest.mark.parametrize(("alpha", "beta"), [("1.0", "0.0"), ("2.0", "1.0")])
def test_literal_alpha_and_beta(alpha: str, beta: str, rng) -> None:
    a, b, c = "memref<f32x50x100>", "memref<f32x100x30>", "memref<f32x50x30>"
    compilation = compiled(f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n {alpha}, %A, %B, {beta}, %C : f32, {a}, {b}, f32, {c}
}}""")
    assert dot_rows(compilation.tiled()) == {2}
    x = np.asfortranarray(rng.uniform(-1, 1, (50, 100)).astype(np.float32))
    y = np.asfortranarray(rng.uniform(-1, 1, (100, 30)).astype(np.float32))
    z = np.full((50, 30), np.nan if beta == "0.0" else 0.5, np.float32, order="F")
    want = float(alpha) * (x.astype(np.float64) @ y) + (0.5 if beta == "1.0" else 0.0)
    compilation["k"](x, y, z, group_size=1)
    check(z, want, "f32", 100)


K_BLOCKS = [(ZEN4, 196, 1040), (ZEN4, 196, 1000), ("avx2", 100, 2080), ("avx2", 100, 1990)]
"""(target, M, K) of f32 gemms of 256 columns that the K-blocks path takes with 4 rows of dots:
on the Zen 4 host (1 MiB of L2, 2 x 13 tiles), two K blocks of 520 values and two of 500, not
whole vectors; on avx2, which runs on every host (the same caches, but 2 x 6 tiles, whose K
blocks of up to 1365 values take 196 rows beyond half of L2), 100 rows in two blocks of 1040
values and two of 995. (K a multiple of 1024 would put B's columns a whole L1 way apart, and
B would be packed.)"""


@pytest.mark.parametrize(("target", "m", "k"), K_BLOCKS, ids=target_id)
def test_k_blocks_path(target: str | Target, m: int, k: int) -> None:
    """The K-blocks path, with the last rows as dot products (compiled on any host;
    `test_k_blocks_path_results` runs it)."""
    tiled = compiled(gemm_text("f32", m, 256, k), target).tiled()
    assert f"subview %A[0:{m}," in tiled and dot_rows(tiled) == {4}


@pytest.mark.parametrize(
    ("target", "m", "k"),
    [pytest.param(*case, marks=needs_host(case[0])) for case in K_BLOCKS],
    ids=target_id,
)
def test_k_blocks_path_results(target: str | Target, m: int, k: int, rng) -> None:
    """The K-blocks path packs the rows per K block and takes each block's beta, the
    blocks' lengths known at run time and not always whole vectors."""
    for alpha, beta in [(1.0, 0.0), (-1.5, 0.5)]:
        run("f32", m, 256, k, alpha, beta, rng, target)


def transposed_gemm_text(ty: str, ta: str, m: int, n: int, k: int) -> str:
    a = f"memref<{ty}x{k}x{m}>" if ta == "t" else f"memref<{ty}x{m}x{k}>"
    b, c = f"memref<{ty}x{k}x{n}>", f"memref<{ty}x{m}x{n}>"
    return f"""func @k(%alpha: {ty}, %A: {a}, %B: {b}, %beta: {ty}, %C: {c}) {{
  gemm.{ta}.n %alpha, %A, %B, %beta, %C : {ty}, {a}, {b}, {ty}, {c}
}}"""


WHOLE_DOTS = [
    ("f32", "t", 1, 1, 5000),
    ("f32", "t", 4, 4, 5000),
    ("f32", "n", 1, 4, 5000),
    ("f32", "t", 3, 100, 97),
    ("f32", "n", 2, 64, 1030),
    ("f64", "t", 2, 33, 64),
    ("f64", "n", 4, 40, 300),
    ("f64", "n", 1, 7, 20001),
]


@pytest.mark.parametrize(("ty", "ta", "m", "n", "k"), WHOLE_DOTS)
def test_c_of_one_to_four_rows_is_all_dot_products(ty: str, ta: str, m: int, n: int, k: int,
                                                   rng) -> None:  # fmt: skip
    """No register tile, whose vectors would hold M useful lanes: op(A)'s rows packed once,
    then dot products over blocks of columns (a loop where there are several), with a
    column remainder."""
    compilation = compiled(transposed_gemm_text(ty, ta, m, n, k))
    tiled = compilation.tiled()
    assert "tile.gemm" not in tiled and dot_rows(tiled) == {m}
    width = dot_columns(get(None), m)
    assert ("for " in tiled) == (n - n % width > width)
    dt = DTYPES[ty]
    a = np.asfortranarray(rng.uniform(-1, 1, (k, m) if ta == "t" else (m, k)).astype(dt))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n)).astype(dt))
    for alpha, beta in ((1.0, 0.0), (-0.5, 2.0)):
        c = np.asfortranarray(rng.uniform(-1, 1, (m, n)).astype(dt))
        want = alpha * ((a.T if ta == "t" else a).astype(np.float64) @ b) + beta * c
        if beta == 0:
            c[...] = np.nan
        compilation["k"](dt(alpha), a, b, dt(beta), c, group_size=1)
        check(c, want, ty, k)


@pytest.mark.parametrize(
    ("ta", "shape", "why"),
    [
        ("n", (4, 4, 5000), "4 rows lda apart over 4 columns: the tiles read A where it lies"),
        ("n", (2, 31, 100), "the pack gathering 2 rows pays from 32 columns"),
        ("t", (5, 64, 100), "5 rows: past DOT_ROWS"),
        ("t", (4, 64, 63), "K below 64"),
    ],
)
def test_where_few_rows_keep_register_tiles(ta: str, shape: tuple[int, int, int],
                                            why: str) -> None:  # fmt: skip
    tiled = compiled(transposed_gemm_text("f32", ta, *shape)).tiled()
    assert "tile.gemm" in tiled and not dot_rows(tiled), why


def test_members_of_one_row_are_dot_products(rng) -> None:
    """A batch of row vectors times matrices (c_g = a_g B_g), each member by dot products."""
    text = """func @b(%A: memref<f32x1x64x?>, %B: memref<f32x64x64x?>, %C: memref<f32x1x64x?>) {
    %g = group_id
    %a = subview %A[:, :, %g] : memref<f32x1x64x?>
    %b = subview %B[:, :, %g] : memref<f32x64x64x?>
    %c = subview %C[:, :, %g] : memref<f32x1x64x?>
    gemm.n.n 1.0, %a, %b, 0.0, %c : f32, memref<f32x1x64>, memref<f32x64x64>, f32, memref<f32x1x64>
}"""
    compilation = compiled(text)
    assert "tile.gemm" not in compilation.tiled() and "tile.row_dots" in compilation.tiled()
    a, b = (
        np.asfortranarray(rng.uniform(-1, 1, s).astype(np.float32))
        for s in ((1, 64, 9), (64, 64, 9))
    )
    c = np.full((1, 64, 9), np.nan, np.float32, order="F")
    compilation["b"](a, b, c, group_size=9)
    want = np.einsum("mkg,kng->mng", a.astype(np.float64), b.astype(np.float64))
    check(c, want, "f32", 64)


@pytest.mark.parametrize(("ta", "m", "n", "k"), [("t", 1, 64, 4096), ("n", 2, 64, 1024),
                                                 ("t", 4, 40, 999)])  # fmt: skip
def test_whole_dot_loops_are_full_width_fmas_without_spills(ta: str, m: int, n: int,
                                                            k: int) -> None:  # fmt: skip
    """Each K loop: one zmm FMA per row and column of its block (in as many chains as keep
    INDEPENDENT_FMAS in flight), nothing through the stack."""
    code = compiled(transposed_gemm_text("f32", ta, m, n, k), "avx512").assembly()
    loops = asm.hot_loops(code, "k", "vfmadd")
    width = dot_columns(get("avx512"), m)

    def fmas(sums: int) -> int:
        return sums * max(1, INDEPENDENT_FMAS // sums)

    assert {loop.count("vfmadd") for loop in loops} == {fmas(m * width), fmas(m * (n % width))}
    for loop in loops:
        fmas = [i for i in loop.instructions if i.startswith("vfmadd")]
        assert all("%zmm" in i for i in fmas) and loop.stack_accesses() == []
