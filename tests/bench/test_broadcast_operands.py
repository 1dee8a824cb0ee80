"""bench/broadcast_operands.py: the two builds of each rule it compares, validated, and the rates
it reports.

No speed is asserted: only that both builds ran, were checked against float64, and differ
in code exactly where the rule applies."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import nanotc
from bench import broadcast_operands as bo
from bench.harness import Settings
from tests.jit.helpers import ZEN4, needs_host

QUICK = replace(Settings(quick=True).quick_defaults(), repeats=1, budget=0.05, threads=(1, 2))


@pytest.mark.parametrize("rule", bo.RULES, ids=lambda r: r.name)
def test_only_the_control_case_compiles_alike_on_zen4(rule: bo.Rule) -> None:
    """Every case but the control carries the rule's listing mark in the rule's build and not
    in the other, compiled for Zen 4 on any host."""
    for case in rule.cases:
        listings = {
            name: nanotc.compile(bo.source(case), target=t).nanokernels()
            for name, t in bo.builds(ZEN4, rule).items()
        }
        assert (rule.mark in listings[rule.name]) != (case == rule.control), case.name
        assert rule.mark not in listings[rule.without]


@needs_host(ZEN4)
@pytest.mark.parametrize("rule", bo.RULES, ids=lambda r: r.name)
def test_each_case_is_validated_and_timed(rule: bo.Rule) -> None:
    """Both builds' results are checked against float64 inside `measure` (a wrong one raises)
    before they are timed; the batch-reduce runs on one thread, the batches on each."""
    results = [r for case in rule.cases for r in bo.measure(rule, case, QUICK, ZEN4)]
    assert [(r.case, r.threads) for r in results] == [
        (case, t) for case in rule.cases for t in ((1,) if case.reduce else (1, 2))
    ]
    for r in results:
        assert set(r.gflops) == {rule.name, rule.without}
        assert all(g > 0 for g in r.gflops.values())
        assert math.isfinite(r.ratio) and r.ratio > 0
    table = bo.table(results).splitlines()
    assert len(table) == len(results) + 1 and f"{rule.name}/{rule.without}" in table[0]
