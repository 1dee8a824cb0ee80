"""Small gemms of a short K avoid crowded register tiles where the target measured the limit
(`register_tile.crowded`, Zen 4's `small_gemm_step_fmas`): which tiles count as crowded,
which tiles the model then takes instead, and their results against numpy."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import nanotc
from nanotc.codegen import asm
from nanotc.ir.types import ScalarType
from nanotc.lowering.choices import BATCH, DIRECT, GemmSignature, takes_small_gemm_rules
from nanotc.lowering.register_tile import CROWDED_MAX_K, RegisterTile, choose, crowded
from nanotc.targets import get

from .helpers import ZEN4, check_members, group_members, runs_here, tile_shapes

F32, F64 = ScalarType.F32, ScalarType.F64
UNLIMITED = replace(ZEN4, name="zen4-unlimited", small_gemm_step_fmas=0)
"""Zen 4 as it was described before the limit was measured."""


def tile(mv: int, nr: int, element: ScalarType) -> RegisterTile:
    return RegisterTile(mv, nr, ZEN4.lanes(element))


def test_a_step_of_more_full_width_fmas_than_the_limit_is_crowded() -> None:
    """f64 16^3: 16 x 8 holds 16 FMAs a step, 16 x 6 12 (the limit) and 16 x 4 8; a tile of
    several vectors and two columns counts as crowded too."""
    assert ZEN4.small_gemm_step_fmas == 12
    shape = (16, 16, 16)
    assert crowded(tile(2, 8, F64), ZEN4, F64, shape)
    assert not crowded(tile(2, 6, F64), ZEN4, F64, shape)
    assert not crowded(tile(2, 4, F64), ZEN4, F64, shape)
    assert crowded(tile(2, 2, F64), ZEN4, F64, shape)
    assert not crowded(tile(1, 2, F64), ZEN4, F64, (8, 8, 8))  # one vector: never
    assert not crowded(tile(1, 22, F64), ZEN4, F64, (7, 22, 9))
    # only the columns C has: a 16 x 30 tile on a C of 8 columns holds 8 FMAs a step
    assert not crowded(tile(1, 30, F32), ZEN4, F32, (16, 8, 16))


def test_a_last_vector_computed_narrow_in_a_k_loop_does_not_count() -> None:
    """f32 20 rows: one zmm and a last vector of 4 rows that Zen 4's 256-bit units compute
    alone, in a K loop. Unrolled (one tile over all of C, K up to 16) it computes at full
    width, and then it counts."""
    looped = (20, 9, 20)
    assert not crowded(tile(2, 9, F32), ZEN4, F32, looped)  # 9 zmm FMAs a step
    assert crowded(tile(2, 9, F32), ZEN4, F32, (20, 9, 16))  # unrolled: 18
    assert crowded(tile(3, 6, F32), ZEN4, F32, (41, 6, 20))  # 9 last rows: wider than ymm
    assert not crowded(tile(3, 6, F32), ZEN4, F32, (36, 6, 20))  # 4 last rows: xmm


def test_nothing_is_crowded_beyond_a_short_k_or_without_a_measured_limit() -> None:
    long_k = (16, 16, CROWDED_MAX_K + 1)
    assert not crowded(tile(2, 8, F64), ZEN4, F64, long_k)
    assert not crowded(tile(2, 8, F64), ZEN4, F64, (16, 16, None))
    assert get("avx512").small_gemm_step_fmas == 0
    assert not crowded(tile(2, 8, F64), UNLIMITED, F64, (16, 16, 16))


def test_only_fma_tiles_that_store_c_after_each_gemm_take_small_gemm_rules() -> None:
    """bf16 dot tiles (inputs of another type) and batch-reduce tiles (C in registers over
    the whole batch) keep the model's order."""
    f64, bf16 = ("f64",) * 3, ("bf16", "bf16", "f32")
    shape = (16, 16, 16)
    assert takes_small_gemm_rules(GemmSignature(DIRECT, f64, ("n", "n"), shape, 0))
    assert not takes_small_gemm_rules(GemmSignature(DIRECT, bf16, ("n", "n"), shape, 0))
    assert not takes_small_gemm_rules(GemmSignature(BATCH, f64, ("n", "n"), shape, 0))
    kept = choose(ZEN4, F64, *shape, small_gemm_rules=False)
    assert (kept.mv, kept.nr) == (2, 8)


@pytest.mark.parametrize(
    ("element", "shape", "before", "after"),
    [(F64, (16, 16, 16), (2, 8), (2, 6)), (F64, (20, 9, 20), (3, 9), (3, 6)),
     (F64, (12, 12, 12), (2, 14), (2, 6)), (F64, (24, 16, 10), (3, 8), (3, 4)),
     (F32, (48, 12, 8), (3, 6), (3, 4))],
    ids=str,
)  # fmt: skip
def test_small_gemms_take_tiles_that_are_not_crowded(
    element: ScalarType, shape: tuple[int, int, int], before: tuple[int, int],
    after: tuple[int, int],
) -> None:  # fmt: skip
    """Among the tiles the estimate cannot tell apart, Zen 4 takes one that is not crowded
    (still as tall as C); without the limit it took the larger tile."""
    generic = choose(UNLIMITED, element, *shape)
    zen4 = choose(ZEN4, element, *shape)
    assert (generic.mv, generic.nr) == before
    assert (zen4.mv, zen4.nr) == after


@pytest.mark.parametrize(
    ("element", "shape"),
    [(F32, (60, 9, 9)), (F32, (35, 9, 35)), (F64, (56, 9, 9)), (F32, (32, 32, 32)),
     (F32, (57, 5, 11)), (F32, (51, 10, 15))],
    ids=str,
)  # fmt: skip
def test_tall_tiles_k_beyond_the_limit_and_larger_gemms_keep_their_tiles(
    element: ScalarType, shape: tuple[int, int, int]
) -> None:
    """A crowded tile as tall as C is kept where only shorter or narrower tiles avoid the
    crowding (f32 60x9x9, 57x5x11: A read whole from memory counts for more), or whose
    remainder tile is crowded (f32 51x10x15: 64 x 4 would leave 64 x 2); K of 35; and gemms
    beyond a quarter of L1."""
    generic = choose(UNLIMITED, element, *shape)
    zen4 = choose(ZEN4, element, *shape)
    assert (zen4.mv, zen4.nr) == (generic.mv, generic.nr)


def batch_reduce(ty: str, m: int, n: int, k: int) -> str:
    a, b, c = f"memref<{ty}x{m}x{k}>", f"memref<{ty}x{k}x{n}>", f"memref<{ty}x{m}x{n}>"
    return f"""func @k(%A: memref<{ty}x{m}x{k}x?>, %B: memref<{ty}x{k}x{n}x?>, %C: {c}) {{
  %count = size %A[2] : memref<{ty}x{m}x{k}x?>
  for %i = 0, %count {{
    %a = subview %A[:,:,%i] : memref<{ty}x{m}x{k}x?>
    %b = subview %B[:,:,%i] : memref<{ty}x{k}x{n}x?>
    gemm.n.n 1.0, %a, %b, 1.0, %C : {ty}, {a}, {b}, {ty}, {c}
  }}
}}"""


def test_batch_reduce_tiles_keep_the_model_order() -> None:
    assert tile_shapes(batch_reduce("f64", 16, 16, 16)) == {"16 x 8"}


UNCROWDED = [
    ("f64", (16, 16, 16), {"16 x 6", "16 x 4"}), ("f64", (20, 9, 20), {"24 x 6", "24 x 3"}),
    ("f64", (12, 12, 12), {"16 x 6"}), ("f64", (23, 7, 11), {"24 x 4", "24 x 3"}),
    ("f32", (48, 12, 8), {"48 x 4"}),
]  # fmt: skip


@pytest.mark.parametrize(("ty", "shape", "tiles"), UNCROWDED, ids=str)
def test_uncrowded_tiles_run_zmm_fmas_and_spill_nothing(
    ty: str, shape: tuple[int, int, int], tiles: set[str]
) -> None:
    """Each K loop of the new tiles (compiled for Zen 4 on any host) multiplies full zmm
    vectors of A and touches no stack slot."""
    assembly = nanotc.compile(
        group_members(ty, *shape, alpha=1.5), target=ZEN4, cache=False
    ).assembly()
    loops = asm.hot_loops(assembly, "k")
    assert len(loops) >= len(tiles)
    for loop in loops:
        assert loop.stack_accesses() == [], f"{loop.label} spills"
        assert any("%zmm" in i for i in loop.instructions if i.startswith("vfmadd"))


@pytest.mark.skipif(not runs_here(ZEN4), reason="this host cannot run Zen 4 code")
@pytest.mark.parametrize(
    ("ty", "shape", "tiles"),
    UNCROWDED,
    ids=str,
)
def test_batches_of_uncrowded_tiles_compute_the_products(
    ty: str, shape: tuple[int, int, int], tiles: set[str], rng: np.random.Generator
) -> None:
    text = group_members(ty, *shape, alpha=1.5)
    assert tile_shapes(text) == tiles
    kernel = nanotc.compile(text, target=ZEN4, cache=False)["k"]
    check_members(kernel, ty, shape, rng, batch=5, alpha=1.5)
