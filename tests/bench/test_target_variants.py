"""bench.target_variants: variants parse into changed host descriptions, and every workload
times the host's kernels beside each variant's, checked. No speed is asserted."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from bench import target_variants
from bench.harness import Settings
from nanotc import targets

QUICK = replace(Settings(quick=True, threads=(1,), dtypes=("f32",)).quick_defaults(),
                repeats=1, budget=0.05)  # fmt: skip


def test_a_variant_changes_the_fields_it_names_and_nothing_else() -> None:
    host = targets.host()
    name, target = target_variants.parse_variant("k_unroll=3+l2_bytes_per_cycle=12.5")
    assert name == "k_unroll=3+l2_bytes_per_cycle=12.5"
    assert (target.k_unroll, target.l2_bytes_per_cycle) == (3, 12.5)
    assert replace(target, k_unroll=host.k_unroll, l2_bytes_per_cycle=host.l2_bytes_per_cycle,
                   name=host.name) == host  # fmt: skip
    assert target_variants.parse_variant("rereads_a_from_l2=false")[1].rereads_a_from_l2 is False


@pytest.mark.parametrize(
    ("text", "message"),
    [("k_unrol=2", "a field of Target"), ("k_unroll", "a field of Target"),
     ("name=x", "a field of Target"), ("k_unroll=two", "'two' is not of type int"),
     ("amx=yes", "true or false")],
)  # fmt: skip
def test_a_wrong_variant_is_refused_with_what_was_expected(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        target_variants.parse_variant(text)


def test_every_workload_times_the_host_beside_each_variant() -> None:
    variants = [target_variants.parse_variant("k_unroll=1"),
                target_variants.parse_variant("k_unroll=4")]  # fmt: skip
    rows = target_variants.run(QUICK, variants, target_variants.WORKLOADS, [(8, 8, 8)], [2, 12])
    assert [r.variant for r in rows] == ["cache", "memory", "w3 L2", "w3 L12", "w3 total"]
    for row in rows:
        assert set(row.peers) == {"k_unroll=1", "k_unroll=4"}
        assert row.nanotc.seconds > 0 and all(t.seconds > 0 for t in row.peers.values())
    total, layers = rows[-1], rows[2:4]
    assert total.flops == sum(layer.flops * count for layer, count in zip(layers, (1, 6)))


def test_the_command_line_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    target_variants.main(["--quick", "--variants", "k_unroll=1", "--workloads", "cache",
                          "--shapes", "8x8x8", "--dtypes", "f32", "--threads", "1",
                          "--no-csv"])  # fmt: skip
    out = capsys.readouterr().out
    assert "Target variants" in out and "k_unroll=1" in out and "8x8x8" in out
