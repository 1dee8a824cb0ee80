"""gemms into bf16 and f16 C (f32 arithmetic, rounded once on store): their tiles work on an
f32 copy of C (`lowering.gemm.through_f32_scratch`), C widened into it unless beta is 0 and
rounded back after. Which gemms take it, and their results against the reference evaluator
on every target this machine runs, for transposes, alpha and beta (beta 0 over NaN), batch
members and views of C."""

from __future__ import annotations

import numpy as np
import pytest

from .helpers import TARGETS, check, compiled, fill_garbage, random_array

SIXTEEN = ("bf16", "f16")


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
def test_16_bit_outputs_are_tiled_on_an_f32_copy(out: str) -> None:
    tiled = compiled(gemm_text(out, 64, 64, 64)).tiled()
    assert "alloca -> memref<f32x64x64>" in tiled and "tile.gemm" in tiled
    assert tiled.count("axpby") == 2  # widened in, rounded out
    zero_beta = compiled(gemm_text(out, 64, 64, 64, beta="0.0")).tiled()
    assert zero_beta.count("axpby") == 1 and "tile.gemm" in zero_beta  # C is not read


@pytest.mark.parametrize(
    ("flags", "rows"), [(".atomic", "0"), ("", "?")], ids=["atomic", "run-time rows"]
)
def test_atomic_and_dynamic_16_bit_outputs_keep_their_loops(flags: str, rows: str) -> None:
    """An atomic gemm's work-groups update C together (a copy would lose their sums); a
    run-time C has no static scratch: both stay the emitter's loops."""
    beta = "1.0" if flags else "%beta"
    tiled = compiled(gemm_text("bf16", 32, 8, 16, beta=beta, flags=flags, rows=rows)).tiled()
    assert "tile.gemm" not in tiled and "alloca" not in tiled


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
    assert "tile.gemm" in compiled(BATCH, target).tiled()
    check(BATCH, [a, b, c], group_size=5, target=target, num_threads=2, depth=16)
