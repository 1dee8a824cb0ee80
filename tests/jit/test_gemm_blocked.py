"""GEMM on operands larger than the caches: the choice of the blocked path (packed A and B
panels around the nanokernels), statically and at run time, and its results against numpy
for every transpose, f32 and f64, extents that leave partial cache blocks, partial register
panels and K tails, on every target; B read in place where it runs along K, by tiles at
most three quarters of an L1 set's ways wide, else packed (a K stride of 2: element by element); the K
blocks that follow from where B lies and how large C is; bf16 pairs.

What the compiler chooses is checked on every host, for explicit targets (compiling for
AVX-512 needs no AVX-512); results only where the host runs that target's code."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import nanotc
from nanotc.codegen import asm
from nanotc.ir.types import ScalarType
from nanotc.lowering.choices import BLOCKED, CompileOptions, GemmChoice
from nanotc.lowering.gemm_blocked import (
    B_BLOCK_BYTES,
    L1_SHARE_OF_PANELS,
    MAX_KC,
    ONE_BLOCK_OF_N,
    blocking,
    in_place_columns,
)
from nanotc.lowering.register_tile import RegisterTile, choose, choose_narrow, ranked
from nanotc.targets import MEASURED_RATES, Target, get
from nanotc.tuning.tuner import Site, blocking_candidates, gemm_sites

from .blas_cases import Case, run_case
from .helpers import ZEN3, ZEN4, compiled, needs_host, runnable

# M, N, K: A and B are each over 1 MiB in f32 (a B within half of L2 would take the row-panel
# path instead); no extent a whole block
SHAPE = (611, 601, 467)
DTYPES = {"f32": np.float32, "f64": np.float64}
RTOL = {"f32": 2e-5, "f64": 1e-12}

LARGE_L2: tuple[str | Target, ...] = ("avx2", ZEN4)
"""Targets with the 1 MiB L2 that SHAPE is sized against: the builtin avx2 (its code runs on
Zen 3 and Zen 4 alike) and ZEN4, the Zen 4 host the AVX-512 rules were measured on. Compiled
for them, SHAPE takes the blocked path on any machine; on "host" the machine's own caches
would decide."""


def gemm_text(ty: str, ta: str, tb: str, shapes: tuple[str, str, str]) -> str:
    a, b, c = (f"memref<{ty}x{s}>" for s in shapes)
    return f"""func @k(%alpha: {ty}, %A: {a}, %B: {b}, %beta: {ty}, %C: {c}) {{
  gemm.{ta}.{tb} %alpha, %A, %B, %beta, %C : {ty}, {a}, {b}, {ty}, {c}
}}"""


def blocked_site(text: str, target: Target) -> Site:
    """The blocked path's gemm site of kernel `k` (launched on arrays past half of L2)."""
    large = [np.empty(target.l2_bytes, np.uint8)]
    sites = gemm_sites(nanotc.load(text).function("k"), target, large)
    return next(site for site in sites if site.signature.path == BLOCKED)


def operands(rng, ty: str, ta: str, tb: str, m: int, n: int, k: int):
    dt = DTYPES[ty]
    a = np.asfortranarray(rng.uniform(-1, 1, (k, m) if ta == "t" else (m, k)).astype(dt))
    b = np.asfortranarray(rng.uniform(-1, 1, (n, k) if tb == "t" else (k, n)).astype(dt))
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n)).astype(dt))
    return a, b, c


def expected(a, b, c, ta: str, tb: str, alpha: float, beta: float) -> np.ndarray:
    op_a = a.T if ta == "t" else a
    op_b = b.T if tb == "t" else b
    return alpha * (op_a.astype(np.float64) @ op_b.astype(np.float64)) + beta * c


def check(got: np.ndarray, want: np.ndarray, ty: str, k: int) -> None:
    scale = np.abs(want).max() + 1
    np.testing.assert_allclose(got, want, rtol=0, atol=RTOL[ty] * np.sqrt(k) * scale)


def static_text(ty: str, ta: str, tb: str) -> str:
    """The gemm of SHAPE with every extent in its type."""
    m, n, k = SHAPE
    shapes = (f"{k}x{m}" if ta == "t" else f"{m}x{k}", f"{n}x{k}" if tb == "t" else f"{k}x{n}",
              f"{m}x{n}")  # fmt: skip
    return gemm_text(ty, ta, tb, shapes)


@pytest.mark.parametrize("target", LARGE_L2, ids=["avx2", "zen4"])
@pytest.mark.parametrize(("ta", "tb"), list(itertools.product("nt", repeat=2)), ids="".join)
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_static_blocked_gemm_packs_a(ty: str, ta: str, tb: str, target: str | Target) -> None:
    """A is packed; B is packed where op(B) is B^T, else its columns run along K and are read
    in place (compiled on any host)."""
    tiled = compiled(static_text(ty, ta, tb), target).tiled()
    assert f"tile.pack.{ta} %A" in tiled
    assert bool(re.search(r"tile\.pack\S* %B", tiled)) is (tb == "t")  # else B runs along K


@pytest.mark.parametrize("target", runnable(*LARGE_L2))
@pytest.mark.parametrize(("ta", "tb"), list(itertools.product("nt", repeat=2)), ids="".join)
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_static_blocked_gemm(ty: str, ta: str, tb: str, target: str | Target, rng) -> None:
    """The blocked gemms of `test_static_blocked_gemm_packs_a` against numpy."""
    m, n, k = SHAPE
    a, b, c = operands(rng, ty, ta, tb, m, n, k)
    compilation = compiled(static_text(ty, ta, tb), target)
    want = expected(a, b, c, ta, tb, 1.5, 0.5)
    compilation["k"](1.5, a, b, 0.5, c, group_size=1)
    check(c, want, ty, k)


@pytest.mark.parametrize(("ty", "target"), [("f32", "avx2"), ("f64", "generic")])
def test_blocked_gemm_on_narrower_targets(ty: str, target: str, rng) -> None:
    m, n, k = SHAPE
    a, b, c = operands(rng, ty, "n", "n", m, n, k)
    compilation = compiled(gemm_text(ty, "n", "n", (f"{m}x{k}", f"{k}x{n}", f"{m}x{n}")), target)
    tiled = compilation.tiled()
    assert "tile.pack.n %A" in tiled and not re.search(r"tile\.pack\S* %B", tiled)
    widths = {int(w) for w in re.findall(r"tile\.gemm\.n\.n .* tile \d+ x (\d+)", tiled)}
    assert widths and max(widths) <= in_place_columns(get(target))
    want = expected(a, b, c, "n", "n", 1.0, 0.0)
    compilation["k"](1.0, a, b, 0.0, c, group_size=1)
    check(c, want, ty, k)


def test_dynamic_sizes_take_the_blocked_path_when_large(rng) -> None:
    compilation = compiled(gemm_text("f32", "n", "n", ("?x?",) * 3))
    for m, n, k in [(700, 50, 400), (33, 20, 17)]:
        a, b, c = operands(rng, "f32", "n", "n", m, n, k)
        want = expected(a, b, c, "n", "n", -2.0, 1.0)
        compilation["k"](-2.0, a, b, 1.0, c, group_size=1)
        check(c, want, "f32", k)


@pytest.mark.parametrize(("rereads", "path"), [(True, "direct"), (False, "blocked")])
def test_run_time_path_packs_an_a_within_half_of_l2_where_rereading_is_slower(
    rereads: bool, path: str
) -> None:
    """A dynamic gemm decides at run time: f32 256 x 512 x 256 (A 256 KiB, within half of
    Zen 4's L2; A and B beyond it) takes the direct path where A is reread in place, the
    blocked one where that is slower, which packs it (Zen 3: W1 256^3 1.37-1.49x). Zen 4's
    k masks: the run-time rows take no registers (`masks_rows_in_registers`)."""
    target = replace(ZEN4, rereads_a_from_l2=rereads)
    arrays = [np.empty(shape, np.float32, order="F") for shape in [(256, 256), (256, 512)] * 2]
    func = nanotc.load(gemm_text("f32", "n", "n", ("?x?",) * 3)).function("k")
    (site,) = gemm_sites(func, target, [1.0, *arrays[:2], 0.0, arrays[3]])
    assert site.signature.path == path


@pytest.mark.parametrize(("ty", "lanes"), [("f32", 8), ("f64", 4)])
@pytest.mark.parametrize(("target", "masks_in_registers"), [(ZEN3, True), (ZEN4, False)])
def test_run_time_rows_pack_from_four_vectors_where_masks_take_registers(
    ty: str, lanes: int, target: Target, masks_in_registers: bool
) -> None:
    """A small dynamic gemm (A and B far within half of L2) packs from four vectors of rows
    where the direct path's tiles would hold masks in registers (Zen 3), and keeps the
    direct path below; AVX-512's k masks keep it at any M. (Both sides of the run-time test
    run in `test_dynamic_sizes_every_remainder`, M from 1 to 70.)"""
    func = nanotc.load(gemm_text(ty, "n", "n", ("?x?",) * 3)).function("k")
    np_type = np.float32 if ty == "f32" else np.float64
    for m, packs in [(4 * lanes - 1, False), (4 * lanes, masks_in_registers)]:
        arrays = [np.empty(shape, np_type, order="F") for shape in [(m, 32), (32, 128), (m, 128)]]
        (site,) = gemm_sites(func, target, [1.0, *arrays[:2], 0.0, arrays[2]])
        assert site.signature.path == ("blocked" if packs else "direct"), m


def k_strided_b_text() -> str:
    """The f32 gemm of SHAPE on a B of any extents and strides."""
    m, n, k = SHAPE
    strided = "?x?,strided<?,?>"
    return gemm_text("f32", "n", "n", (f"{m}x{k}", strided, f"{m}x{n}"))


@pytest.mark.parametrize("target", LARGE_L2, ids=["avx2", "zen4"])
def test_b_with_a_k_stride_packs_element_by_element(target: str | Target) -> None:
    """B's K stride is known only at run time (it may not be 1), so B is packed (compiled on
    any host)."""
    assert re.search(r"tile\.pack\S* %B", compiled(k_strided_b_text(), target).tiled())


@pytest.mark.parametrize(("ta", "outer"), [("n", "k.body"), ("t", "i.body")])
def test_contiguous_packs_go_column_by_column(ta: str, outer: str) -> None:
    """A pack whose rows are contiguous (A with .n) copies the block column by column, each
    column's panels in its inner loop, so it reads one run of A at a time; A with .t, whose
    panels come from in-register transposes, still goes panel by panel."""
    ir = compiled(gemm_text("f32", ta, "n", ("?x?", "?x?", "?x?")), "avx2").llvm_ir
    entries = re.findall(r'%"panel(?:\.\d+)?" = phi\s+i64 \[0, %"([\w.]+)"\]', ir)
    assert entries and all(entry.startswith(outer) for entry in entries), entries


GATHERED_A = {
    "transposed": ("t", "?x?"),
    "row stride": ("n", "?x?,strided<2,?>"),
    "transposed, M static": ("t", "?x40"),
}


@pytest.mark.parametrize("target", ["avx512", "avx2", "generic", ZEN4])
@pytest.mark.parametrize("gathered", list(GATHERED_A))
def test_run_time_sizes_of_a_gathered_a_always_pack(gathered: str, target: str | Target) -> None:
    """op(A)'s rows not adjacent and M or K known at run time only: no direct path, whose
    tiles would gather A lane by lane at every k step; the blocked path packs A at any
    size (`gathers_a`), so even a launch far within L1 takes it. A static A^T keeps the
    direct path, packed once whole."""
    ta, a_shape = GATHERED_A[gathered]
    text = gemm_text("f32", ta, "n", (a_shape, "?x?", "?x?"))
    tiled = compiled(text, target).tiled()
    assert re.search(r"tile\.pack\S* %A", tiled)
    assert not re.search(r"tile\.gemm\S* \S+, %A,", tiled)  # no direct path on A itself
    arrays = [np.empty((8, 8), np.float32, order="F") for _ in range(3)]
    func = nanotc.load(text).function("k")
    (site,) = gemm_sites(func, get(target), [1.0, *arrays[:2], 0.0, arrays[2]])
    assert site.signature.path == BLOCKED
    static = compiled(gemm_text("f32", "t", "n", ("40x24", "40x9", "24x9")), target).tiled()
    assert "tile.pack.t %A[0, 0] rows 24 cols 40 panel 24" in static and "if " not in static


@pytest.mark.parametrize("ty", ["f32", "f64"])
@pytest.mark.parametrize(("ta", "tb"), [("t", "n"), ("t", "t")], ids="".join)
def test_run_time_sizes_of_a_transposed_a_match_numpy(ty: str, ta: str, tb: str, rng) -> None:
    """The packed A^T of run-time sizes, from one element to partial panels, K chunks and
    row groups (the pack transposes whole groups of vector rows in a loop)."""
    compilation = compiled(gemm_text(ty, ta, tb, ("?x?",) * 3))
    sizes = [(1, 1, 1), (5, 3, 17), (16, 16, 16), (17, 9, 33), (64, 7, 3), (100, 100, 100),
             (129, 31, 70)]  # fmt: skip
    for m, n, k in sizes:
        a, b, c = operands(rng, ty, ta, tb, m, n, k)
        want = expected(a, b, c, ta, tb, 0.5, -1.0)
        compilation["k"](0.5, a, b, -1.0, c, group_size=1)
        check(c, want, ty, k)


NARROW_PANELS = r"""
import sys
import numpy as np
import nanotc
for ty, dt in (("f32", np.float32), ("f64", np.float64)):
    for m, n, k in ((1, 2, 20000), (1, 3, 20007), (2, 2, 9000), (3, 2, 6001), (5, 2, 4000),
                    (7, 3, 3000), (1, 2, 41), (3, 2, 35)):
        t = lambda s: f"memref<{ty}x{s}>"
        a_t, b_t, c_t = t(f"{k}x{m}"), t(f"{n}x{k}"), t(f"{m}x{n}")
        text = (f"func @k(%A: {a_t}, %B: {b_t}, %C: {c_t}) {{\n"
                f"  gemm.t.t 1.0, %A, %B, 0.0, %C : {ty}, {a_t}, {b_t}, {ty}, {c_t}\n}}")
        compilation = nanotc.compile(text, cache=False)
        assert "tile.pack.t %A" in compilation.tiled(), (ty, m, n, k)
        rng = np.random.default_rng(m * n + k)
        a, b = (np.asfortranarray(rng.uniform(-1, 1, s).astype(dt)) for s in ((k, m), (n, k)))
        c = np.zeros((m, n), dt, order="F")
        compilation["k"](a, b, c, group_size=1)
        want = a.T.astype(np.float64) @ b.T
        assert np.allclose(c, want, rtol=0, atol=1e-3 * np.sqrt(k)), (ty, m, n, k)
print("ok")
"""


def test_a_transposed_a_of_few_rows_is_packed_within_its_scratch() -> None:
    """A^T packed into panels narrower than half a vector (M = 1..7; B transposed, so that C's
    rows are not dot products reading A in place): a 1-row panel's
    transposed segments once reached 15 elements past the scratch, which glibc caught in heap
    scratch (K of 20000) as a double free, and which overwrote the stack below 64 KiB. In a
    child process with glibc's heap checks, so a regression fails rather than crashes."""
    env = os.environ | {"MALLOC_CHECK_": "3", "MALLOC_PERTURB_": "165"}
    child = subprocess.run([sys.executable, "-c", NARROW_PANELS], capture_output=True, text=True,
                           timeout=600, env=env)  # fmt: skip
    assert child.returncode == 0 and child.stdout.strip() == "ok", child.stderr[-2000:]


@pytest.mark.parametrize("target", runnable(*LARGE_L2))
def test_b_with_a_k_stride_matches_numpy(target: str | Target, rng) -> None:
    """B is every other row of a larger array: its K stride is 2 elements, so B^T's panels
    cannot be transposed from contiguous vectors."""
    m, n, k = SHAPE
    a, _, c = operands(rng, "f32", "n", "n", m, n, k)
    big = np.asfortranarray(rng.uniform(-1, 1, (2 * k, n)).astype(np.float32))
    b = big[::2, :]
    compilation = compiled(k_strided_b_text(), target)
    want = expected(a, b, c, "n", "n", 1.0, 1.0)
    compilation["k"](1.0, a, b, 1.0, c, group_size=1)
    check(c, want, "f32", k)


def path_of(tiled: str, m: int) -> str:
    """Packed blocks; K blocks (views of all M rows of A per K block); row panels (views of A
    per panel and K block); or the direct path (no views of A; at most the rows of A left to
    dot products packed, in panels of one row)."""
    if re.search(r"tile\.pack\S* .* panel (?!1 )\d+", tiled):
        return "blocked"
    if f"subview %A[0:{m}," in tiled:
        return "kblocks"
    return "panels" if "subview %A[" in tiled else "direct"


PATH_CASES = [
    ("n", (128, 64, 256), "direct"),  # A and B in L2: packing costs more than it saves
    ("n", (196, 1024, 512), "direct"),  # A in L2, each B panel in L1
    ("n", (49, 512, 4608), "direct"),  # A in L2, two rows of tiles read each B panel
    ("n", (196, 256, 1000), "kblocks"),  # B panels beyond L1, reread by 7 rows of tiles
    ("n", (196, 256, 1024), "panels"),  # as above, but B's columns in the same L1 sets
    ("n", (1200, 20, 1200), "panels"),  # A overflows L2, B fits
    ("n", (1200, 600, 1200), "blocked"),  # A and B overflow L2
    ("t", (49, 512, 4608), "blocked"),  # A^T gathered: A and B together overflow L2
]


def path_text(ta: str, shape: tuple[int, int, int]) -> str:
    m, n, k = shape
    a_shape = f"{k}x{m}" if ta == "t" else f"{m}x{k}"
    return gemm_text("f32", ta, "n", (a_shape, f"{k}x{n}", f"{m}x{n}"))


@pytest.mark.parametrize(("ta", "shape", "path"), PATH_CASES, ids=str)
def test_path_follows_what_the_direct_path_rereads(
    ta: str, shape: tuple[int, int, int], path: str
) -> None:
    """The path the builtin avx512 description (48 KiB L1, 2 MiB L2) takes, compiled on any
    host."""
    assert path_of(compiled(path_text(ta, shape), "avx512").tiled(), shape[0]) == path


@pytest.mark.parametrize(
    ("ta", "shape", "path"),
    [case for case in PATH_CASES if np.prod(case[1]) < 30_000_000],  # the cheaper ones
    ids=str,
)
@needs_host("avx512")
def test_each_path_matches_numpy(ta: str, shape: tuple[int, int, int], path: str, rng) -> None:
    """The gemms of `test_path_follows_what_the_direct_path_rereads`, run on avx512."""
    m, n, k = shape
    compilation = compiled(path_text(ta, shape), "avx512")
    a, b, c = operands(rng, "f32", ta, "n", m, n, k)
    want = expected(a, b, c, ta, "n", 1.0, 0.0)
    compilation["k"](1.0, a, b, 0.0, c, group_size=1)
    check(c, want, "f32", k)


def test_static_k_splits_into_equal_blocks_whose_panels_fit_l1() -> None:
    """A K one block covers stays whole; a longer one is split into equal blocks (the last
    no shorter than the others less 8), each with its A and B panels in L1 together."""
    avx512, tile = get("avx512"), RegisterTile(2, 14, 16)
    widest = blocking(avx512, ScalarType.F32, tile).kc
    assert blocking(avx512, ScalarType.F32, tile, widest).kc == widest
    for k in (widest + 1, 512, 1024, 2304, 4607):
        kc = blocking(avx512, ScalarType.F32, tile, k).kc
        blocks = -(-k // kc)
        assert kc <= widest and kc % 8 == 0
        assert k - (blocks - 1) * kc > kc - 8 * blocks  # equal blocks, no short remainder
        assert (tile.mr + tile.nr) * (kc - 8) * 4 <= avx512.l1_bytes * L1_SHARE_OF_PANELS


def test_k_blocks_stay_deep_where_b_is_read_in_place_and_c_exceeds_l2() -> None:
    """Tiles reading B in place are tall (f32 64 x 6 on AVX-512): K blocks whose A and B
    panels fit L1 together would pass over C every 152 steps. Where C is larger than L2 (or
    of unknown size) the blocks stay as deep as B's panel allows; a C in L2, or a packed B,
    keeps the rule."""
    avx512, tile = get("avx512"), RegisterTile(4, 6, 16)
    deepest = blocking(avx512, ScalarType.F32, tile).kc
    assert deepest == MAX_KC
    for m, n in ((2048, 2048), (None, 2048), (2048, None)):
        assert blocking(avx512, ScalarType.F32, tile, 2048, n, m=m, b_in_place=True).kc == deepest
    packed = blocking(avx512, ScalarType.F32, tile, 2048, 2048, m=2048)
    small_c = blocking(avx512, ScalarType.F32, tile, 1152, 128, m=784, b_in_place=True)
    for kc in (packed.kc, small_c.kc):
        assert (tile.mr + tile.nr) * (kc - 8) * 4 <= avx512.l1_bytes * L1_SHARE_OF_PANELS


def test_tuner_blocks_around_the_lowering_choice() -> None:
    """The tuner's blocked site proposes the tile and blocks the lowering chooses (B read in
    place: a narrow tile, deep K blocks for a C past L2), and its block candidates start
    from them; a tuned tile too wide to read B in place gets the packed B's blocks."""
    target = get("avx512")
    site = blocked_site(gemm_text("f32", "n", "n", ("2048x2048",) * 3), target)
    assert site.in_place_width == in_place_columns(target)
    assert site.analytical.tile is not None and site.analytical.blocking is not None
    narrow = RegisterTile(*site.analytical.tile, 16)
    assert blocking_candidates(site, narrow, target)[0] == site.analytical.blocking
    assert site.analytical.blocking[1] == MAX_KC
    wide = RegisterTile(2, 13, 16)
    packed = blocking(target, ScalarType.F32, wide, 2048, 2048, m=2048)
    assert blocking_candidates(site, wide, target)[0] == (packed.mc, packed.kc, packed.nc)


def test_tuner_tries_a_blocks_of_one_row_of_tiles() -> None:
    """Besides kc and mc halved and doubled, the candidates hold an A block of one row of
    register tiles at the analytical K block; no candidate repeats."""
    target = get("avx512")
    site = blocked_site(gemm_text("f32", "n", "n", ("2048x2048",) * 3), target)
    assert site.analytical.tile is not None and site.analytical.blocking is not None
    tile = RegisterTile(*site.analytical.tile, 16)
    mc, kc, nc = site.analytical.blocking
    candidates = blocking_candidates(site, tile, target)
    assert (tile.mr, kc, nc) in candidates and mc > tile.mr
    assert {c[0] for c in candidates} == {mc, mc // 2, 2 * mc, tile.mr}
    assert len(set(candidates)) == len(candidates) == 10


def test_bf16_pairs_take_k_blocks_twice_as_deep() -> None:
    """Packs of bf16 pairs: a K block holds twice the steps of an f32 one (each step a K
    pair), a K of 1024 stays one block and a longer one splits into equal blocks, and the
    A block still fits half of L2."""
    avx512, tile = get("avx512"), RegisterTile(2, 13, 16)
    f32 = blocking(avx512, ScalarType.F32, tile)
    pairs = blocking(avx512, ScalarType.BF16, tile)
    assert pairs.kc == 2 * MAX_KC > f32.kc
    assert blocking(avx512, ScalarType.BF16, tile, 1024).kc == 1024
    assert blocking(avx512, ScalarType.BF16, tile, 2048).kc == 1024
    assert blocking(avx512, ScalarType.BF16, tile, 1201).kc == 608
    assert pairs.mc * pairs.kc * 2 <= avx512.l2_bytes // 2


def test_a_static_n_splits_into_equal_b_blocks() -> None:
    """bf16 N = 2048 overflows a 4 MiB B block of kc = 1024 by a few columns: one block of
    2054 (a multiple of nr = 13), not 2041 + 7 that would pack all of A again for 7 columns;
    an N well past the block splits into equal blocks, each at most a quarter past it."""
    avx512, tile = get("avx512"), RegisterTile(2, 13, 16)
    dynamic = blocking(avx512, ScalarType.BF16, tile, 2048).nc
    assert dynamic < 2048
    assert blocking(avx512, ScalarType.BF16, tile, 2048, 2048).nc == 2054
    assert blocking(avx512, ScalarType.BF16, tile, 2048, 4096).nc == 2054  # 2 x 2048
    for n in (2 * dynamic + 700, 3 * dynamic + 100):
        nc = blocking(avx512, ScalarType.BF16, tile, 2048, n).nc
        blocks = -(-n // nc)
        assert nc <= dynamic * 1.25 and n - (blocks - 1) * nc > nc - tile.nr * blocks


def test_f64_k_blocks_fill_three_quarters_of_l1_where_c_exceeds_l2() -> None:
    """On Zen 4's L1 (32 KiB), f64 tiles of 6 columns reading B in place over a C past L2:
    K blocks of 512 (the B panel three quarters of L1), the A block two L2s (512 rows; half
    of L2 with B packed, or with B or C in L2), and B blocks of twice a packed B's bytes:
    2048 columns in one block, 4096 in two equal ones."""
    zen4 = replace(get("avx512"), l1_bytes=32 * 1024, l1_ways=8, l2_bytes=1024 * 1024,
                   a_block_l2s_over_memory=MEASURED_RATES["znver4", 512]["a_block_l2s_over_memory"])  # fmt: skip
    tile = RegisterTile(4, 6, 8)
    blocks = blocking(zen4, ScalarType.F64, tile, 2048, 2048, m=2048, b_in_place=True)
    assert (blocks.mc, blocks.kc, blocks.nc) == (512, 512, 2052)
    assert blocking(zen4, ScalarType.F64, tile, 2048, 4096, m=2048, b_in_place=True).nc == 2052
    packed = blocking(zen4, ScalarType.F64, tile, 2048, 2048, m=2048)
    assert packed.kc < 512 and packed.mc * packed.kc * 8 <= zen4.l2_bytes // 2
    assert packed.kc * packed.nc * 8 <= B_BLOCK_BYTES * ONE_BLOCK_OF_N
    for k, n, m in [(2048, 64, 256), (256, 128, 4096)]:  # C in L2; B in L2
        in_l2 = blocking(zen4, ScalarType.F64, tile, k, n, m=m, b_in_place=True)
        assert in_l2.mc * in_l2.kc * 8 <= zen4.l2_bytes // 2, (k, n, m)


def test_a_blocks_stay_in_half_of_l2_unless_measured_otherwise() -> None:
    """Where each A block passes over B's panels beyond L2, it fills two L2s only on a CPU
    measured to run faster so (Zen 4); elsewhere it keeps to half of L2, as on the AMX Xeon,
    where f64 1024^3 ran 1.6x faster in 240 rows than in 1008."""
    tile = RegisterTile(3, 8, 8)
    for target in (get("avx512"), get("amx")):
        blocks = blocking(target, ScalarType.F64, tile, 1024, 1024, m=1024, b_in_place=True)
        assert blocks.mc * blocks.kc * 8 <= target.l2_bytes // 2 < (blocks.mc + 24) * blocks.kc * 8
    wider = replace(get("avx512"), a_block_l2s_over_memory=2.0)
    blocks = blocking(wider, ScalarType.F64, tile, 1024, 1024, m=1024, b_in_place=True)
    assert blocks.mc * blocks.kc * 8 > wider.l2_bytes


BETA_ZERO_SHAPES = [("611x467", "467x601", "611x601"), ("?x?",) * 3]


def beta_zero_text(shapes: tuple[str, str, str]) -> str:
    a_t, b_t, c_t = (f"memref<f32x{s}>" for s in shapes)
    return f"""func @k(%A: {a_t}, %B: {b_t}, %C: {c_t}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a_t}, {b_t}, f32, {c_t}
}}"""


@pytest.mark.parametrize("target", LARGE_L2, ids=["avx2", "zen4"])
@pytest.mark.parametrize("shapes", BETA_ZERO_SHAPES, ids=str)
def test_beta_zero_takes_no_pass_over_c(shapes: tuple[str, str, str], target: str | Target) -> None:
    """The first K block writes C: with a static K (> 0) no pass over C comes before the
    blocks (compiled on any host)."""
    tiled = compiled(beta_zero_text(shapes), target).tiled()
    assert "tile.pack" in tiled
    if "?" not in shapes[0]:  # K is static and > 0: no pass over C before the blocks
        assert "tile.scale" not in tiled


@pytest.mark.parametrize("target", runnable(*LARGE_L2))
@pytest.mark.parametrize("shapes", BETA_ZERO_SHAPES, ids=str)
def test_beta_zero_never_reads_c(shapes: tuple[str, str, str], target: str | Target, rng) -> None:
    """The first K block writes C (no zeroing pass before it): a C of NaNs must not leak."""
    m, n, k = SHAPE
    compilation = compiled(beta_zero_text(shapes), target)
    a, b, _ = operands(rng, "f32", "n", "n", m, n, k)
    c = np.full((m, n), np.nan, np.float32, order="F")
    compilation["k"](a, b, c, group_size=1)
    check(c, a.astype(np.float64) @ b.astype(np.float64), "f32", k)


def beta_one_text(shapes: tuple[str, str, str]) -> str:
    return beta_zero_text(shapes).replace(", 0.0, %C", ", 1.0, %C")


@pytest.mark.parametrize("target", runnable(*LARGE_L2))
@pytest.mark.parametrize("shapes", BETA_ZERO_SHAPES, ids=str)
def test_beta_one_takes_no_pass_over_c(shapes: tuple[str, str, str], target: str | Target,
                                       rng) -> None:  # fmt: skip
    """C += A B: the K blocks add to C as it is, with no pass of C := 1 * C before them."""
    m, n, k = SHAPE
    compilation = compiled(beta_one_text(shapes), target)
    tiled = compilation.tiled()
    assert "tile.pack" in tiled and "tile.scale" not in tiled
    a, b, c = operands(rng, "f32", "n", "n", m, n, k)
    want = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    compilation["k"](a, b, c, group_size=1)
    check(c, want, "f32", k)


def bf16_operands(rng, ta: str, tb: str, m: int, n: int, k: int):
    a, b, c = operands(rng, "f32", ta, tb, m, n, k)
    return a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16), c


VNNI_SHAPES = [(700, 300, 1201), (1100, 70, 511)]  # K blocks 512, 512, 177; one odd block


def bf16_dynamic_text(ta: str, tb: str) -> str:
    a_t, b_t, c_t = "memref<bf16x?x?>", "memref<bf16x?x?>", "memref<f32x?x?>"
    return f"""func @k(%alpha: f32, %A: {a_t}, %B: {b_t}, %beta: f32, %C: {c_t}) {{
  gemm.{ta}.{tb} %alpha, %A, %B, %beta, %C : f32, {a_t}, {b_t}, f32, {c_t}
}}"""


@pytest.mark.parametrize(("ta", "tb"), list(itertools.product("nt", repeat=2)), ids="".join)
def test_bf16_blocked_gemm_packs_vnni_pairs(ta: str, tb: str) -> None:
    """bf16 into f32 on AVX512-BF16: A packed in bf16 VNNI pairs. A column-major B runs
    along K: the tiles read its pairs where they lie, no wider than half an L1 set's ways. A
    transposed B is packed into K-contiguous columns, so those tiles (`.padded`) run an odd
    block's last pair whole. (Compiled on any host; the sizes are known at run time.)"""
    tiled = compiled(bf16_dynamic_text(ta, tb), "avx512").tiled()
    assert f"tile.pack.{ta}.pairs %A" in tiled
    in_place = tb == "n"
    assert bool(re.search(r"tile\.pack\S* %B", tiled)) is not in_place
    assert ("tile.gemm.n.n.pairs.padded" in tiled) is not in_place
    if in_place:
        widths = {int(w) for w in re.findall(r"tile\.gemm\.n\.n\.pairs .* tile \d+ x (\d+)", tiled)}
        assert widths and max(widths) <= in_place_columns(get("avx512"))


@pytest.mark.parametrize(("ta", "tb"), list(itertools.product("nt", repeat=2)), ids="".join)
@pytest.mark.parametrize("shape", VNNI_SHAPES, ids=str)
@needs_host("avx512")
def test_bf16_blocked_gemm_on_vnni_pairs(
    ta: str, tb: str, shape: tuple[int, int, int], rng
) -> None:
    """The gemms of `test_bf16_blocked_gemm_packs_vnni_pairs`, run: A's pairs zero-padded
    past an odd K block and past the rows; f32 accumulation, so the result matches float64
    on the same bf16 values to f32 roundoff. alpha and beta general. An odd block of a B
    read in place ends with a half step; a transposed B is packed element by element, zero
    past an odd K."""
    m, n, k = shape
    compilation = compiled(bf16_dynamic_text(ta, tb), "avx512")
    a, b, c = bf16_operands(rng, ta, tb, m, n, k)
    want = expected(a, b, c, ta, tb, 1.5, -0.5)
    compilation["k"](1.5, a, b, -0.5, c, group_size=1)
    check(c, want, "f32", k)


def row_major_b_text(ty: str) -> str:
    """gemm.n.t on a B whose rows (K) are contiguous, every extent known at run time."""
    c_ty = "f32" if ty == "bf16" else ty
    a_t, b_t, c_t = f"memref<{ty}x?x?>", f"memref<{ty}x?x?,strided<?,1>>", f"memref<{c_ty}x?x?>"
    return f"""func @k(%A: {a_t}, %B: {b_t}, %C: {c_t}) {{
  gemm.n.t 1.0, %A, %B, 1.0, %C : {c_ty}, {a_t}, {b_t}, {c_ty}, {c_t}
}}"""


@pytest.mark.parametrize("ty", ["f64", "bf16"])
def test_row_major_b_with_t_is_read_in_place(ty: str) -> None:
    """gemm.n.t on a row-major B (N x K, K contiguous): B's rows are op(B)'s columns, read
    where they lie (bf16: each K pair one word), not packed (compiled on any host)."""
    tiled = compiled(row_major_b_text(ty), "avx512").tiled()
    tile = "tile.gemm.n.t.pairs " if ty == "bf16" else "tile.gemm.n.t "
    assert tile in tiled and not re.search(r"tile\.pack\S* %B", tiled)


@pytest.mark.parametrize("ty", ["f64", "bf16"])
@needs_host("avx512")
def test_row_major_b_read_in_place_matches_numpy(ty: str, rng) -> None:
    """The gemms of `test_row_major_b_with_t_is_read_in_place`, run with an odd last K
    block (1201 = 512 + 512 + 177) and partial tiles in M and N."""
    m, n, k = 700, 301, 1201
    c_ty = "f32" if ty == "bf16" else ty
    compilation = compiled(row_major_b_text(ty), "avx512")
    a, _, c = operands(rng, c_ty, "n", "n", m, n, k)
    b = np.ascontiguousarray(rng.uniform(-1, 1, (n, k)).astype(DTYPES[c_ty]))
    if ty == "bf16":
        a, b = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    want = expected(a, b, c, "n", "t", 1.0, 1.0)
    compilation["k"](a, b, c, group_size=1)
    check(c, want, c_ty, k)


def test_bf16_b_with_a_k_stride_or_a_wide_tuned_tile_is_packed() -> None:
    """B's pairs are read in place only where they are 32-bit words of B (a K stride of 1)
    and the tile is at most `in_place_columns` wide: a B whose K stride is 2, and a tuned
    tile of 13 columns, pack B."""
    target = get("avx512")
    a_t, c_t = "memref<bf16x?x?>", "memref<f32x?x?>"

    def text(b_t: str) -> str:
        return f"""func @k(%A: {a_t}, %B: {b_t}, %C: {c_t}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a_t}, {b_t}, f32, {c_t}
}}"""

    strided = compiled(text("memref<bf16x?x?,strided<2,?>>"), "avx512").tiled()
    assert re.search(r"tile\.pack\S* %B", strided) and "tile 32 x 13" in strided
    site = blocked_site(text(a_t), target)
    assert site.analytical.tile is not None and site.analytical.tile[1] <= in_place_columns(target)
    wide = CompileOptions.of({site.key: GemmChoice((2, 13))})
    tiled = nanotc.compile(text(a_t), target, options=wide).tiled()
    assert re.search(r"tile\.pack\S* %B", tiled) and "tile.gemm.n.n.pairs.padded" in tiled


@pytest.mark.parametrize(("ways", "columns"), [(8, 6), (12, 9), (16, 12)])
def test_in_place_b_takes_three_quarters_of_the_l1_ways(ways: int, columns: int) -> None:
    assert in_place_columns(replace(get("avx512"), l1_ways=ways)) == columns


def test_narrow_tile_model_keeps_the_analytical_order() -> None:
    """Among the tiles at most that wide: the first the analytical model ranks."""
    target = get("avx512")
    narrow = choose_narrow(6)(target, ScalarType.F32, None, None, None, 0)
    assert narrow.nr <= 6 < choose(target, ScalarType.F32, None, None, None, 0).nr
    assert narrow == next(t for t in ranked(target, ScalarType.F32, None, None, None) if t.nr <= 6)


@needs_host("avx512")
def test_bf16_blocked_gemm_with_beta_zero_never_reads_c(rng) -> None:
    """The first K block writes C from the packed pairs: a C of NaNs does not leak, and
    neither do the padded pairs of the odd last block (K = 1025)."""
    m, n, k = 900, 130, 1025
    a_t, c_t = "memref<bf16x?x?>", "memref<f32x?x?>"
    compilation = compiled(f"""func @k(%A: {a_t}, %B: {a_t}, %C: {c_t}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a_t}, {a_t}, f32, {c_t}
}}""", "avx512")  # fmt: skip
    a, b, _ = bf16_operands(rng, "n", "n", m, n, k)
    c = np.full((m, n), np.nan, np.float32, order="F")
    compilation["k"](a, b, c, group_size=1)
    check(c, a.astype(np.float64) @ b.astype(np.float64), "f32", k)


@pytest.mark.parametrize("inputs", ["bf16", "f16"])
@pytest.mark.parametrize("target", runnable("avx2", ZEN3), ids=["avx2", "zen3"])
def test_run_time_k_of_zero_with_beta_zero_writes_c(inputs: str, target: str | Target) -> None:
    """A 16-bit A with run-time rows always takes the blocked path on AVX2, whose first K
    block writes C: with K = 0 there is none, and C := alpha * 0 (`tile.scale` by it)
    writes a C of NaNs instead; a run-time alpha of NaN or infinity makes it NaN, as the
    reference does. K > 0 runs the blocks."""
    a_t, c_t = f"memref<{inputs}x?x?>", "memref<f32x?x?>"
    text = f"""func @k(%alpha: f32, %A: {a_t}, %B: {a_t}, %C: {c_t}) {{
  gemm.n.n %alpha, %A, %B, 0.0, %C : f32, {a_t}, {a_t}, f32, {c_t}
}}"""
    tiled = compiled(text, target).tiled()
    assert "tile.pack" in tiled and re.search(r"if %\d+ \{\s*%\d+ = arith.mul %alpha", tiled)
    kernel = compiled(text, target)["k"]
    dtype = ml_dtypes.bfloat16 if inputs == "bf16" else np.float16
    for k, alpha in ((0, 1.5), (3, 1.5), (0, np.inf), (0, np.nan)):
        a, b = (np.ones(shape, dtype, order="F") for shape in ((40, k), (k, 9)))
        c = np.full((40, 9), np.nan, np.float32, order="F")
        kernel(np.float32(alpha), a, b, c, group_size=1)
        with np.errstate(invalid="ignore"):
            want = np.float32(alpha) * np.float32(k)  # inf * 0 and NaN * 0 are NaN
        np.testing.assert_array_equal(c, np.full((40, 9), want, np.float32))


@pytest.mark.parametrize(("ty", "tile"), [("f32", (1, 12)), ("f64", (1, 7))], ids=str)
def test_packed_b_panels_narrower_than_vectors_mask_one_store_per_chunk(
    ty: str, tile: tuple[int, int], rng
) -> None:
    """A tuned tile too wide to read B in place packs B^T by register transposes into
    panels that end inside a vector (12 f32 rows: 8 + 4 lanes; 7 f64 rows: 4 + 3). The K
    steps' segments are stored in address order as whole vectors, each spilling into the
    next; only a chunk's last one is masked (it was every partial one). Results on AVX2."""
    text = gemm_text(ty, "n", "n", ("?x?",) * 3)
    site = blocked_site(text, get("avx2"))
    options = CompileOptions.of({site.key: GemmChoice(tile)})
    compilation = nanotc.compile(text, "avx2", options=options)
    assert re.search(r"tile\.pack\S* %B", compilation.tiled())
    transposing = [
        loop for loop in asm.hot_loops(compilation.assembly(), "k", "vperm2f128")
        if re.search(r"vmaskmovp[sd]\s+%ymm\d+, %ymm\d+, -?\d*\(", "\n".join(loop.instructions))
    ]  # fmt: skip
    assert transposing, "no pack loop transposing in registers"
    for loop in transposing:
        stores = [
            i for i in loop.instructions if re.match(r"vmaskmovp[sd]\s+%ymm\d+, %ymm\d+, ", i)
        ]
        assert len(stores) == 1, loop.instructions
    m, n, k = SHAPE
    a, b, c = operands(rng, ty, "n", "n", m, n, k)
    want = expected(a, b, c, "n", "n", 1.5, 0.5)
    compilation["k"](1.5, a, b, 0.5, c, group_size=1)
    check(c, want, ty, k)


@pytest.mark.parametrize("element", ["bf16", "f16"])
def test_16_bit_a_of_run_time_rows_is_packed_without_k_masks(element: str) -> None:
    """On AVX2 the direct path would load A's 16-bit elements under a run-time row mask lane
    by lane, a branch per lane at every k step (`masks_lane_by_lane`): such gemms always
    pack, where AVX-512's k masks keep the run-time choice of the direct path."""
    case = Case("gemm", ("n", "n"), (element, element, "f32"), "f32", ("dynamic",) * 3)
    avx2 = nanotc.compile(case.text(), target="avx2", cache=False)
    assert "tile.pack.n %a" in avx2.tiled() and " %a, " not in avx2.tiled()
    fma_loops = asm.hot_loops(avx2.assembly(), "k")
    assert fma_loops and all(loop.count("vpinsrw") == 0 for loop in fma_loops)
    avx512 = nanotc.compile(case.text(), target="avx512", cache=False)
    assert " %a, " in avx512.tiled()  # the direct path's tiles on A itself


@pytest.mark.parametrize("target", ["avx2", "host"])
@pytest.mark.parametrize("element", ["bf16", "f16"])
def test_16_bit_a_of_run_time_rows_results(element: str, target: str, rng) -> None:
    """Those gemms packed: rows around the vectors and panels, every alpha/beta form."""
    case = Case("gemm", ("n", "n"), (element, element, "f32"), "f32", ("dynamic",) * 3)
    run_case(case, target, rng, [(1, 3, 5), (7, 9, 16), (16, 6, 33), (37, 13, 70)])


# M past a whole number of vectors by at most DOT_ROWS rows (f32: 8 lanes, f64: 4), A and B
# past half of L2: W3's 49 x N and 196 x N shapes, smaller
DOT_SHAPES = [(49, 1024, 512), (196, 256, 1152), (611, 601, 467)]


@pytest.mark.parametrize("shape", DOT_SHAPES, ids=str)
def test_blocked_path_takes_the_last_rows_as_dot_products(shape: tuple[int, int, int]) -> None:
    """C's rows past the last whole vector are dot products along K after each column
    block of tiles (its B panel then in L1), not a masked tile: no tile covers them, they
    are packed apart from A's panels, and where several row blocks share a K block (611
    rows) only the first block takes them."""
    m, n, k = shape
    text = gemm_text("f32", "n", "n", (f"{m}x{k}", f"{k}x{n}", f"{m}x{n}"))
    lines = [line.strip() for line in compiled(text, ZEN3).tiled().splitlines()]
    dots = m % 8
    assert any(line.startswith(f"tile.pack.n %A[{m - dots}, ") and f"rows {dots} " in line
               for line in lines)  # fmt: skip
    at = [i for i, line in enumerate(lines) if line.startswith("tile.row_dots.n")]
    assert at and all(f"rows {dots} cols" in lines[i] for i in at)
    assert not any(re.search(r"tile\.gemm.* rows [1-7] tile", line) for line in lines)
    guarded = [lines[i - 1].startswith("if ") for i in at]
    assert guarded == [m > 512] * len(at)


@pytest.mark.parametrize(("n", "ahead"), [(128, True), (256, True), (512, False)])
def test_blocked_tiles_prefetch_the_next_a_block_where_n_is_small(n: int, ahead: bool) -> None:
    """W3's 784 x N x 1152 on Zen 3: with few columns of tiles per A block, each tile asks
    for its rows of the next A block (the next mc rows, or after the last the first rows of
    the next K block), in the K columns of its column of tiles: together the tiles cover the
    block's kc columns, each view clamped within A. From 512 columns, none."""
    text = gemm_text("f32", "n", "n", ("784x1152", f"1152x{n}", f"784x{n}"))
    tiled = compiled(text, ZEN3).tiled()
    k_loop = re.search(r"for (%\d+) = 0, 1152, (\d+) \{", tiled)
    m_loop = re.search(r"for (%\d+) = 0, 784, (\d+) \{", tiled)
    assert k_loop and m_loop
    (pc, kc), (ic, mc) = k_loop.groups(), m_loop.groups()
    assert f"tile.pack.n %A[{ic}, {pc}]" in tiled
    views = re.findall(r"tile\.prefetch %\d+ : memref<f32x16x(\d+),strided<1,784>>", tiled)
    if not ahead:
        assert not views
        return
    assert len(views) == 2 and len(set(views)) == 1  # the 16 x 6 tiles and the 16 x 2
    width, column_tiles = int(views[0]), -(-n // 6)
    assert width * column_tiles >= int(kc) > (width - 1) * column_tiles
    following = re.search(rf"(%\d+) = arith\.add {ic}, {mc} : index", tiled)
    next_k = re.search(rf"(%\d+) = arith\.add {pc}, {kc} : index\n\s*(%\d+) = arith\.rem", tiled)
    assert following and next_k
    assert f"yield 0, {next_k.group(2)} : index, index" in tiled
    assert f"yield {following.group(1)}, {pc} : index, index" in tiled
    # the views stay within A: rows from at most 784 - 16, K columns at most 1152 - width
    assert re.search(r"= tile\.min %\d+, 768 : index", tiled)
    assert re.search(rf"= tile\.min %\d+, {1152 - width} : index", tiled)


@pytest.mark.parametrize("target", runnable(ZEN3, "avx2", "generic"))
@pytest.mark.parametrize(("ta", "tb"), [("n", "n"), ("t", "n"), ("n", "t")], ids="".join)
@pytest.mark.parametrize("shape", [(300, 100, 700), (100, 256, 900)], ids=str)
def test_blocked_gemms_prefetching_the_next_a_block_match_numpy(
    shape: tuple[int, int, int], ta: str, tb: str, target: str | Target, rng
) -> None:
    """Gemms whose tiles prefetch the next A block on Zen 3 (N at most 256, several
    blocks; the last row and K blocks partial, so the views are clamped) against numpy,
    and the same gemms on the other targets, whatever path they take there."""
    m, n, k = shape
    shapes = (f"{k}x{m}" if ta == "t" else f"{m}x{k}", f"{n}x{k}" if tb == "t" else f"{k}x{n}",
              f"{m}x{n}")  # fmt: skip
    compilation = compiled(gemm_text("f32", ta, tb, shapes), target)
    assert ("tile.prefetch" in compilation.tiled()) or target is not ZEN3
    a, b, c = operands(rng, "f32", ta, tb, m, n, k)
    want = expected(a, b, c, ta, tb, 1.5, 0.5)
    compilation["k"](1.5, a, b, 0.5, c, group_size=1)
    check(c, want, "f32", k)


def test_blocked_tiles_of_run_time_extents_prefetch_no_next_a_block() -> None:
    """With run-time M or K the views of the next block could pass A's end: none (W1)."""
    from bench import kernels

    assert "tile.prefetch" not in compiled(kernels.column_blocks("f64", 128), ZEN3).tiled()


@pytest.mark.parametrize("target", runnable("host", "avx2", "generic"))
@pytest.mark.parametrize("shape", DOT_SHAPES, ids=str)
@pytest.mark.parametrize(("ty", "alpha", "beta"), [("f32", 1.0, 0.0), ("f64", -1.5, 1.0),
                                                   ("f32", 2.0, 0.5)], ids=str)  # fmt: skip
def test_blocked_row_dots_match_numpy(ty: str, alpha: float, beta: float,
                                      shape: tuple[int, int, int], target: str, rng) -> None:  # fmt: skip
    """The blocked path's gemms with dot-product rows (where M passes a whole number of the
    target's vectors by at most four rows), in every K block (beta 0 for the first where it
    writes C) and in the first of several row blocks, against numpy."""
    m, n, k = shape
    text = gemm_text(ty, "n", "n", (f"{m}x{k}", f"{k}x{n}", f"{m}x{n}"))
    compilation = compiled(text, target)
    tiled = compilation.tiled()
    dots = m % get(target).lanes(ScalarType(ty))
    assert "tile.pack" in tiled
    assert ("tile.row_dots" in tiled) is (0 < dots <= 4)
    a, b, c = operands(rng, ty, "n", "n", m, n, k)
    want = expected(a, b, c, "n", "n", alpha, beta)
    compilation["k"](alpha, a, b, beta, c, group_size=1)
    check(c, want, ty, k)
