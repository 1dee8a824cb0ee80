"""`bench.compile_time --stages` splits a cold compile into its stages, each timed."""

from __future__ import annotations

import pytest

from bench import compile_time, kernels


def test_every_stage_is_timed_and_the_last_makes_machine_code() -> None:
    times = compile_time.stage_times(kernels.single("f32", 8, 8, 8))
    assert len(times) == len(compile_time.STAGES)
    assert all(t > 0 for t in times)


def test_the_stage_table_has_a_row_per_kernel(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    small = {"a": kernels.single("f32", 4, 4, 4), "b": kernels.single("f64", 4, 4, 4)}
    monkeypatch.setattr(compile_time, "cases", lambda: small)
    assert compile_time.main(["--stages", "--runs", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    header, _, *body = rows  # the header, its alignment row, the kernels
    assert header.split(" | ")[1:-1] == list(compile_time.STAGES)
    assert [row.split(" | ")[0] for row in body] == ["| a", "| b"]
    assert all(len(row.split(" | ")) == len(compile_time.STAGES) + 2 for row in body)
