"""W2's table ends with how its rows stand against issue 4's targets (`w2_batched.target_notes`):
the rows below the least share of libxsmm, the geometric mean, and each row below twice torch
with the share of its bound (the peak, or the stream's rate from memory) torch runs at."""

from __future__ import annotations

from bench.harness import Row, Timing
from bench.w2_batched import target_notes

FLOPS = 1e9  # per unit of work: seconds s run at 1/s GFLOP/s


def timing(gflops: float) -> Timing:
    seconds = FLOPS / gflops / 1e9
    return Timing(seconds, (seconds,))


def row(variant: str, shape: str, nanotc: float, peak: float, **peers: float) -> Row:
    return Row(workload="w2", shape=f"{shape} b10", dtype="f32", threads=1, flops=FLOPS,
               nanotc=timing(nanotc), peers={p: timing(x) for p, x in peers.items()},
               peak=peak, variant=variant)  # fmt: skip


def test_rows_below_libxsmm_and_the_geometric_mean_per_variant() -> None:
    rows = [
        row("cache", "16x16x16", 110, 117, libxsmm=100, torch=40),
        row("cache", "32x32x32", 90, 117, libxsmm=100, torch=40),
        row("memory", "8x8x8", 40, 117, libxsmm=20, torch=10, stream=40),
    ]
    notes = target_notes(rows)
    assert (
        notes[0]
        == "target memory: 1 of 1 rows >= 0.95x libxsmm; geometric mean 2.00x (target 1.1x)"
    )
    assert notes[1] == (
        "target cache: 1 of 2 rows >= 0.95x libxsmm (below: cache 32x32x32 f32 1T 0.90); "
        "geometric mean 0.99x (target 1.1x)"
    )
    assert len(notes) == 2  # every row at twice torch or more


def test_rows_below_twice_torch_say_where_torch_runs_against_the_bound() -> None:
    """In cache the bound is the peak; from memory the stream's rate where it is lower."""
    rows = [
        row("cache", "64x64x64", 114, 117, torch=87.75),
        row("memory", "16x16x16", 80, 117, torch=45, stream=75),
        row("launch", "8x8x8", 10, 117, torch=9),  # not a target's variant
    ]
    assert target_notes(rows) == [
        "target: cache 64x64x64 f32 1T at 1.30x torch (target 2.0x); torch runs at 75% of the peak",
        "target: memory 16x16x16 f32 1T at 1.78x torch (target 2.0x); torch runs at 60% of the "
        "stream rate",
    ]
