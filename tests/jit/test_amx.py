"""bf16 gemm on AMX tiles: results against the reference evaluator on a host with AMX, and the
generated code of the `amx` target on any host (tdpbf16ps on tile registers, one tile
configuration, nothing spilled)."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import nanotc
from nanotc import targets
from nanotc.codegen import asm
from tests.jit.helpers import check

AMX_HOST = targets.host().amx
SHAPES = [(32, 32, 32), (64, 64, 64), (100, 70, 1), (17, 40, 600), (300, 65, 513), (40, 33, 1100)]
# (40, 33, 1100): two K blocks, the second partial


def gemm_text(m: int, n: int, k: int, ta: str, tb: str, out: str, dynamic: bool) -> str:
    a_shape, b_shape = ((k, m) if ta == "t" else (m, k)), ((n, k) if tb == "t" else (k, n))

    def ty(shape: tuple[int, int], element: str) -> str:
        return f"memref<{element}x{'?x?' if dynamic else 'x'.join(map(str, shape))}>"

    a, b, c = ty(a_shape, "bf16"), ty(b_shape, "bf16"), ty((m, n), out)
    return f"""func @k(%alpha: f32, %beta: f32, %A: {a}, %B: {b}, %C: {c}) {{
  gemm.{ta}.{tb} %alpha, %A, %B, %beta, %C : f32, {a}, {b}, f32, {c}
}}"""


def arguments(m: int, n: int, k: int, ta: str, tb: str, out: str, beta: float, rng) -> list:
    a_shape, b_shape = ((k, m) if ta == "t" else (m, k)), ((n, k) if tb == "t" else (k, n))
    bf16 = ml_dtypes.bfloat16
    c = np.asfortranarray(rng.standard_normal((m, n))).astype(bf16 if out == "bf16" else np.float32)
    if beta == 0:
        c[...] = np.nan  # beta = 0 never reads C
    return [np.float32(0.5), np.float32(beta),
            np.asfortranarray(rng.standard_normal(a_shape)).astype(bf16),
            np.asfortranarray(rng.standard_normal(b_shape)).astype(bf16), c]  # fmt: skip


@pytest.mark.skipif(not AMX_HOST, reason="this host has no AMX")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize(("ta", "tb"), list(itertools.product("nt", "nt")))
@pytest.mark.parametrize("out", ["f32", "bf16"])
def test_amx_gemm_matches_reference(
    shape: tuple[int, int, int], ta: str, tb: str, out: str, rng
) -> None:
    text = gemm_text(*shape, ta, tb, out, dynamic=False)
    small = shape[0] * shape[1] * shape[2] < 32**3  # those take the vector nanokernels
    assert ("tile.amx_gemm" in nanotc.compile(text).tiled()) != small
    for beta in (0.0, 1.0, -2.0):
        check(text, arguments(*shape, ta, tb, out, beta, rng), depth=shape[2])


@pytest.mark.skipif(not AMX_HOST, reason="this host has no AMX")
@pytest.mark.parametrize(
    "shape", [(64, 64, 64), (300, 65, 513)], ids=lambda s: "x".join(map(str, s))
)
def test_amx_gemm_with_dynamic_sizes(shape: tuple[int, int, int], rng) -> None:
    text = gemm_text(*shape, "n", "n", "f32", dynamic=True)
    check(text, arguments(*shape, "n", "n", "f32", 1.0, rng), depth=shape[2])


def test_small_bf16_gemm_stays_on_vector_nanokernels() -> None:
    tiled = nanotc.compile(gemm_text(16, 16, 16, "n", "n", "f32", False), target="amx").tiled()
    assert "tile.amx_gemm" not in tiled and "tile.gemm" in tiled


def test_amx_assembly_keeps_accumulators_in_tiles() -> None:
    code = nanotc.compile(gemm_text(256, 256, 512, "n", "n", "f32", False), target="amx").assembly()
    loops = asm.hot_loops(code, "k", "tdpbf16ps")
    assert loops
    for loop in loops:
        assert loop.count("tdpbf16ps") == 4 and loop.count("tileloadd") == 4
        assert loop.count("ldtilecfg") == 0  # configured once, outside the K loop
        assert not any(i.startswith("tilestored") for i in loop.instructions)
        # no tile or vector register goes through the stack (a general-purpose register
        # reload, when LLVM runs short of them, is one L1 load per 64+ cycles of tile work)
        assert [s for s in loop.stack_accesses() if "mm" in s] == []


def test_amx_code_refuses_to_run_without_amx(monkeypatch) -> None:
    """On a host without AMX, code for the amx target compiles (assembly, objects) but
    nanotc will not load it for running."""
    monkeypatch.setattr(nanotc.api, "runs_on_host", lambda target: False)
    compilation = nanotc.compile(gemm_text(64, 64, 64, "n", "n", "f32", False), target="amx")
    assert "tdpbf16ps" in compilation.assembly()
    with pytest.raises(RuntimeError, match="cannot run on this machine"):
        compilation["k"]
