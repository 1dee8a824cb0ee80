"""f16 gemms into f32 C: a static f16 B the tiles broadcast is widened once into f32 scratch
(`lowering.gemm.widens_b`), the tiles convert A's vectors as they load them. Which gemms
take the copy, and their results against the reference evaluator on every target this
machine runs, for transposes, alpha and beta, M tails and batch members; and the compact 2-D
axpby that makes the copy (one loop over all elements, `blas_vector._flattened`)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import nanotc
from nanotc.lowering.gemm import widens_b
from nanotc.targets import get

from .helpers import TARGETS, check, compiled, random_array
from .test_bf16_widened import literal_text


def gemm_text(m: int, n: int | str, k: int, trans: str = "nn", b_type: str = "f16",
              alpha: str = "%alpha", beta: str = "%beta") -> str:  # fmt: skip
    """C := alpha op(A) op(B) + beta C, A f16, B of `b_type`, C f32 (`n` may be ?)."""
    return literal_text(m, n, k, alpha, beta, trans, ("f16", b_type))


def test_a_static_f16_b_is_widened_once_into_f32_scratch() -> None:
    tiled = compiled(gemm_text(64, 64, 64)).tiled()
    assert "alloca -> memref<f32x64x64>" in tiled
    (copy,) = [line.strip() for line in tiled.splitlines() if "axpby" in line]
    assert copy.startswith("axpby.n 1.0, %B, 0.0, %0")
    gemms = [line for line in tiled.splitlines() if "tile.gemm" in line]
    assert gemms and all(", %A, %0" in line for line in gemms)  # the tiles read the copy


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (gemm_text(64, 64, 64, b_type="bf16"), "bf16: widened by an and at its broadcast"),
        (gemm_text(64, 64, 64, b_type="f32"), "already f32"),
        (gemm_text(64, "?", 64), "run-time size"),
    ],
    ids=["bf16", "f32", "dynamic"],
)
def test_other_b_operands_are_read_where_they_lie(text: str, why: str) -> None:
    tiled = compiled(text).tiled()
    assert "axpby" not in tiled and "tile.gemm" in tiled, why


def test_a_b_past_half_of_l2_is_not_copied() -> None:
    target = get("avx2")
    k = target.l2_bytes // 2 // 4 // 32 + 1  # a 32-column B one column of K past the limit
    (gemm,) = nanotc.load(gemm_text(8, 32, k)).functions[0].body.instructions
    assert not widens_b(gemm, target)
    (fits,) = nanotc.load(gemm_text(8, 32, k - 1)).functions[0].body.instructions
    assert widens_b(fits, target)


CASES = [
    ((8, 8, 8), "nn", "%alpha", "%beta"),
    ((35, 9, 35), "nt", "%alpha", "0.0"),
    ((20, 9, 20), "tn", "1.0", "1.0"),
    ((17, 5, 3), "tt", "%alpha", "%beta"),
    ((64, 64, 64), "nn", "1.0", "0.0"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("shape", "trans", "alpha", "beta"), CASES, ids=str)
def test_f16_gemms_with_widened_b_match_the_reference(shape: tuple[int, int, int], trans: str,
                                                      alpha: str, beta: str, target: str,
                                                      rng) -> None:  # fmt: skip
    m, n, k = shape
    ta, tb = trans
    a = random_array(rng, (k, m) if ta == "t" else (m, k), "f16")
    b = random_array(rng, (n, k) if tb == "t" else (k, n), "f16")
    c = random_array(rng, (m, n), "f32")
    text = gemm_text(m, n, k, trans, alpha=alpha, beta=beta)
    assert "axpby" in compiled(text, target).tiled()
    check(text, [np.float32(1.5), a, b, np.float32(-0.5), c], target=target, depth=k)


BATCH = """func @k(%A: memref<f16x20x20x?>, %B: memref<f16x20x9x?>, %C: memref<f32x20x9x?>) {
  %g = group_id
  %a = subview %A[:,:,%g] : memref<f16x20x20x?>
  %b = subview %B[:,:,%g] : memref<f16x20x9x?>
  %c = subview %C[:,:,%g] : memref<f32x20x9x?>
  gemm.n.n 1.0, %a, %b, 1.0, %c : f32, memref<f16x20x20>, memref<f16x20x9>, f32, memref<f32x20x9>
}"""


@pytest.mark.parametrize("target", TARGETS)
def test_batch_members_widen_their_own_b(target: str, rng) -> None:
    a, b = random_array(rng, (20, 20, 6), "f16"), random_array(rng, (20, 9, 6), "f16")
    c = random_array(rng, (20, 9, 6), "f32")
    check(BATCH, [a, b, c], group_size=6, target=target, num_threads=2, depth=20)


def axpby_text(source: str, target: str) -> str:
    return f"""func @k(%A: {source}, %B: {target}) {{
  axpby.n 1.5, %A, 0.5, %B : f32, {source}, f32, {target}
}}"""


COMPACT, STRIDED = "memref<f32x20x9>", "memref<f32x20x9,strided<1,24>>"


@pytest.mark.parametrize(("out", "flat"), [(COMPACT, True), (STRIDED, False)],
                         ids=["compact", "strided"])  # fmt: skip
@pytest.mark.parametrize("source", ["f16", "bf16", "f32"])
def test_compact_matrices_take_one_element_wise_loop(source: str, out: str, flat: bool,
                                                     rng) -> None:  # fmt: skip
    """A compact source and output: one vector loop, no loop over columns (`j`); with a gap
    between the output's columns, a loop per column. Both match the reference."""
    text = axpby_text(f"memref<{source}x20x9>", out)
    blocks = set(re.findall(r"^([\w.]+):", compiled(text).llvm_ir, re.M))
    assert any(label.startswith("j.") for label in blocks) != flat
    rows = random_array(rng, (24, 9), "f32")[:20]  # a view: 24 rows apart
    output = rows.copy(order="F") if flat else rows
    check(text, [random_array(rng, (20, 9), source), output])
