"""The bench package asks the peers' thread pools to sleep when idle, before numpy loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import os, bench; print(os.environ['OPENBLAS_THREAD_TIMEOUT'], os.environ['OMP_WAIT_POLICY'])"
)


def _probe(**env: str) -> str:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OPENBLAS_THREAD_TIMEOUT", "OMP_WAIT_POLICY")
    }
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env={**clean, "PYTHONPATH": str(ROOT), **env},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return result.stdout.strip()


def test_peers_threads_sleep_when_idle_by_default() -> None:
    assert _probe() == "4 PASSIVE"


def test_a_users_setting_is_kept() -> None:
    assert _probe(OPENBLAS_THREAD_TIMEOUT="28", OMP_WAIT_POLICY="ACTIVE") == "28 ACTIVE"
