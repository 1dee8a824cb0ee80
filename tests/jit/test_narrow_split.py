"""A small gemm of a short K gives the narrow last vector of a tile as tall as C a tile of its
own where the target computes it on narrower FMA units (`register_tile.without_narrow_vector`,
Zen 4): which tiles split, which keep their vector, what lowering and the tuner take, the
assembly of the split tiles and their results against numpy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import nanotc
from nanotc.codegen import asm
from nanotc.ir.types import ScalarType
from nanotc.lowering.register_tile import (
    NARROW_SPLIT_MAX_K,
    NARROW_SPLIT_MIN_VECTORS,
    RegisterTile,
    choose,
    without_narrow_vector,
)
from nanotc.targets import get
from nanotc.tuning.tuner import gemm_sites

from .helpers import (
    ZEN4,
    check_members,
    group_members,
    looped_members,
    runs_here,
    tile_shapes,
)

F32, F64 = ScalarType.F32, ScalarType.F64


def tile(mv: int, nr: int, element: ScalarType) -> RegisterTile:
    return RegisterTile(mv, nr, ZEN4.lanes(element))


SPLIT = [
    (F32, (56, 9, 9), (3, 6)), (F32, (72, 9, 9), (4, 5)), (F32, (52, 9, 9), (3, 6)),
    (F32, (68, 9, 6), (4, 5)), (F32, (56, 9, NARROW_SPLIT_MAX_K), (3, 6)),
    (F64, (44, 7, 8), (5, 4)), (F64, (34, 12, 11), (4, 4)), (F64, (28, 5, 6), (3, 6)),
]  # fmt: skip


@pytest.mark.parametrize(("element", "shape", "split"), SPLIT, ids=str)
def test_a_tall_tile_gives_up_its_narrow_last_vector(
    element: ScalarType, shape: tuple[int, int, int], split: tuple[int, int]
) -> None:
    """The model's tile is one vector taller than the split one, whose last rows (8 or
    fewer f32, 4 or fewer f64) Zen 4's 256-bit units compute alone."""
    mv, nr = split
    assert ZEN4.narrow_fma_pays
    kept = choose(ZEN4, element, *shape, small_gemm_rules=False)
    assert (kept.mv, kept.nr) == (mv + 1, nr)
    chosen = choose(ZEN4, element, *shape)
    assert (chosen.mv, chosen.nr) == split


@pytest.mark.parametrize(
    ("element", "shape", "model"),
    [(F32, (56, 9, NARROW_SPLIT_MAX_K + 4), (4, 6)),  # a longer K
     (F32, (40, 9, 9), (3, 6)), (F64, (20, 12, 5), (3, 6)),  # two full vectors would be left
     (F32, (60, 9, 9), (4, 6)),  # 12 last rows: a full-width (masked) vector
     (F32, (48, 9, 9), (3, 9))],  # whole vectors
    ids=str,
)  # fmt: skip
def test_other_tiles_keep_their_vectors(
    element: ScalarType, shape: tuple[int, int, int], model: tuple[int, int]
) -> None:
    chosen = choose(ZEN4, element, *shape)
    assert (chosen.mv, chosen.nr) == model
    assert without_narrow_vector(chosen, ZEN4, element, shape[0], shape[2]) == chosen


def test_the_split_needs_narrow_fma_units_the_gemm_rules_and_a_small_gemm() -> None:
    """AVX-512 without Zen 4's rates computes the last vector at full width; batch-reduce
    and mixed-type tiles (`small_gemm_rules` off) and gemms beyond a quarter of L1 keep the
    model's tile."""
    generic = get("avx512")
    assert not generic.narrow_fma_pays
    assert (choose(generic, F32, 56, 9, 9).mv, choose(generic, F32, 56, 9, 9).nr) == (4, 6)
    assert choose(ZEN4, F32, 56, 9, 9, small_gemm_rules=False) == tile(4, 6, F32)
    assert NARROW_SPLIT_MIN_VECTORS == 3
    large = choose(ZEN4, F32, 56, 120, 9)  # A, B and C: 11 KiB
    assert large.mv * large.lanes >= 56
    # a tile shorter than C: its rows tile C whole
    assert without_narrow_vector(tile(4, 6, F32), ZEN4, F32, 120, 9) == tile(4, 6, F32)


def test_lowering_and_the_tuner_take_the_split_tiles() -> None:
    """Members from memory and from a loop (a batch in cache) both gain (1.08-1.11x and
    1.16-1.19x on f32 56x9x9): both take the 48-row tiles and the 8-row ones beside them."""
    want = {"48 x 6", "48 x 3", "16 x 6", "16 x 3"}
    assert tile_shapes(group_members("f32", 56, 9, 9)) == want
    assert tile_shapes(looped_members("f32", 56, 9, 9)) == want
    (site,) = gemm_sites(nanotc.load(group_members("f32", 56, 9, 9)).function("k"), ZEN4)
    assert site.analytical.tile == (3, 6)


@pytest.mark.parametrize(("ty", "shape"), [("f32", (56, 9, 9)), ("f64", (44, 7, 8))], ids=str)
def test_split_tiles_run_full_and_narrow_fmas_and_spill_nothing(
    ty: str, shape: tuple[int, int, int]
) -> None:
    """The tall tiles' K loops multiply zmm vectors; the narrow rows' loops ymm ones (on
    their 256-bit units); no loop touches a stack slot."""
    assembly = nanotc.compile(group_members(ty, *shape), target=ZEN4, cache=False).assembly()
    loops = asm.hot_loops(assembly, "k")
    fmas = [[i for i in loop.instructions if i.startswith("vfmadd")] for loop in loops]
    assert len(loops) == 4
    for loop in loops:
        assert loop.stack_accesses() == [], f"{loop.label} spills"
    full = [f for f in fmas if all("%zmm" in i for i in f)]
    narrow = [f for f in fmas if all("%ymm" in i for i in f)]
    assert len(full) == 2 and len(narrow) == 2


@pytest.mark.skipif(not runs_here(ZEN4), reason="this host cannot run Zen 4 code")
@pytest.mark.parametrize(
    ("ty", "shape"), [("f32", (56, 9, 9)), ("f32", (72, 9, 9)), ("f64", (44, 7, 8)),
                      ("f64", (34, 12, 11))], ids=str,
)  # fmt: skip
@pytest.mark.parametrize("members", [group_members, looped_members], ids=["group", "loop"])
def test_split_tiles_compute_the_products(
    ty: str, shape: tuple[int, int, int], members: Callable[..., str], rng: np.random.Generator
) -> None:
    kernel = nanotc.compile(members(ty, *shape), target=ZEN4, cache=False)["k"]
    check_members(
        kernel, ty, shape, rng, batch=6, group_size=None if members is group_members else 1
    )
