"""`nanotc bench` and `nanotc peak` as a user runs them (quick mode; no speed is asserted),
and the command line's handling of mistakes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from .cli import nanotc_cli


def test_bench_runs_a_named_part_and_writes_its_results(tmp_path: Path) -> None:
    result = nanotc_cli(
        "bench",
        "w3",
        "--quick",
        "--peers",
        "numpy",
        "--threads",
        "1",
        "--peak",
        "fp32=100,fp64=50",
        "--repeats",
        "1",
        "--budget",
        "0.05",
        "--results-dir",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "== W3 ResNet-50" in result.stdout and "== W1" not in result.stdout
    header = next(line for line in result.stdout.splitlines() if line.startswith("workload"))
    assert "nanotc GF/s" in header and "% peak" in header and "nanotc/numpy" in header
    assert len(list(tmp_path.glob("w3_resnet-*.csv"))) == 1
    charts = list(tmp_path.glob("w3_resnet-*.png"))
    if importlib.util.find_spec("matplotlib"):
        assert len(charts) == 1 and charts[0].read_bytes()[:4] == b"\x89PNG"
    else:
        assert not charts and "matplotlib is not installed" in result.stdout


def test_bench_rejects_an_unknown_part(tmp_path: Path) -> None:
    result = nanotc_cli("bench", "w9", "--no-csv", cwd=tmp_path)
    assert result.returncode != 0 and "unknown workloads: w9" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("usage: nanotc bench ")


def test_bench_help_names_the_command() -> None:
    result = nanotc_cli("bench", "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: nanotc bench ")


def test_peak_prints_per_core_peaks() -> None:
    result = nanotc_cli("peak")
    assert result.returncode == 0, result.stderr
    assert "fp32 peak:" in result.stdout and "fp64 peak:" in result.stdout


def test_the_peak_script_runs_from_a_checkout() -> None:
    """`python bench/peak.py`, as its docstring says, without `bench` importable as a package."""
    script = Path(__file__).resolve().parents[2] / "bench" / "peak.py"
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=300, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "fp32 peak:" in result.stdout


def test_help_lists_every_command_and_options_are_checked() -> None:
    result = nanotc_cli("--help")
    for command in ("check", "dump", "run", "compile", "tune", "bench", "peak", "cache"):
        assert command in result.stdout
    wrong = nanotc_cli("check", "examples/fused_kernel.ir", "--bogus")
    assert wrong.returncode == 2 and "unrecognized arguments: --bogus" in wrong.stderr


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--threads", "0"], "argument --threads: expected at least 1, got 0"),
        (["--threads", "1,-3"], "argument --threads: expected at least 1, got -3"),
        (["--repeats", "0"], "argument --repeats: expected at least 1, got 0"),
        (["--warmup", "x"], "argument --warmup: expected an integer, got 'x'"),
    ],
)
def test_bench_counts_out_of_range_are_usage_errors(option: list[str], message: str) -> None:
    """Before any workload runs (--threads 0 was a ZeroDivisionError inside W2)."""
    result = nanotc_cli("bench", "w2", "--quick", *option)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
