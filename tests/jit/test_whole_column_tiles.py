"""Memory-bound batch members whose tiles would loop over row blocks take one column of C at a
time, all of its rows (`register_tile.choose_whole_columns`, `gemm_tiles.member_tile_model`),
or, too tall for one column, pairs of columns (`register_tile.takes_column_pairs`): which
gemms, the assembly, what the tuner takes as the analytical choice, and the results against
numpy."""

from __future__ import annotations

import numpy as np
import pytest

import nanotc
from nanotc.codegen import asm
from nanotc.ir.core import walk
from nanotc.ir.instructions import Gemm
from nanotc.lowering import register_tile
from nanotc.lowering.prefetch import left_to_hardware
from nanotc.targets import get
from nanotc.tuning.tuner import gemm_sites

from .helpers import ZEN4, check_members, group_members, looped_members, needs_host, tile_shapes

WHOLE_COLUMNS = [
    ("f32", (128, 6, 9), None, "128 x 1"),
    ("f32", (160, 4, 4), None, "160 x 1"),
    ("f32", (136, 4, 4), None, "144 x 1"),  # the last vector masked to 8 rows
    ("f32", (96, 9, 4), None, "96 x 1"),
    ("f64", (80, 6, 4), None, "80 x 1"),
    ("f64", (96, 3, 4), None, "96 x 1"),
    ("f64", (128, 2, 4), None, "128 x 1"),  # 16 vectors: the column holds B, not A
    ("f32", (128, 6, 8), "bf16", "128 x 1"),  # vdpbf16ps: A loaded once per pair of K
    ("f32", (192, 2, 4), "bf16", "192 x 1"),
    ("f32", (160, 4, 4), "f16", "160 x 1"),
]
"""(type, M x N x K, type of A and B where not C's, the tile) of members under a quarter of
L1 on Zen 4 that `choose` tiles in loops over row blocks (f32 128x6x9: 32 x 6 four times
down each column)."""


@pytest.mark.parametrize(("ty", "shape", "inputs", "tile"), WHOLE_COLUMNS, ids=str)
def test_members_looping_over_rows_take_whole_columns(
    ty: str, shape: tuple[int, int, int], inputs: str | None, tile: str
) -> None:
    """One tile, left to the hardware prefetchers: no next views, no prefetch instruction,
    and a hot loop of full-width FMAs (dot products for bf16) that spills nothing, in a
    tile of up to 12 vectors."""
    text = group_members(ty, *shape, inputs)
    compilation = nanotc.compile(text, target=ZEN4, cache=False)
    assert tile_shapes(text) == {tile}
    assert "next a" not in compilation.tiled()
    code = compilation.assembly()
    assert "prefetch" not in code
    loops = asm.hot_loops(code, "k", "vdpbf16ps" if inputs == "bf16" else "vfmadd")
    assert loops and all(loop.registers("zmm") and not loop.stack_accesses() for loop in loops)


@pytest.mark.parametrize(
    ("ty", "shape", "inputs", "tiles"),
    [
        ("f32", (56, 9, 9), None, {"48 x 6", "16 x 6", "48 x 3", "16 x 3"}),  # no row loop
        ("f32", (100, 4, 4), None, {"80 x 4", "32 x 4"}),  # a tile and a tail: no loop
        ("f32", (128, 9, 9), None, {"32 x 9"}),  # 4.4 loads of A a line
        ("f32", (96, 9, 9), None, {"32 x 5", "32 x 4"}),  # 4.3 loads of A a line
        ("f32", (128, 6, 8), "f16", {"32 x 6"}),  # 4.7: f16 is loaded at every K
        ("f32", (496, 2, 2), None, {"128 x 2", "112 x 2"}),  # 31 vectors a column do not fit
        ("f32", (128, 16, 16), None, {"48 x 9", "32 x 9", "48 x 7", "32 x 7"}),  # 7.5 a line
    ],
    ids=[
        "no-row-loop",
        "tile-and-tail",
        "many-a-loads",
        "many-a-loads-2",
        "f16-many-a-loads",
        "too-tall",
        "many-a-loads-3",
    ],
)
def test_other_members_keep_the_analytical_tiles(
    ty: str, shape: tuple[int, int, int], inputs: str | None, tiles: set[str]
) -> None:
    assert tile_shapes(group_members(ty, *shape, inputs)) == tiles


@pytest.mark.parametrize(("ty", "shape", "inputs", "tile"), WHOLE_COLUMNS[:2], ids=str)
def test_members_from_cache_or_without_a_measured_rate_keep_their_row_loops(
    ty: str, shape: tuple[int, int, int], inputs: str | None, tile: str
) -> None:
    """A loop of members in one work-group (a batch in cache), and a target whose hardware
    prefetchers' rate is not measured (avx512), keep `choose`'s tiles."""
    assert tile not in tile_shapes(looped_members(ty, *shape))
    assert tile not in tile_shapes(group_members(ty, *shape), get("avx512"))


@pytest.mark.parametrize(
    ("ty", "shape", "tile", "streamed"),
    [("f64", (128, 4, 8), "128 x 1", True), ("f64", (128, 3, 9), "128 x 1", True),
     ("f32", (256, 6, 6), "256 x 1", True), ("f64", (192, 2, 4), "192 x 1", False),
     ("f32", (320, 4, 4), "320 x 1", False)],
    ids=str,
)  # fmt: skip
def test_larger_memory_bound_members_take_whole_columns(
    ty: str, shape: tuple[int, int, int], tile: str, streamed: bool
) -> None:
    """From a quarter of L1 (10-18 KiB here) a member that needs more bytes than it computes
    takes whole columns too. They stream the next members' lines, but where the bytes take
    4.5 times the compute or more (f64 192x2x4: 7.2, f32 320x4x4: 4.8; 3.2-4.3 for the
    others), which the hardware prefetchers are left to. Columns of 16 to 24 vectors hold
    B's broadcast and take A's vectors as FMA operands, spilling nothing."""
    text = group_members(ty, *shape)
    compilation = nanotc.compile(text, target=ZEN4, cache=False)
    assert tile_shapes(text) == {tile}
    assert ("next a %" in compilation.tiled()) is streamed
    code = compilation.assembly()
    assert ("prefetch" in code) is streamed
    loops = asm.hot_loops(code, "k")
    assert loops and all(loop.registers("zmm") and not loop.stack_accesses() for loop in loops)


def test_the_tuner_times_the_whole_column_as_the_analytical_choice() -> None:
    (site,) = gemm_sites(nanotc.load(group_members("f32", 128, 6, 9)).function("k"), ZEN4)
    assert site.analytical.tile == (8, 1)


@needs_host(ZEN4)
@pytest.mark.parametrize(
    ("ty", "shape", "inputs", "tile"),
    [
        *WHOLE_COLUMNS,
        ("f64", (128, 4, 8), None, "128 x 1"),
        ("f64", (192, 2, 4), None, "192 x 1"),
        ("f32", (320, 4, 4), None, "320 x 1"),
    ],
    ids=str,
)
def test_whole_column_tiles_compute_the_products(
    ty: str, shape: tuple[int, int, int], inputs: str | None, tile: str,
    rng: np.random.Generator,
) -> None:  # fmt: skip
    kernel = nanotc.compile(group_members(ty, *shape, inputs), target=ZEN4, cache=False)["k"]
    check_members(kernel, ty, shape, rng, batch=7, inputs=inputs)


TRANSPOSED = """func @k(%A: memref<f32x9x128x?>, %B: memref<f32x6x9x?>, %C: memref<f32x128x6x?>) {
  %g = group_id
  %a = subview %A[:,:,%g] : memref<f32x9x128x?>
  %b = subview %B[:,:,%g] : memref<f32x6x9x?>
  %c = subview %C[:,:,%g] : memref<f32x128x6x?>
  gemm.t.t 1.0, %a, %b, 1.0, %c : f32, memref<f32x9x128>, memref<f32x6x9>, f32, memref<f32x128x6>
}"""
"""C_g += A_g^T B_g^T, 128x6x9: A's rows are a stride of 9 apart (1.39x faster in a column
than in the streamed 32 x 6 tiles, from memory with numpy's placement)."""


def test_a_transposed_member_takes_whole_columns() -> None:
    assert tile_shapes(TRANSPOSED) == {"128 x 1"}


@needs_host(ZEN4)
def test_a_transposed_member_in_whole_columns_computes_the_product(
    rng: np.random.Generator,
) -> None:
    a = np.asfortranarray(rng.uniform(-1, 1, (9, 128, 5)).astype(np.float32))
    b = np.asfortranarray(rng.uniform(-1, 1, (6, 9, 5)).astype(np.float32))
    c = np.asfortranarray(rng.uniform(-1, 1, (128, 6, 5)).astype(np.float32))
    want = c + np.einsum("kmg,nkg->mng", a.astype(np.float64), b.astype(np.float64))
    nanotc.compile(TRANSPOSED, target=ZEN4, cache=False)["k"](a, b, c, group_size=5)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * 9)


def test_only_group_members_in_whole_columns_are_left_to_the_hardware() -> None:
    """f64 64x2x16 (9.3 KiB, bytes 5.5 times the compute) in a 64-row tile: a group's
    member is left to the hardware prefetchers, the same gemm on a loop's members (a batch
    in cache, not measured) is not."""
    for members, left in ((group_members, True), (looped_members, False)):
        program = nanotc.load(members("f64", 64, 2, 16))
        (gemm,) = [i for i in walk(program.function("k").body) if isinstance(i, Gemm)]
        assert left_to_hardware(gemm, ZEN4, tile_rows=64) is left


COLUMN_PAIRS = [
    ("f64", (256, 6, 6), {"32 x 2"}),
    ("f64", (256, 5, 4), {"32 x 2", "32 x 1"}),  # an odd N: the last column alone
    ("f64", (264, 5, 4), {"32 x 2", "8 x 2", "32 x 1", "8 x 1"}),  # 33 vectors: a tail of one
    ("f64", (260, 6, 4), {"32 x 2", "8 x 2"}),  # the last vector masked to 4 rows
    ("f64", (256, 12, 4), {"32 x 2"}),
]
"""(type, M x N x K, the tiles) of f64 memory-bound members too tall for one column (more
than 30 vectors) whose C is wide and K deep enough (`register_tile.takes_column_pairs`)."""


@pytest.mark.parametrize(("ty", "shape", "tiles"), COLUMN_PAIRS, ids=str)
def test_members_too_tall_for_a_column_take_pairs_of_columns(
    ty: str, shape: tuple[int, int, int], tiles: set[str]
) -> None:
    """Streamed (they are larger than a quarter of L1), with hot loops of full-width FMAs
    (a last vector of 4 f64 rows computes in ymm) that spill nothing."""
    text = group_members(ty, *shape)
    compilation = nanotc.compile(text, target=ZEN4, cache=False)
    assert tile_shapes(text) == tiles
    assert "next a %" in compilation.tiled()
    loops = asm.hot_loops(compilation.assembly(), "k", "vfmadd")
    assert any(loop.registers("zmm") for loop in loops)
    assert loops and not any(loop.stack_accesses() for loop in loops)


@pytest.mark.parametrize(
    ("ty", "shape", "inputs", "tiles"),
    [
        ("f64", (320, 4, 4), None, {"16 x 4"}),  # four columns
        ("f64", (248, 7, 3), None, {"32 x 4", "24 x 4", "32 x 3", "24 x 3"}),  # K = 3
        ("f32", (512, 6, 6), "bf16", {"32 x 6"}),  # not measured: 16-bit inputs
        ("f32", (512, 6, 6), "f16", {"32 x 6"}),
        ("f64", (192, 6, 4), None, {"192 x 1"}),  # a whole column fits
        ("f32", (512, 6, 6), None, {"32 x 6"}),  # pairs of f32 columns spilled
        ("f32", (512, 9, 4), None, {"32 x 9"}),
    ],
    ids=["narrow", "shallow", "bf16", "f16", "column-fits", "f32", "f32-2"],
)
def test_other_tall_members_keep_their_tiles(
    ty: str, shape: tuple[int, int, int], inputs: str | None, tiles: set[str]
) -> None:
    assert tile_shapes(group_members(ty, *shape, inputs)) == tiles


def test_column_pairs_start_at_five_columns_and_four_k_steps() -> None:
    assert register_tile.takes_column_pairs(5, 4)
    assert register_tile.takes_column_pairs(16, 9)
    assert not register_tile.takes_column_pairs(4, 8)
    assert not register_tile.takes_column_pairs(9, 3)
    assert not register_tile.takes_column_pairs(None, 8)
    assert not register_tile.takes_column_pairs(9, None)


def test_column_pairs_are_only_for_members_from_memory() -> None:
    """A loop's members (a batch in cache) keep `choose`'s tiles."""
    assert tile_shapes(looped_members("f64", 256, 6, 6)) == {"16 x 6"}


@needs_host(ZEN4)
@pytest.mark.parametrize(("ty", "shape", "tiles"), COLUMN_PAIRS, ids=str)
@pytest.mark.parametrize("alpha", [1.0, -0.5])
def test_column_pair_tiles_compute_the_products(
    ty: str, shape: tuple[int, int, int], tiles: set[str], alpha: float,
    rng: np.random.Generator,
) -> None:  # fmt: skip
    text = group_members(ty, *shape, alpha=alpha)
    kernel = nanotc.compile(text, target=ZEN4, cache=False)["k"]
    for _ in range(2):  # binding, then the known layouts
        check_members(kernel, ty, shape, rng, batch=7, alpha=alpha)
