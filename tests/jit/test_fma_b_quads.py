"""One-vector f32 FMA tiles whose FMAs outrun the load ports (Zen 4's ymm tiles) take B's
elements of their even columns four at a time, from one 128-bit load, each picked by an
in-lane shuffle (`lowering.nanokernel.fma_b_quads`): which tiles do, their listing, their
assembly and their results against numpy."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import nanotc
from nanotc.codegen import asm
from nanotc.targets import Target, get

from .helpers import ZEN4, check_members, group_members, looped_members, runs_here

QUADS = "vbroadcast128 B[k:k+4"


def listing(text: str, target: Target = ZEN4) -> str:
    return nanotc.compile(text, target=target, cache=False).nanokernels()


def transposed_b_members(m: int, n: int, k: int) -> str:
    """`looped_members` with B stored as its transpose (B's K runs along its rows)."""
    return (
        looped_members("f32", m, n, k)
        .replace("gemm.n.n", "gemm.n.t")
        .replace(f"memref<f32x{k}x{n}x?>", f"memref<f32x{n}x{k}x?>")
        .replace(f"memref<f32x{k}x{n}>", f"memref<f32x{n}x{k}>")
    )


@pytest.mark.parametrize("shape", [(8, 8, 8), (8, 5, 13), (4, 8, 8), (8, 16, 8), (6, 9, 4)],
                         ids=str)  # fmt: skip
def test_ymm_and_xmm_tiles_of_a_loop_shuffle_b_quads(shape: tuple[int, int, int]) -> None:
    text = listing(looped_members("f32", *shape))
    assert QUADS in text
    assert "b = vpermilps q0" in text and "b = vbroadcast B[k, col+1]" in text


@pytest.mark.parametrize(
    ("text", "target"),
    [(group_members("f32", 8, 8, 8), ZEN4),  # a member from memory
     (looped_members("f32", 16, 16, 16), ZEN4),  # zmm FMAs: one a cycle
     (looped_members("f64", 4, 8, 8), ZEN4),  # f64
     (looped_members("f32", 8, 8, 3), ZEN4),  # no whole quad of K
     (looped_members("f32", 8, 8, 24), ZEN4),  # a K loop
     (transposed_b_members(8, 8, 8), ZEN4),  # B's K strided
     (looped_members("f32", 8, 8, 8), get("avx512")),  # load rate not measured
     (looped_members("f32", 8, 8, 8), replace(ZEN4, broadcast_loads_per_cycle=3.0))],
    ids=["group", "zmm", "f64", "k3", "k-loop", "b.t", "avx512", "three-loads"],
)  # fmt: skip
def test_other_tiles_broadcast_b(text: str, target: Target) -> None:
    assert QUADS not in listing(text, target)


@pytest.mark.parametrize(("beta", "quads"), [("1.0", True), ("%beta", False)])
def test_quads_fit_the_registers_beside_the_accumulators(beta: str, quads: bool) -> None:
    """An 8 x 20 tile runs its columns 8 at a time (A resident) but with a run-time beta all
    20 at once, whose 10 quads would not fit beside them."""
    text = f"""func @k(%A: memref<f32x8x8>, %B: memref<f32x8x20>, %C: memref<f32x8x20>, %beta: f32) {{
  gemm.n.n 1.0, %A, %B, {beta}, %C : f32, memref<f32x8x8>, memref<f32x8x20>, f32, memref<f32x8x20>
}}"""
    assert (QUADS in listing(text)) is quads


def test_the_rate_of_narrow_fmas() -> None:
    assert ZEN4.fmas_per_cycle(256) == 2 and ZEN4.fmas_per_cycle(128) == 2
    assert ZEN4.fmas_per_cycle(512) == 1
    assert get("avx512").fmas_per_cycle(256) == get("avx512").fma_per_cycle


def test_an_8_cube_tile_shuffles_half_its_broadcasts_and_spills_nothing() -> None:
    """Four even columns, two quads of K each: eight 128-bit loads and 32 in-lane shuffles
    beside the 64 ymm FMAs, whose other 32 broadcasts stay broadcast loads (memory operands,
    but where an FMA takes C's column as its memory operand)."""
    assembly = nanotc.compile(looped_members("f32", 8, 8, 8), target=ZEN4, cache=False).assembly()
    (loop,) = asm.hot_loops(assembly, "k")
    fmas = [i for i in loop.instructions if i.startswith("vfmadd")]
    assert len(fmas) == 64 and all("%ymm" in i and "%zmm" not in i for i in fmas)
    assert sum("{1to8}" in i for i in fmas) + loop.count("vbroadcastss") == 32
    assert loop.count("vpermilps") + loop.count("vshufps") == 32
    assert loop.count("vbroadcastf128") + loop.count("vbroadcastf32x4") == 8
    assert loop.stack_accesses() == []


@pytest.mark.skipif(not runs_here(ZEN4), reason="this host cannot run Zen 4 code")
@pytest.mark.parametrize(
    "shape", [(8, 8, 8), (8, 5, 13), (4, 8, 8), (8, 16, 8), (3, 7, 10), (8, 3, 4)], ids=str
)
def test_b_quads_compute_the_products(shape: tuple[int, int, int], rng: np.random.Generator
                                      ) -> None:  # fmt: skip
    """Odd column counts, a K past the last quad, A resident in column groups (8x16x8)."""
    compilation = nanotc.compile(looped_members("f32", *shape), target=ZEN4, cache=False)
    assert QUADS in compilation.nanokernels()
    check_members(compilation["k"], "f32", shape, rng, batch=5, group_size=1)


@pytest.mark.skipif(not runs_here(ZEN4), reason="this host cannot run Zen 4 code")
@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 0.0), (0.5, 1.0), (-2.0, 0.25)], ids=str)
def test_b_quads_with_alpha_and_beta(alpha: float, beta: float, rng: np.random.Generator) -> None:
    """An 8 x 8 x 8 gemm on its own (all of C, K unrolled): beta 0 never reads C."""
    text = f"""func @k(%A: memref<f32x8x8>, %B: memref<f32x8x8>, %C: memref<f32x8x8>) {{
  gemm.n.n {alpha!r}, %A, %B, {beta!r}, %C : f32, memref<f32x8x8>, memref<f32x8x8>, f32, memref<f32x8x8>
}}"""
    compilation = nanotc.compile(text, target=ZEN4, cache=False)
    assert QUADS in compilation.nanokernels()
    a, b = (np.asfortranarray(rng.uniform(-1, 1, (8, 8)).astype(np.float32)) for _ in "ab")
    c = np.full((8, 8), np.nan if beta == 0 else 0.5, np.float32, order="F")
    want = alpha * (a.astype(np.float64) @ b) + (0 if beta == 0 else beta * c.astype(np.float64))
    compilation["k"](a, b, c, group_size=1)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * 8)
