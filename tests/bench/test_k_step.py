"""bench.k_step: hand-scheduled k steps are real gemms (checked), and time beside the FMA-only
loop. No speed is asserted."""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np
import pytest

from bench import harness, k_step
from bench.harness import Settings
from bench.k_step import Tile
from nanotc import targets

QUICK = replace(Settings(quick=True).quick_defaults(), repeats=1, budget=0.05)

needs_avx512 = pytest.mark.skipif(
    "+avx512f" not in targets.host().llvm_features.split(","), reason="AVX-512 assembly"
)


@needs_avx512
def test_every_tile_computes_its_gemm_and_gets_a_rate() -> None:
    tiles = [Tile.parse(t) for t in ("4x6", "3x8u2", "2x12u4", "1x1", "2x8eu2")]
    results = k_step.run(QUICK, tiles, (8, 16))
    assert [(r.steps, r.tile) for r in results] == [
        (s, t) for s in (8, 16) for t in ("fma-only", "4x6", "3x8u2", "2x12u4", "1x1", "2x8eu2")
    ]
    assert all(r.gflops > 0 and r.percent_fma_only > 0 for r in results)
    assert all(r.percent_fma_only == 100 for r in results if r.tile == "fma-only")


@needs_avx512
def test_a_k_step_that_skips_a_column_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assembly = k_step.k_step_assembly

    def without_last_fma(tile: Tile, step: int) -> list[str]:
        lines = assembly(tile, step)
        return lines[:-1] if tile.loads else lines

    monkeypatch.setattr(k_step, "k_step_assembly", without_last_fma)
    with pytest.raises(harness.ValidationError, match="4x6"):
        k_step.run(QUICK, [Tile.parse("4x6")], (8,))


def test_the_k_step_issues_a_tiles_loads_broadcasts_and_fmas() -> None:
    lines = k_step.k_step_assembly(Tile.parse("3x8"), 1)
    assert sum(line.startswith("vmovups") for line in lines) == 3
    assert sum(line.startswith("vbroadcastss") for line in lines) == 8
    assert sum(line.startswith("vfmadd231ps") for line in lines) == 24
    assert "vmovups 192(%rax), %zmm24" in lines  # the second unrolled step's first vector
    assert "vbroadcastss 1028(%rcx), %zmm28" in lines  # column 1, row 1


def test_embedded_broadcasts_are_the_fmas_memory_operands() -> None:
    lines = k_step.k_step_assembly(Tile.parse("2x8e"), 0)
    assert sum(line.startswith("vmovups") for line in lines) == 2
    assert not any(line.startswith("vbroadcastss") for line in lines)
    assert "vfmadd231ps 1024(%rcx){1to16}, %zmm17, %zmm3" in lines  # column 1, vector 1


@pytest.mark.parametrize("text", ["5x6", "4x7", "0x4u0", "4x6u0", "4x6x", "2x8ue"])
def test_tiles_beyond_the_registers_or_unrolled_zero_times_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        Tile.parse(text)


@pytest.mark.parametrize("offset", [0, 16, 48])
def test_a_starts_the_given_bytes_past_a_cache_line_and_b_on_one(offset: int) -> None:
    """numpy placed A 16 or 48 bytes past a line, where every vector load of A spans two:
    the 4 x 6 tile's loop over 256 steps ran at 71-72% of the FMA-only loop, on a line at
    82-84%."""
    loop = k_step.KLoop(Tile.parse("4x6"), 8, np.random.default_rng(0), offset)
    assert loop.a.ctypes.data % harness.LINE_BYTES == offset
    assert loop.b.ctypes.data % harness.LINE_BYTES == 0
    assert loop.b.flags.c_contiguous and loop.b.shape == (6, k_step.B_COLUMN_BYTES // 4)


@needs_avx512
def test_a_tile_off_the_line_still_computes_its_gemm() -> None:
    results = k_step.run(QUICK, [Tile.parse("4x6"), Tile.parse("2x12u2")], (8,), a_offset=16)
    assert [r.tile for r in results] == ["fma-only", "4x6", "2x12u2"]


def test_steps_must_be_a_multiple_of_the_unrolling() -> None:
    with pytest.raises(ValueError, match="multiple"):
        k_step.KLoop(Tile.parse("4x6u4"), 6, None)  # type: ignore[arg-type]


@needs_avx512
def test_the_command_line_refuses_steps_a_tile_cannot_take(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        k_step.main(["--tiles", "4x6,5x5u2", "--steps", "34,35", "--quick"])
    assert exit_.value.code == 2
    assert "--steps: [35] not a multiple of 5x5u2's unrolling (2)" in capsys.readouterr().err
