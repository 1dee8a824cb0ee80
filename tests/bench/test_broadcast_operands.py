"""bench/broadcast_operands.py: the two builds it compares, validated, and the rates it reports.

No speed is asserted: only that both builds ran, were checked against float64, and differ
in code exactly where the rule applies."""

from __future__ import annotations

import math
from dataclasses import replace

import nanotc
from bench import broadcast_operands as bo
from bench.harness import Settings
from tests.jit.helpers import ZEN4, needs_host

QUICK = replace(Settings(quick=True).quick_defaults(), repeats=1, budget=0.05, threads=(1, 2))


def test_only_the_control_case_compiles_alike_on_zen4() -> None:
    """Every case but the control reads B per vector in one build and not in the other (the
    rule's listing mark), compiled for Zen 4 on any host."""
    for case in bo.CASES:
        listings = {
            name: nanotc.compile(bo.source(case), target=t).nanokernels()
            for name, t in bo.builds(ZEN4).items()
        }
        control = case == bo.CASES[-1]
        assert ("{1toN}" in listings["per-vector"]) != control, case.name
        assert "{1toN}" not in listings["shared"]


@needs_host(ZEN4)
def test_each_case_is_validated_and_timed() -> None:
    """Both builds' results are checked against float64 inside `measure` (a wrong one raises)
    before they are timed; the batch-reduce runs on one thread, the batches on each."""
    results = [r for case in bo.CASES for r in bo.measure(case, QUICK, ZEN4)]
    assert [(r.case, r.threads) for r in results] == [
        (case, t) for case in bo.CASES for t in ((1,) if case.reduce else (1, 2))
    ]
    for r in results:
        assert set(r.gflops) == set(bo.BUILDS) and all(g > 0 for g in r.gflops.values())
        assert math.isfinite(r.ratio) and r.ratio > 0
    assert len(bo.table(results).splitlines()) == len(results) + 1
