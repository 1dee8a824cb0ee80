"""gemms into bf16 and f16 C (f32 arithmetic, rounded once on store): their tiles compute
alpha op(A) op(B) into f32 scratch, then C := scratch + beta C (`lowering.gemm.
through_f32_scratch`), atomically for an atomic gemm, in panels where C's size is known at
run time only. Which gemms take it (on targets without AMX tiles: the structure is checked
on `avx512`, since an AMX host's bf16 gemms take tiles, tests/jit/test_amx.py), and their
results against the reference evaluator on every target this machine runs, for transposes,
alpha and beta (beta 0 over NaN), batch members, views of C, and run-time sizes over several
panels with tails."""

from __future__ import annotations

import numpy as np
import pytest

import nanotc
from nanotc import targets
from nanotc.lowering import gemm as gemm_lowering

from .helpers import (
    TARGETS,
    assert_match,
    check,
    clone,
    compiled,
    fill_garbage,
    random_array,
    run_reference,
)

SIXTEEN = ("bf16", "f16")
VECTOR_TILES = "avx512"  # bf16 gemms in vector tiles whatever the host (no AMX)


def gemm_text(out: str, m: int, n: int, k: int, trans: str = "nn", alpha: str = "%alpha",
              beta: str = "%beta", flags: str = "", rows: str = f"{0}") -> str:  # fmt: skip
    """C := alpha op(A) op(B) + beta C, A and B bf16, C of type `out` (`rows`: its static
    row count, or ? for a run-time one)."""
    ta, tb = trans
    a = f"memref<bf16x{k}x{m}>" if ta == "t" else f"memref<bf16x{m}x{k}>"
    b = f"memref<bf16x{n}x{k}>" if tb == "t" else f"memref<bf16x{k}x{n}>"
    c = f"memref<{out}x{rows if rows != '0' else m}x{n}>"
    return f"""func @k(%alpha: f32, %A: {a}, %B: {b}, %beta: f32, %C: {c}) {{
  gemm.{ta}.{tb}{flags} {alpha}, %A, %B, {beta}, %C : f32, {a}, {b}, f32, {c}
}}"""


@pytest.mark.parametrize("out", SIXTEEN)
def test_16_bit_outputs_are_tiled_into_f32_scratch(out: str) -> None:
    tiled = compiled(gemm_text(out, 64, 64, 64), VECTOR_TILES).tiled()
    assert "alloca -> memref<f32x64x64>" in tiled and "tile.gemm" in tiled
    assert ", 0.0, %" in tiled  # the tiles do not read the scratch
    (update,) = [line for line in tiled.splitlines() if "axpby" in line]
    assert update.strip().startswith("axpby.n 1.0,") and ", %beta, %C" in update
    zero_beta = compiled(gemm_text(out, 64, 64, 64, beta="0.0"), VECTOR_TILES).tiled()
    assert "axpby.n 1.0," in zero_beta and ", 0.0, %C" in zero_beta  # C is not read


def test_atomic_16_bit_outputs_update_c_atomically_from_scratch() -> None:
    """The work-groups' updates of C stay atomic: only the scratch is private."""
    atomic = gemm_text("bf16", 32, 8, 16, beta="1.0", flags=".atomic")
    tiled = compiled(atomic, VECTOR_TILES).tiled()
    assert "tile.gemm" in tiled and "alloca -> memref<f32x32x8>" in tiled
    assert "axpby.n.atomic 1.0," in tiled


def test_run_time_16_bit_outputs_are_tiled_in_panels() -> None:
    tiled = compiled(gemm_text("bf16", 32, 8, 16, rows="?"), VECTOR_TILES).tiled()
    rows, cols = gemm_lowering.PANEL_ROWS, gemm_lowering.PANEL_COLUMNS
    assert f"alloca -> memref<f32x{rows * cols}>" in tiled and "tile.gemm" in tiled
    assert f"for %2 = 0, 8, {cols}" in tiled and f"tile.min %4, {rows}" in tiled


CASES = [
    ((64, 64, 64), "nn", "%alpha", "%beta"),
    ((35, 9, 35), "tn", "%alpha", "%beta"),
    ((20, 9, 20), "nt", "1.0", "1.0"),
    ((17, 5, 3), "tt", "%alpha", "0.0"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("out", SIXTEEN)
@pytest.mark.parametrize(("shape", "trans", "alpha", "beta"), CASES, ids=str)
def test_16_bit_outputs_match_the_reference(shape: tuple[int, int, int], trans: str,
                                            alpha: str, beta: str, out: str, target: str,
                                            rng) -> None:  # fmt: skip
    m, n, k = shape
    ta, tb = trans
    a = random_array(rng, (k, m) if ta == "t" else (m, k), "bf16")
    b = random_array(rng, (n, k) if tb == "t" else (k, n), "bf16")
    c = random_array(rng, (m, n), out)
    if beta == "0.0":
        fill_garbage(c)  # never read
    text = gemm_text(out, m, n, k, trans, alpha, beta)
    check(text, [np.float32(1.5), a, b, np.float32(-0.5), c], target=target, depth=k)


@pytest.mark.parametrize("target", TARGETS)
def test_run_time_beta_0_does_not_read_a_16_bit_c(target: str, rng) -> None:
    a, b = random_array(rng, (24, 8), "bf16"), random_array(rng, (8, 6), "bf16")
    c = fill_garbage(random_array(rng, (24, 6), "bf16"))
    check(gemm_text("bf16", 24, 6, 8), [np.float32(2.0), a, b, np.float32(0.0), c],
          target=target, depth=8)  # fmt: skip


BATCH = """func @k(%A: memref<bf16x16x16x?>, %B: memref<bf16x16x16x?>, %C: memref<bf16x20x16x?>) {
  %g = group_id
  %a = subview %A[:,:,%g] : memref<bf16x16x16x?>
  %b = subview %B[:,:,%g] : memref<bf16x16x16x?>
  %c = subview %C[2:16,:,%g] : memref<bf16x20x16x?>
  gemm.n.n 1.0, %a, %b, 1.0, %c : f32, memref<bf16x16x16>, memref<bf16x16x16>, f32, memref<bf16x16x16,strided<1,20>>
}"""
"""A bf16 C_g += A_g B_g per work-group, C_g rows 2-17 of a 20-row member (a strided view)."""


@pytest.mark.parametrize("target", TARGETS)
def test_batch_members_with_16_bit_outputs(target: str, rng) -> None:
    a, b = random_array(rng, (16, 16, 5), "bf16"), random_array(rng, (16, 16, 5), "bf16")
    c = random_array(rng, (20, 16, 5), "bf16")
    tiles = "tile.amx_small_gemm" if targets.get(target).amx else "tile.gemm"
    assert tiles in compiled(BATCH, target).tiled()
    check(BATCH, [a, b, c], group_size=5, target=target, num_threads=2, depth=16)


def dynamic_text(out: str, trans: str) -> str:
    """C := alpha op(A) op(B) + beta C with every size known at run time only."""
    ta, tb = trans
    a, b, c = "memref<bf16x?x?>", "memref<bf16x?x?>", f"memref<{out}x?x?,strided<1,?>>"
    return f"""func @k(%alpha: f32, %A: {a}, %B: {b}, %beta: f32, %C: {c}) {{
  gemm.{ta}.{tb} %alpha, %A, %B, %beta, %C : f32, {a}, {b}, f32, {c}
}}"""


def dynamic_arguments(rng, out: str, shape: tuple[int, int, int], trans: str, beta: float
                      ) -> list:  # fmt: skip
    """A, B and a view of C (rows 3.. of a larger array), NaN in C where beta is 0."""
    m, n, k = shape
    ta, tb = trans
    a = random_array(rng, (k, m) if ta == "t" else (m, k), "bf16")
    b = random_array(rng, (n, k) if tb == "t" else (k, n), "bf16")
    c = random_array(rng, (m + 5, n), out)[3 : 3 + m]
    if beta == 0:
        fill_garbage(c)
    return [np.float32(1.5), a, b, np.float32(beta), c]


PANEL_CASES = [
    ((50, 23, 7), "nn", -0.5),
    ((49, 21, 9), "tn", 0.0),
    ((24, 11, 5), "nt", 1.0),
    ((25, 30, 3), "tt", -0.5),
    ((7, 3, 2), "nn", -0.5),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("out", SIXTEEN)
@pytest.mark.parametrize(("shape", "trans", "beta"), PANEL_CASES, ids=str)
def test_run_time_16_bit_outputs_over_several_panels(shape: tuple[int, int, int], trans: str,
                                                     beta: float, out: str, target: str,
                                                     rng, monkeypatch) -> None:  # fmt: skip
    """Panels of 24 x 10 (whole ones, row and column tails, a C smaller than one panel)."""
    small_panels(monkeypatch)
    text = dynamic_text(out, trans)
    args = dynamic_arguments(rng, out, shape, trans, beta)
    expected = [clone(x) for x in args]
    run_reference(text, expected)
    nanotc.compile(text, target=target, cache=False)["k"](*args, group_size=1)
    assert_match(args[-1], expected[-1], depth=shape[2])


@pytest.mark.parametrize("shape", [(2050, 6, 3), (9, 245, 4)], ids=str)
def test_run_time_16_bit_outputs_past_one_full_size_panel(shape: tuple[int, int, int],
                                                          rng) -> None:  # fmt: skip
    assert shape[0] > gemm_lowering.PANEL_ROWS or shape[1] > gemm_lowering.PANEL_COLUMNS
    args = dynamic_arguments(rng, "f16", shape, "nn", -0.5)
    check(dynamic_text("f16", "nn"), args, depth=shape[2])


def small_panels(monkeypatch: pytest.MonkeyPatch, whole_bytes: int | None = None) -> None:
    """Panels of 24 x 10 (and, given, a smaller limit for one scratch of C's size)."""
    monkeypatch.setattr(gemm_lowering, "PANEL_ROWS", 24)
    monkeypatch.setattr(gemm_lowering, "PANEL_COLUMNS", 10)
    if whole_bytes is not None:
        monkeypatch.setattr(gemm_lowering, "WHOLE_SCRATCH_BYTES", whole_bytes)


def test_a_static_16_bit_output_past_the_whole_scratch_limit_takes_panels(monkeypatch) -> None:
    """No launch chunk holds an f32 copy of a large C: 64 x 64 (16 KiB) past an 8 KiB limit."""
    small_panels(monkeypatch, whole_bytes=8 * 1024)
    text = gemm_text("bf16", 64, 64, 64)
    tiled = nanotc.compile(text, target=VECTOR_TILES, cache=False).tiled()
    assert "alloca -> memref<f32x240>" in tiled and "memref<f32x64x64>" not in tiled
    assert "tile.gemm" in tiled
    within = nanotc.compile(gemm_text("bf16", 64, 32, 64), target=VECTOR_TILES, cache=False)
    assert "alloca -> memref<f32x64x32>" in within.tiled()  # 8 KiB: one scratch


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("trans", ["nn", "tt"])
def test_static_16_bit_outputs_in_panels_match_the_reference(trans: str, target: str, rng,
                                                             monkeypatch) -> None:  # fmt: skip
    small_panels(monkeypatch, whole_bytes=0)
    m, n, k = 50, 23, 7
    ta, tb = trans
    a = random_array(rng, (k, m) if ta == "t" else (m, k), "bf16")
    b = random_array(rng, (n, k) if tb == "t" else (k, n), "bf16")
    args = [np.float32(1.5), a, b, np.float32(-0.5), random_array(rng, (m, n), "f16")]
    text = gemm_text("f16", m, n, k, trans)
    expected = [clone(x) for x in args]
    run_reference(text, expected)
    nanotc.compile(text, target=target, cache=False)["k"](*args, group_size=1)
    assert_match(args[-1], expected[-1], depth=k)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("beta", [0.0, -0.5])
def test_run_time_k_of_zero_into_16_bit_c(beta: float, target: str, rng) -> None:
    """No K at all: C := beta C (zeros over NaN for beta 0). The scratch must be written
    although no K block runs (`gemm_blocked.tile_gemm_blocked`); fresh heap scratch reads as
    zeros, so test_gemm_blocked's K = 0 test is the one that catches a missing write."""
    c = random_array(rng, (6, 4), "bf16")
    if beta == 0:
        fill_garbage(c)
    a, b = random_array(rng, (6, 0), "bf16"), random_array(rng, (0, 4), "bf16")
    check(dynamic_text("bf16", "nn"), [np.float32(1.5), a, b, np.float32(beta), c],
          target=target)  # fmt: skip
