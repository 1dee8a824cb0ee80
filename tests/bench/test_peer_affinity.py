"""Loading the peers leaves the process on every CPU it had: Debian's OpenMP libblis,
initialised after the libxsmm driver, binds the calling thread to CPU 0, and threads started
after it (nanotc's pool workers among them) would all share that core."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import os
from bench.peers import discover
before = sorted(os.sched_getaffinity(0))
peers = discover()
print(before == sorted(os.sched_getaffinity(0)), peers.blis is not None, before)
"""


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs two CPUs to be bound to one",
)
def test_loading_the_peers_keeps_every_cpu() -> None:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            cwd=ROOT, env=environment, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    kept, _, _ = result.stdout.split(" ", 2)
    assert kept == "True", result.stdout
