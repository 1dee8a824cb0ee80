"""Running the `nanotc` command in a subprocess, as a user would, for the tools' tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def nanotc_cli(
    *args: str, cwd: Path = ROOT, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    """`python -m nanotc ARGS` in `cwd`, with this process's environment (its cache and
    tuning directories, see conftest.py); output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "nanotc", *args],
        capture_output=True, text=True, cwd=cwd, timeout=timeout, env=os.environ.copy(),
    )  # fmt: skip
