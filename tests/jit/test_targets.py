"""Target descriptions: the host's caches as Linux reports them, defaults where it does not;
what the rates of a target's units imply."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from nanotc import targets
from nanotc.ir.types import ScalarType

SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")


def data_cache(wanted: int) -> Path | None:
    for index in sorted(SYSFS.glob("index*")):
        level, kind = (index / "level").read_text(), (index / "type").read_text()
        if int(level) == wanted and kind.strip() != "Instruction":
            return index
    return None


@pytest.mark.skipif(data_cache(1) is None, reason="Linux reports no L1 data cache here")
def test_host_l1_matches_sysfs() -> None:
    index = data_cache(1)
    assert index is not None
    ways = int((index / "ways_of_associativity").read_text())
    size = (index / "size").read_text().strip()
    host = targets.host()
    assert host.l1_ways == ways and host.l1_bytes == int(size.rstrip("K")) * 1024


@pytest.mark.skipif(data_cache(3) is None, reason="Linux reports no L3 cache here")
def test_host_l3_matches_sysfs() -> None:
    """The last level's size bounds where element-wise loops store around the caches."""
    index = data_cache(3)
    assert index is not None
    size = (index / "size").read_text().strip()
    unit = {"K": 1024, "M": 1024 * 1024}.get(size[-1], 1)
    assert targets.host().l3_bytes == int(size.rstrip("KM")) * unit


@pytest.mark.parametrize("reported", [None, "0", "", "fully", "K"])
def test_unreported_or_unusable_caches_fall_back_to_the_defaults(
    reported: str | None, monkeypatch
) -> None:
    monkeypatch.setattr(targets, "_cache_property", lambda level, name: reported)
    assert targets._cache_ways(1, 8) == 8
    assert targets._cache_size(1, 32 * 1024) == 32 * 1024


@pytest.mark.parametrize(("reported", "size"), [("48K", 48 * 1024), ("1M", 1 << 20), ("512", 512)])
def test_cache_sizes_read_with_their_unit(reported: str, size: int, monkeypatch) -> None:
    monkeypatch.setattr(targets, "_cache_property", lambda level, name: reported)
    assert targets._cache_size(2, 1) == size


def test_built_in_targets_describe_their_l1() -> None:
    assert targets.get("avx512").l1_ways == 12  # 48 KiB, 12 ways (Ice Lake onwards)
    assert targets.get("avx2").l1_ways == 8


def test_narrow_fma_pays_only_on_units_narrower_than_the_vectors() -> None:
    """Zen 4's 256-bit units under 512-bit vectors; not where a unit is as wide as the
    vectors, nor where the width is unknown (0)."""
    avx512 = targets.get("avx512")
    assert replace(avx512, fma_unit_bits=256).narrow_fma_pays
    assert not avx512.narrow_fma_pays
    assert not replace(avx512, fma_unit_bits=512).narrow_fma_pays
    assert not replace(targets.get("avx2"), fma_unit_bits=256).narrow_fma_pays


def test_stream_lanes_are_the_streaming_width_where_narrower_than_the_vectors() -> None:
    """`stream_vector_bits` narrows the vectors of loops from memory; 0 (unknown) or a width
    past the registers leaves them full."""
    avx512, f32, f64 = targets.get("avx512"), ScalarType.F32, ScalarType.F64
    assert replace(avx512, stream_vector_bits=256).stream_lanes(f32) == 8
    assert replace(avx512, stream_vector_bits=256).stream_lanes(f64) == 4
    assert avx512.stream_lanes(f32) == avx512.lanes(f32) == 16
    assert replace(targets.get("avx2"), stream_vector_bits=512).stream_lanes(f64) == 4


def test_sign_masks_only_where_avx_lacks_k_masks() -> None:
    """vmaskmovps/pd masks on AVX2 (and a host with AVX but not AVX-512), never beside
    AVX-512's k-masks nor on the SSE2 baseline."""
    assert targets.get("avx2").sign_masked_memory
    assert not any(targets.get(t).sign_masked_memory for t in ("avx512", "amx", "generic"))
    host = targets.get("host")
    has_avx = "+avx" in host.llvm_features.split(",")
    assert host.sign_masked_memory == (has_avx and not host.masked_memory)
