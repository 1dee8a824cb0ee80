"""The in-place paths for operands beyond the caches (K blocks of the direct path when A's K
blocks fit half of L2; row panels of A when B does): when each is taken, its tile and K blocks, and its
results against numpy for f32 and f64, transposed B, alpha and beta (beta 0 never reading C),
M and N tails and unequal K blocks, on every target; row panels starting on a cache line
whatever the arrays' offsets."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

import nanotc
from nanotc.ir.builder import FunctionBuilder
from nanotc.ir.core import Program, walk
from nanotc.ir.instructions import Gemm
from nanotc.ir.tile import TileLineLead
from nanotc.ir.types import DYNAMIC, INDEX, MemRefType, ScalarType
from nanotc.lowering.gemm_in_place import b_columns_share_sets, k_block_depth, panel_depth
from nanotc.lowering.register_tile import (
    RegisterTile,
    a_vector_cycles,
    choose,
    choose_tall,
    estimate,
)
from nanotc.targets import get

from .helpers import ZEN3, compiled, runnable, runs_here
from .test_gemm_blocked import DTYPES, check, expected, gemm_text, operands, path_of

REREADS = replace(get("host"), rereads_a_from_l2=True)
"""The host, as a target that rereads A from L2 (Zen 4's rule): where the host itself packs
such an A instead (Zen 3), its code still takes the K-blocks path here."""

# M, N, K with no extent a whole tile or block
SHAPES = {
    "panels": (611, 45, 467),  # A over 1 MiB in f32, B 84 KiB
    "kblocks": (70, 700, 900),  # A 246 KiB, B 2.4 MiB: B panels of all of K overflow L1
}


def shapes_of(ta: str, tb: str, m: int, n: int, k: int) -> tuple[str, str, str]:
    return (f"{k}x{m}" if ta == "t" else f"{m}x{k}", f"{n}x{k}" if tb == "t" else f"{k}x{n}",
            f"{m}x{n}")  # fmt: skip


@pytest.mark.parametrize("path", sorted(SHAPES))
@pytest.mark.parametrize("tb", ["n", "t"])
@pytest.mark.parametrize("ty", ["f32", "f64"])
@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 0.0), (1.0, 1.0), (-1.5, 0.5)], ids=str)
def test_in_place_paths_match_numpy(
    path: str, ty: str, tb: str, alpha: float, beta: float, rng
) -> None:
    m, n, k = SHAPES[path]
    compilation = compiled(gemm_text(ty, "n", tb, shapes_of("n", tb, m, n, k)), REREADS)
    assert path_of(compilation.tiled(), m) == path
    a, b, c = operands(rng, ty, "n", tb, m, n, k)
    want = expected(a, b, c, "n", tb, alpha, beta)
    compilation["k"](alpha, a, b, beta, c, group_size=1)
    check(c, want, ty, k)


@pytest.mark.parametrize("path", sorted(SHAPES))
@pytest.mark.parametrize(("ty", "target"), [("f32", "avx2"), ("f64", "generic")])
def test_in_place_paths_on_narrower_targets(path: str, ty: str, target: str, rng) -> None:
    m, n, k = SHAPES[path]
    compilation = compiled(gemm_text(ty, "n", "n", shapes_of("n", "n", m, n, k)), target)
    assert path_of(compilation.tiled(), m) == path
    a, b, c = operands(rng, ty, "n", "n", m, n, k)
    want = expected(a, b, c, "n", "n", 2.0, -1.0)
    compilation["k"](2.0, a, b, -1.0, c, group_size=1)
    check(c, want, ty, k)


def literal_beta_kernel(path: str, ty: str, beta: float) -> nanotc.Compilation:
    """C := A B + beta C on the path's shape, beta in the source; no pass over C before the
    K blocks (`tile.scale`) for beta 0 (the first block writes C) or 1 (C as it is)."""
    m, n, k = SHAPES[path]
    a_t, b_t, c_t = (f"memref<{ty}x{s}>" for s in shapes_of("n", "n", m, n, k))
    compilation = compiled(
        f"""func @k(%A: {a_t}, %B: {b_t}, %C: {c_t}) {{
  gemm.n.n 1.0, %A, %B, {beta}, %C : {ty}, {a_t}, {b_t}, {ty}, {c_t}
}}""",
        REREADS,
    )
    tiled = compilation.tiled()
    assert path_of(tiled, m) == path and "tile.scale" not in tiled
    return compilation


@pytest.mark.parametrize("path", sorted(SHAPES))
def test_beta_zero_never_reads_c(path: str, rng) -> None:
    """The first K block writes C: a C of NaNs does not leak."""
    m, n, k = SHAPES[path]
    compilation = literal_beta_kernel(path, "f32", 0.0)
    a, b, _ = operands(rng, "f32", "n", "n", m, n, k)
    c = np.full((m, n), np.nan, np.float32, order="F")
    compilation["k"](a, b, c, group_size=1)
    check(c, a.astype(np.float64) @ b.astype(np.float64), "f32", k)


@pytest.mark.parametrize("path", sorted(SHAPES))
def test_beta_one_adds_to_c_as_it_is(path: str, rng) -> None:
    m, n, k = SHAPES[path]
    compilation = literal_beta_kernel(path, "f64", 1.0)
    a, b, c = operands(rng, "f64", "n", "n", m, n, k)
    want = c + a @ b
    compilation["k"](a, b, c, group_size=1)
    check(c, want, "f64", k)


@pytest.mark.parametrize(
    ("ta", "shape", "path"),
    [
        ("n", (3136, 64, 576), "panels"),  # W3: A 7 MiB, B 144 KiB
        ("n", (784, 256, 512), "panels"),  # B 512 KiB: half of L2 is 1 MiB
        ("n", (196, 512, 1000), "kblocks"),  # A 784 KiB, B 2 MiB
        ("n", (196, 512, 1024), "blocked"),  # W3: as above, but B's columns 4 KiB apart
        ("n", (196, 256, 2304), "kblocks"),  # W3: A 1.7 MiB, but its K blocks within L2
        ("n", (784, 512, 1024), "blocked"),  # A 3 MiB, B 2 MiB
        ("t", (3136, 64, 576), "blocked"),  # op(A)'s rows are not adjacent: packed blocks
    ],
    ids=str,
)
def test_path_taken(ta: str, shape: tuple[int, int, int], path: str) -> None:
    text = gemm_text("f32", ta, "n", shapes_of(ta, "n", *shape))
    assert path_of(compiled(text, "avx512").tiled(), shape[0]) == path


def test_dynamic_sizes_never_read_in_place() -> None:
    tiled = compiled(gemm_text("f32", "n", "n", ("?x?",) * 3)).tiled()
    assert "subview %A[" not in tiled


def test_row_panel_tile_is_the_tallest_the_model_ties() -> None:
    """On AVX-512 the model ties 2 x 13 and 3 x 8 for W3's N = 64; the row panels take 3 x 8,
    and K = 576 splits into equal blocks whose A block fills at most half of L1."""
    target = get("avx512")
    m, n, k = 3136, 64, 576
    tall = choose_tall(target, ScalarType.F32, m, n, k)
    usual = choose(target, ScalarType.F32, m, n, k)
    assert (tall.mv, tall.nr) == (3, 8) and tall.mv > usual.mv
    from_l2 = a_vector_cycles(target, ScalarType.F32, m, k)
    assert estimate(tall, m, n, k, from_l2) <= 1.01 * estimate(usual, m, n, k, from_l2)
    depth = panel_depth(target, tall, 4, k)
    blocks = -(-k // depth)
    assert tall.mr * depth * 4 <= target.l1_bytes // 2 and blocks * depth - k < blocks
    tiled = compiled(gemm_text("f32", "n", "n", shapes_of("n", "n", m, n, k)), "avx512").tiled()
    assert f"tile {tall.mr} x {tall.nr}" in tiled


def test_k_blocks_tile_model_leaves_out_the_rows_of_dot_products() -> None:
    """W3's 49x512x4608 in K blocks: the 49th row is a dot product, so the tiles cover 48
    rows of whole vectors and on AVX2 no mask register is charged: 2 x 6 tiles (12
    accumulators; the model charged a mask and took 1 x 12, which ran 0.84-0.95x)."""
    m, n, k = 49, 512, 4608
    target = replace(ZEN3, rereads_a_from_l2=True)
    tiled = compiled(gemm_text("f32", "n", "n", shapes_of("n", "n", m, n, k)), target).tiled()
    assert path_of(tiled, m) == "kblocks" and "tile.row_dots" in tiled
    assert "tile 16 x 6" in tiled


@pytest.mark.parametrize("target", runnable(replace(ZEN3, rereads_a_from_l2=True)))
def test_k_blocks_with_dot_rows_match_numpy(target, rng) -> None:
    m, n, k = 49, 40, 4608
    a, b, c = operands(rng, "f32", "n", "n", m, n, k)
    compilation = compiled(gemm_text("f32", "n", "n", shapes_of("n", "n", m, n, k)), target)
    assert path_of(compilation.tiled(), m) == "kblocks"
    want = expected(a, b, c, "n", "n", 1.5, 0.5)
    compilation["k"](1.5, a, b, 0.5, c, group_size=1)
    check(c, want, "f32", k)


@pytest.mark.parametrize(
    ("shape", "rereads", "path"),
    [
        ((196, 1024, 256), True, "direct"),
        ((196, 1024, 256), False, "blocked"),
        ((49, 512, 4608), True, "kblocks"),
        ((49, 512, 4608), False, "blocked"),
        ((784, 128, 512), False, "panels"),
    ],
    ids=str,
)
def test_a_within_half_of_l2_is_packed_where_rereading_it_is_slower(
    shape: tuple[int, int, int], rereads: bool, path: str
) -> None:
    """W3's gemms whose A fits half of L2 while A and B do not: Zen 4 rereads such an A where
    it lies (direct, or K blocks); Zen 3 packs it (196x1024x256 1.02-1.09x, 49x512x4608
    1.3-1.5x). Row panels, which read A's block from L1, stay."""
    target = replace(ZEN3, rereads_a_from_l2=rereads)
    text = gemm_text("f32", "n", "n", shapes_of("n", "n", *shape))
    assert path_of(compiled(text, target).tiled(), shape[0]) == path


@pytest.mark.parametrize(("rate", "tile"), [(12.0, "16 x 6"), (20.0, "16 x 4")])
def test_l2_rate_decides_how_many_vectors_of_a_a_tile_streams(rate: float, tile: str) -> None:
    """Row panels of W3's 784x128x512 read A from L2: at Zen 3's 12 bytes a cycle, 2 x 4
    tiles (64 bytes of A per 4 cycles) would wait on it and 2 x 6 do not (1.03-1.05x);
    at 20 bytes a cycle the model takes 2 x 4."""
    m, n, k = 784, 128, 512
    target = replace(ZEN3, l2_bytes_per_cycle=rate)
    tiled = compiled(gemm_text("f32", "n", "n", shapes_of("n", "n", m, n, k)), target).tiled()
    assert path_of(tiled, m) == "panels" and f"tile {tile}" in tiled


def test_k_blocks_keep_the_b_panel_within_l1() -> None:
    target = get("avx512")
    m, n, k = 96, 512, 2000
    tiled = compiled(gemm_text("f32", "n", "n", shapes_of("n", "n", m, n, k)), "avx512").tiled()
    tile = choose(target, ScalarType.F32, m, n, k, 1)  # r1: beta 0 or 1 chosen at run time
    kc = k_block_depth(target, tile, 4, k)
    assert kc < k and tile.nr * kc * 4 <= target.l1_bytes and f"= 0, {k}, {kc} {{" in tiled
    assert k_block_depth(target, tile, 4, 700) == 700


@pytest.mark.parametrize(
    ("k", "tb", "shared"),
    [
        (1024, "n", True),
        (2048, "n", True),
        (1028, "n", False),
        (2304, "n", False),
        (1024, "t", False),
    ],
    ids=str,
)
def test_b_columns_share_sets_when_a_whole_way_apart(k: int, tb: str, shared: bool) -> None:
    """On an L1 of 8 ways of 4 KiB: columns of B k floats apart (a transposed B of N = 256
    rows has its columns one float apart)."""
    target = replace(get("avx512"), l1_bytes=32 * 1024, l1_ways=8)
    text = gemm_text("f32", "n", tb, shapes_of("n", tb, 196, 256, k))
    gemm = next(i for i in walk(nanotc.load(text).function("k").body) if isinstance(i, Gemm))
    assert b_columns_share_sets(gemm, target) is shared


def test_k_within_one_row_panel_block_stays_whole() -> None:
    tile = RegisterTile(3, 8, 16)
    assert panel_depth(get("avx512"), tile, 4, 100) == 100


@pytest.mark.parametrize(("k", "depth"), [(576, 576), (5461, 5461), (5462, 2731), (20000, 5000)])
def test_panels_prefetching_in_their_k_loops_take_k_blocks_of_half_of_l2(
    k: int, depth: int
) -> None:
    """48-row f32 panels on 2 MiB of L2: A blocks of at most 1 MiB, 5461 columns."""
    target = replace(get("avx512"), prefetches_next_panel_block=False)
    assert panel_depth(target, RegisterTile(3, 8, 16), 4, k) == depth


def at_line_offset(array: np.ndarray, elements: int) -> np.ndarray:
    """A Fortran-ordered copy of `array` starting `elements` elements past a 64-byte line."""
    size = array.itemsize
    buffer = np.empty(array.size + 2 * 64 // size, array.dtype)
    start = (-buffer.ctypes.data % 64) // size + elements
    out = buffer[start : start + array.size].reshape(array.shape, order="F")
    out[...] = array
    return out


@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_row_panels_start_on_a_cache_line(ty: str, rng) -> None:
    """Where every column of A and of C starts at the same offset in its line (M a whole
    number of lines), the panels start at A's first line boundary, found at run time: any
    offset of A, and of C apart from it, gives numpy's result."""
    m, n, k = 624, 45, 467  # 624 rows: 39 lines of f32, 78 of f64
    compilation = compiled(gemm_text(ty, "n", "n", shapes_of("n", "n", m, n, k)))
    tiled = compilation.tiled()
    assert path_of(tiled, m) == "panels" and "tile.line_lead %A" in tiled
    a, b, c = operands(rng, ty, "n", "n", m, n, k)
    want = expected(a, b, c, "n", "n", 1.5, -1.0)
    per_line = 64 // a.itemsize
    for a_offset, c_offset in [(0, 0), (1, 1), (per_line - 1, 0), (per_line // 2, 3)]:
        a_at, c_at = at_line_offset(a, a_offset), at_line_offset(c, c_offset)
        compilation["k"](1.5, a_at, b, -1.0, c_at, group_size=1)
        check(c_at, want, ty, k)


def test_row_panels_of_columns_off_lines_are_not_shifted() -> None:
    """611 rows of f32 are not a whole number of lines: columns start at different offsets,
    and no panel start would suit them all."""
    m, n, k = SHAPES["panels"]
    tiled = compiled(gemm_text("f32", "n", "n", shapes_of("n", "n", m, n, k))).tiled()
    assert path_of(tiled, m) == "panels" and "tile.line_lead" not in tiled


@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_line_lead_counts_the_elements_before_a_line_boundary(ty: str) -> None:
    element = ScalarType(ty)
    f = FunctionBuilder(
        "lead", x=MemRefType.packed(element, [DYNAMIC]), out=MemRefType.packed(INDEX, [1])
    )
    f.body.store(f.body.add(TileLineLead, source=f.args["x"]), f.args["out"], [0])
    lead = nanotc.compile(Program([f.finish()]))["lead"]
    buffer, out = np.zeros(64, DTYPES[ty]), np.zeros(1, np.int64)
    per_line = 64 // element.size
    for start in range(2 * per_line):
        view = buffer[start:]
        lead(view, out, group_size=1)
        assert out[0] == (-view.ctypes.data % 64) // element.size < per_line


@pytest.mark.parametrize("k", [576, 64])
def test_row_panel_tiles_prefetch_the_next_a_block(k: int) -> None:
    """W3's 3136 x 64 x K on Zen 3: each tile of a row panel's block asks for its share of
    the next block (the panel's next K block, after its last the next panel's first), in
    the K columns of its column of tiles, clamped within A; its K loop then prefetches no A
    (`fetched`). The masked tiles of the rows around the panels do neither."""
    m, n = 3136, 64
    tiled = compiled(gemm_text("f32", "n", "n", shapes_of("n", "n", m, n, k)), ZEN3).tiled()
    assert path_of(tiled, m) == "panels"
    panel = re.search(r"for (%\d+) = %\d+, %\d+, 16 \{\n\s*for (%\d+) = 0, \d+, (\d+) \{", tiled)
    assert panel
    row, pc, kc = panel.group(1), panel.group(2), int(panel.group(3))
    assert kc == min(k, 192)  # 576 in three blocks whose 16-row panels fill half of L1
    views = re.findall(r"tile\.prefetch %\d+ : memref<f32x16x(\d+),strided<1,3136>>", tiled)
    assert len(views) == 2 and len(set(views)) == 1  # the 16 x 6 tiles and the 16 x 4
    width, column_tiles = int(views[0]), -(-n // 6)
    assert width * column_tiles >= kc > (width - 1) * column_tiles
    following = re.search(rf"(%\d+) = arith\.add {row}, 16 : index", tiled)
    assert following
    if k > kc:
        next_k = re.search(rf"(%\d+) = arith\.add {pc}, {kc} : index", tiled)
        assert next_k
        assert f"yield {following.group(1)}, 0 : index, index" in tiled
        assert f"yield {row}, {next_k.group(1)} : index, index" in tiled
    else:
        assert "yield" not in tiled
        assert re.search(rf"= tile\.min {following.group(1)}, {m - 16} : index", tiled)
    assert re.search(rf"= tile\.min %\d+, {m - 16} : index", tiled)
    assert re.search(rf"= tile\.min %\d+, {k - width} : index", tiled)
    gemms = re.findall(r"tile\.gemm\.n\.n(\.fetched)? .* tile (\d+) x", tiled)
    assert sorted(set(gemms)) == [("", "8"), (".fetched", "16")]


@pytest.mark.parametrize("lines", [True, False], ids=["on-lines", "off-lines"])
def test_row_panels_of_targets_not_asking_for_the_next_block_prefetch_in_their_k_loops(
    lines: bool, rng
) -> None:
    """Where `prefetches_next_panel_block` is off (the AMX Xeon), the panels' tiles ask for
    nothing ahead and their K loops prefetch A themselves, over all of a K whose panel fits
    half of L2; on line-aligned panels (C's column stride a whole line) and on others."""
    m, n, k = (3136, 64, 576) if lines else (1000, 64, 300)
    target = replace(ZEN3, prefetches_next_panel_block=False)
    compilation = compiled(gemm_text("f32", "n", "n", shapes_of("n", "n", m, n, k)), target)
    tiled = compilation.tiled()
    assert path_of(tiled, m) == "panels"
    assert ("tile.line_lead" in tiled) is lines
    assert "tile.prefetch" not in tiled and ".fetched" not in tiled
    assert "prefetch A[row:row+16, k+" in compilation.nanokernels()
    assert re.search(rf"for %\d+ = 0, {k}, {k} \{{", tiled)  # one K block
    if runs_here(target):
        a, b, c = operands(rng, "f32", "n", "n", m, n, k)
        want = expected(a, b, c, "n", "n", 1.5, 0.5)
        compilation["k"](1.5, a, b, 0.5, c, group_size=1)
        check(c, want, "f32", k)


@pytest.mark.parametrize("target", runnable(ZEN3, "avx2", "generic"))
@pytest.mark.parametrize(
    ("ty", "shape"),
    [("f32", (1000, 13, 300)), ("f32", (2001, 50, 40)), ("f64", (501, 7, 700))],
    ids=str,
)
def test_row_panels_prefetching_the_next_block_match_numpy(
    ty: str, shape: tuple[int, int, int], target, rng
) -> None:
    """Row panels whose tiles ask for the next A block (one or several K blocks, the last
    panel partial, so the views are clamped) against numpy, on Zen 3's rules and on the
    other targets, whatever path they take there."""
    m, n, k = shape
    compilation = compiled(gemm_text(ty, "n", "n", shapes_of("n", "n", m, n, k)), target)
    tiled = compilation.tiled()
    if target is ZEN3:
        assert path_of(tiled, m) == "panels" and "tile.prefetch" in tiled
    a, b, c = operands(rng, ty, "n", "n", m, n, k)
    want = expected(a, b, c, "n", "n", 1.5, 0.5)
    compilation["k"](1.5, a, b, 0.5, c, group_size=1)
    check(c, want, ty, k)
