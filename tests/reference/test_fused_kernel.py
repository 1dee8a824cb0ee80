"""The sample kernel of the language reference (examples/fused_kernel.ir) evaluated on a few
hundred work-groups against D[:,:,g] = alpha * A_g @ B^T @ C + D[:,:,g], and a timing run on
100000 work-groups (printed, not asserted)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from reference_helpers import random_array

import nanotc
from nanotc.reference import evaluate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fused_kernel.ir"


@pytest.fixture(scope="module")
def program() -> nanotc.ir.core.Program:
    return nanotc.load(EXAMPLE.read_text(), str(EXAMPLE.name))


def expected(
    alpha: float, a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray
) -> np.ndarray:
    a64, b64, c64 = (x.astype(np.float64) for x in (a, b, c))
    return alpha * np.einsum("ikg,jk,jl->ilg", a64, b64, c64) + d


@pytest.mark.parametrize("batched", [True, False])
def test_fused_kernel_matches_numpy(program: nanotc.ir.core.Program, batched: bool) -> None:
    groups = 300
    rng = np.random.default_rng(400)
    a = random_array(rng, (16, 8, groups), "f32")
    b, c = random_array(rng, (8, 8), "f32"), random_array(rng, (8, 16), "f32")
    d = random_array(rng, (16, 16, groups + 2), "f32")  # two more than the launch touches
    want = expected(0.75, a, b, c, d[:, :, :groups])
    untouched = d[:, :, groups:].copy()
    members = a if batched else [np.asfortranarray(a[:, :, g]) for g in range(groups)]
    evaluate(program, "fused_kernel", [np.float32(0.75), members, b, c, d], groups)
    np.testing.assert_allclose(d[:, :, :groups], want, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(d[:, :, groups:], untouched)


def test_fused_kernel_timing_100000_groups(program: nanotc.ir.core.Program) -> None:
    groups = 100_000
    rng = np.random.default_rng(401)
    a = rng.standard_normal((16, 8, groups), dtype=np.float32).copy(order="F")
    b, c = random_array(rng, (8, 8), "f32"), random_array(rng, (8, 16), "f32")
    d = np.zeros((16, 16, groups), np.float32, order="F")
    start = time.perf_counter()
    evaluate(program, "fused_kernel", [np.float32(1.0), a, b, c, d], groups)
    elapsed = time.perf_counter() - start
    print(f"\nreference evaluator: fused_kernel on {groups} work-groups in {elapsed:.2f} s")
    sample = [0, 1, groups // 2, groups - 1]
    np.testing.assert_allclose(
        d[:, :, sample],
        expected(1.0, a[:, :, sample], b, c, d[:, :, sample] * 0),
        rtol=1e-4,
        atol=1e-3,
    )
