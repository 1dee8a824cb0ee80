"""bench/instruction_mix.py: the loops it builds and the ratios it reports."""

from __future__ import annotations

import math

import pytest

from bench import instruction_mix
from nanotc import targets


def test_added_instructions_sit_among_the_dot_products() -> None:
    lines = instruction_mix.loop_asm(24, ["vpsrld $$16, %zmm30, %zmm24"] * 4).splitlines()
    body = lines[1:-2]  # between the label and the loop's decrement and branch
    assert sum(line.startswith("vdpbf16ps") for line in body) == 24
    assert sum(line.startswith("vpsrld") for line in body) == 4
    assert body[0].startswith("vdpbf16ps") and body[-1].startswith("vdpbf16ps")
    assert "vpsrld" not in body[1] + body[2]  # spread out, not bunched at the start


def test_every_mix_and_chain_count_is_measured() -> None:
    host = targets.host()
    if not host.bf16_dot:
        pytest.skip("the loops run vdpbf16ps: an AVX512-BF16 host only")
    sweep, mixes = instruction_mix.measure(host, rounds=1, steps=20_000)
    # ratios of timings: only that each is measured (a loaded machine moves them anywhere)
    assert sweep[instruction_mix.DOTS] == 1.0 and all(0 < r < math.inf for r in sweep.values())
    names = {f"{m.name} x{n}" for m in instruction_mix.MIXES for n in instruction_mix.COUNTS}
    assert set(mixes) == names
    assert all(0 < ratio < math.inf for ratio in mixes.values())
