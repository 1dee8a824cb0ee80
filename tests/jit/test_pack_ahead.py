"""Packing the next iteration's AMX operands ahead in loops of small bf16 gemms: the loop the
pass leaves, which loops it leaves alone, and results, also for arrays that overlap (where a
run-time test keeps the original order)."""

from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest

import nanotc
from nanotc import targets

AMX_HOST = targets.host().amx
BF16 = ml_dtypes.bfloat16


def loop(
    m: int, n: int, k: int, out: str = "f32", extra: str = "", bounds: str = "0, %batch"
) -> str:
    """C_i += A_i B_i for every i of the batch (`bounds` of the loop), in one work-group."""
    a, b, c = f"memref<bf16x{m}x{k}x?>", f"memref<bf16x{k}x{n}x?>", f"memref<{out}x{m}x{n}x?>"
    am, bm, cm = f"memref<bf16x{m}x{k}>", f"memref<bf16x{k}x{n}>", f"memref<{out}x{m}x{n}>"
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  %batch = size %C[2] : {c}
  for %i = {bounds} {{
    %a = subview %A[:,:,%i] : {a}
    %b = subview %B[:,:,%i] : {b}
    %c = subview %C[:,:,%i] : {c}
    gemm.n.n 1.0, %a, %b, 1.0, %c : f32, {am}, {bm}, f32, {cm}{extra}
  }}
}}"""


def test_a_loop_of_small_amx_gemms_packs_ahead_behind_a_guard() -> None:
    tiled = nanotc.compile(loop(35, 9, 35), target="amx").tiled()
    pipelined, original = tiled.split("} else {")
    # odd K: B is packed too; each pack runs where the loop starts and for the next iteration
    assert "tile.disjoint %A, %C" in pipelined and "tile.disjoint %B, %C" in pipelined
    assert pipelined.count("tile.pack_amx") == 4 and original.count("tile.pack_amx") == 2
    assert "cmp.eq" in pipelined and "cmp.lt" in pipelined


def test_loops_that_write_more_than_the_gemms_are_left_alone() -> None:
    store = "\n    %x = load %c[0, 0] : memref<f32x20x9>\n    store %x, %c[1, 1] : memref<f32x20x9>"
    tiled = nanotc.compile(loop(20, 9, 20, extra=store), target="amx").tiled()
    assert "tile.amx_small_gemm" in tiled and "tile.disjoint" not in tiled


def operands(rng, m: int, n: int, k: int, batch: int) -> tuple[np.ndarray, ...]:
    def bf16(*shape: int) -> np.ndarray:
        return np.asfortranarray(rng.uniform(-1, 1, shape)).astype(BF16)

    return (
        bf16(m, k, batch),
        bf16(k, n, batch),
        np.asfortranarray(rng.uniform(-1, 1, (m, n, batch))).astype(np.float32),
    )


@pytest.mark.skipif(not AMX_HOST, reason="this host has no AMX")
@pytest.mark.parametrize("shape", [(8, 8, 8), (20, 9, 20), (35, 9, 35), (64, 64, 64)], ids=str)
@pytest.mark.parametrize("batch", [0, 1, 2, 7])
def test_results(shape: tuple[int, int, int], batch: int, rng) -> None:
    a, b, c = operands(rng, *shape, batch)
    want = c + np.einsum("mkb,knb->mnb", a.astype(np.float64), b.astype(np.float64))
    compilation = nanotc.compile(loop(*shape))
    assert "tile.disjoint" in compilation.tiled()
    compilation["k"](a, b, c, group_size=1)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not AMX_HOST, reason="this host has no AMX")
@pytest.mark.parametrize("bounds", ["1, %batch, 2", "2, %batch, 3"])
def test_loops_with_steps(bounds: str, rng) -> None:
    """Every other (third) member from 1 (2): the halves alternate by iteration, not by
    index, and the members not visited keep their C."""
    a, b, c = operands(rng, 20, 9, 20, 8)
    start, _, step = (int(x) for x in bounds.replace("%batch", "0").split(","))
    want = c.astype(np.float64)
    for i in range(start, 8, step):
        want[:, :, i] += a[:, :, i].astype(np.float64) @ b[:, :, i].astype(np.float64)
    compilation = nanotc.compile(loop(20, 9, 20, bounds=bounds))
    assert "tile.disjoint" in compilation.tiled()
    compilation["k"](a, b, c, group_size=1)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not AMX_HOST, reason="this host has no AMX")
def test_overlapping_arrays_keep_the_loop_order(rng) -> None:
    """A_i = X_i and C_i = X_(i+1) of one bf16 array X: gemm i reads what gemm i-1 wrote, so
    packing A_(i+1) ahead of gemm i would read X_(i+1) before it is updated. Launched as a C
    caller does, through the flattened entry: a launch from Python refuses such arrays
    (docs/calling-convention.md), one from C is not checked."""
    m = n = k = 8
    batch = 6
    x = np.asfortranarray(rng.uniform(-1, 1, (m, k, batch + 1))).astype(BF16)
    b = np.asfortranarray(rng.uniform(-0.5, 0.5, (k, n, batch))).astype(BF16)
    want = x.astype(np.float64)
    for i in range(batch):  # in order, each C_i rounded to bf16 once
        update = want[:, :, i + 1] + want[:, :, i] @ b[:, :, i].astype(np.float64)
        want[:, :, i + 1] = update.astype(np.float32).astype(BF16).astype(np.float64)
    launch_from_c(nanotc.compile(loop(m, n, k, out="bf16")), x[:, :, :batch], b, x[:, :, 1:])
    got = x.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=0, atol=2**-6 * np.abs(want).max())


def launch_from_c(compilation: nanotc.Compilation, *batches: np.ndarray) -> None:
    """One work-group of `@k(A, B, C)` through its flattened entry: each batch's address and
    its run-time batch size (docs/calling-convention.md, "Flattening")."""
    parameters = [ctypes.c_void_p, ctypes.c_int64] * len(batches) + [ctypes.c_int64] * 3
    entry = ctypes.CFUNCTYPE(ctypes.c_int32, *parameters)(compilation.native.address("k"))
    flat = [value for x in batches for value in (x.ctypes.data, x.shape[2])]
    assert entry(*flat, 0, 1, 1) == 0
