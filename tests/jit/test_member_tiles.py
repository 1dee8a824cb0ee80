"""Batch members picked by the group id whose C's rows are one whole vector take column
tiles of at most 8 on Zen 4 (`gemm_tiles.member_tile_model`, the target's
`member_tile_columns`): which gemms, what the tuner takes as the analytical choice, and the
results against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import nanotc
from nanotc.lowering.gemm_tiles import MEMBER_NARROW_K
from nanotc.targets import Target, get
from nanotc.tuning.tuner import gemm_sites

from .helpers import ZEN4, check_members, group_members, looped_members, runs_here

COLUMNS = ZEN4.member_tile_columns


def widths(text: str, target: Target = ZEN4) -> list[int]:
    """The column counts of the kernel's register tiles."""
    tiled = nanotc.compile(text, target=target, cache=False).tiled()
    return sorted(int(line.split(" tile ")[1].split(" x ")[1].split(" ")[0])
                  for line in tiled.splitlines() if "tile.gemm" in line)  # fmt: skip


@pytest.mark.parametrize(
    ("ty", "shape"),
    [("f32", (16, 12, 16)), ("f32", (16, 9, 16)), ("f32", (16, 16, 16)), ("f32", (16, 32, 20)),
     ("f64", (8, 12, 16)), ("f64", (8, 14, 24))],
    ids=str,
)  # fmt: skip
def test_members_of_one_vector_of_rows_take_tiles_of_at_most_8_columns(
    ty: str, shape: tuple[int, int, int]
) -> None:
    assert COLUMNS == 8 and MEMBER_NARROW_K == 16
    assert max(widths(group_members(ty, *shape))) <= COLUMNS
    assert max(widths(looped_members(ty, *shape))) > COLUMNS  # from cache: one tile
    # not measured elsewhere: AVX-512 without Zen 4's rates keeps one tile
    assert get("avx512").member_tile_columns == 0
    assert max(widths(group_members(ty, *shape), get("avx512"))) > COLUMNS


@pytest.mark.parametrize(
    ("ty", "shape", "inputs"),
    [("f32", (16, 12, 12), None), ("f32", (12, 12, 16), None), ("f32", (32, 12, 16), None),
     ("f32", (16, 12, 16), "bf16")],
    ids=["short-k", "part-of-a-vector", "two-vectors", "bf16"],
)  # fmt: skip
def test_other_members_keep_the_tiles_of_a_batch_in_cache(
    ty: str, shape: tuple[int, int, int], inputs: str | None
) -> None:
    """K below 16, fewer rows than a vector (0.98-1.01x there), several vectors, and bf16
    inputs (not measured) take the tiles the same gemm takes in a loop."""
    assert widths(group_members(ty, *shape, inputs)) == widths(looped_members(ty, *shape, inputs))


def test_the_tuner_times_the_member_tiles_as_the_analytical_choice() -> None:
    (site,) = gemm_sites(nanotc.load(group_members("f32", 16, 12, 16)).function("k"), ZEN4)
    assert site.analytical.tile is not None
    assert site.analytical.tile[1] <= COLUMNS


@pytest.mark.skipif(not runs_here(ZEN4), reason="this host cannot run Zen 4 code")
@pytest.mark.parametrize(
    ("ty", "shape"), [("f32", (16, 12, 16)), ("f32", (16, 9, 20)), ("f64", (8, 12, 16))], ids=str
)
def test_member_tiles_compute_the_products(
    ty: str, shape: tuple[int, int, int], rng: np.random.Generator
) -> None:
    kernel = nanotc.compile(group_members(ty, *shape), target=ZEN4, cache=False)["k"]
    check_members(kernel, ty, shape, rng, batch=7)
