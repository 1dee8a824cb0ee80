"""The README's main job: the example compiles, runs, agrees with numpy and reports speed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "fused_kernel.py"


def test_main_job_checks_against_numpy_and_prints_speed() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--groups", "777", "--repeat", "2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "max relative error" in done.stdout and " ok" in done.stdout
    assert "777 work-groups" in done.stdout and "GFLOP/s" in done.stdout
