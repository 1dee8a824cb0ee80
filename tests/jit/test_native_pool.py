"""The native thread pool of multi-threaded launches (`nanotc.runtime.pool`): every chunk runs
once, on spinning or sleeping workers, from concurrent Python threads, in forked children, and
the process exits cleanly with its workers running."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from nanotc.runtime import jit, pool
from nanotc.targets import host

from .helpers import compiled

HITS = """func @k(%hits: memref<i32x?>) {
    %i = group_id
    %h = load %hits[%i] : memref<i32x?>
    %h1 = arith.add %h, 1 : i32
    store %h1, %hits[%i] : memref<i32x?>
}"""

# An entry point with the packed signature that counts each chunk's runs in the slots (word
# `begin` grows by `end`) and returns 1 << begin, so the codes of every chunk are visible.
RECORDER = """
define i32 @record(ptr %slots, i64 %begin, i64 %end, i64 %size) {
  %at = getelementptr inbounds i64, ptr %slots, i64 %begin
  %old = load i64, ptr %at, align 8
  %new = add i64 %old, %end
  store i64 %new, ptr %at, align 8
  %bit = shl i64 1, %begin
  %code = trunc i64 %bit to i32
  ret i32 %code
}
"""


def hits_after(groups: int, threads: int) -> np.ndarray:
    hits = np.zeros(groups, np.int32)
    compiled(HITS)["k"](hits, group_size=groups, num_threads=threads)
    return hits


def test_the_pool_grows_and_every_group_runs_once() -> None:
    for threads in (2, 5, 3, 8, 1):
        for groups in (0, 1, 4, 9, 100):
            assert (hits_after(groups, threads) == 1).all(), (threads, groups)
    assert pool.pool_for(2).workers >= 7  # grown to 8 threads, never shrunk


@pytest.fixture(scope="module")
def recorder() -> jit.JitModule:
    return jit.JitModule(jit.optimize(RECORDER, host()), host())


@pytest.mark.parametrize("spin_cycles", [0, pool.SPIN_CYCLES])
def test_every_chunk_runs_once_and_its_code_reaches_the_caller(
    recorder: jit.JitModule, spin_cycles: int
) -> None:
    """Spin budget 0: the workers sleep between launches, so the caller usually finds their
    chunks unclaimed and runs them itself; spinning workers usually claim their own. Either
    way each chunk runs exactly once."""
    workers = pool.NativePool(3, spin_cycles=spin_cycles)
    try:
        for chunks in (1, 2, 4, 3, 4):
            bounds = np.array([(c, c + 1) for c in range(chunks)], dtype=np.int64)
            slots = np.zeros(8, dtype=np.int64)
            for _ in range(50):
                code = workers.run(
                    recorder.address("record"), slots.ctypes.data, bounds.ctypes.data, chunks, 9
                )
                assert code == (1 << chunks) - 1
            assert list(slots[:chunks]) == [50 * (c + 1) for c in range(chunks)]
            assert not slots[chunks:].any()
    finally:
        workers.stop()
    assert workers.workers == 0


def test_concurrent_launches_from_python_threads() -> None:
    kernel = compiled(HITS)["k"]
    outputs = [np.zeros(257, np.int32) for _ in range(4)]

    def launch_many(hits: np.ndarray) -> None:
        for _ in range(25):
            kernel(hits, group_size=len(hits), num_threads=3)

    runners = [threading.Thread(target=launch_many, args=(h,)) for h in outputs]
    for r in runners:
        r.start()
    for r in runners:
        r.join()
    assert all((h == 25).all() for h in outputs)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


def test_a_forked_child_starts_its_own_workers() -> None:
    result = run_python(
        f"""
        import os, numpy as np, nanotc
        kernel = nanotc.compile({HITS!r}, cache=False)["k"]
        hits = np.zeros(64, np.int32)
        kernel(hits, group_size=64, num_threads=2)  # the parent's workers exist now
        pid = os.fork()
        if pid == 0:
            kernel(hits, group_size=64, num_threads=2)
            os._exit(0 if (hits == 2).all() else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status), "parent", int(hits.sum()))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["child", "0", "parent", "64"]


def test_the_process_exits_cleanly_with_workers_spinning() -> None:
    """Workers are joined before the JIT frees their code: no crash at exit."""
    result = run_python(
        f"""
        import numpy as np, nanotc
        kernel = nanotc.compile({HITS!r}, cache=False)["k"]
        hits = np.zeros(1000, np.int32)
        kernel(hits, group_size=1000, num_threads=2)
        kernel(hits, group_size=1000, num_threads=4)
        print(int(hits.sum()))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2000"


def test_a_launch_survives_another_thread_growing_the_pool() -> None:
    """One thread launches on two threads while another keeps asking for more, so the pool is
    stopped and replaced between the first thread's lookup and its run: the run must go to
    the new pool (it hung on the stopped one), and every work-group still run once."""
    result = run_python(
        f"""
        import faulthandler, threading, numpy as np, nanotc
        faulthandler.dump_traceback_later(60, exit=True)
        kernel = nanotc.compile({HITS!r}, cache=False)["k"]
        done = threading.Event()
        launches = []
        steady_hits, growing_hits = np.zeros(512, np.int32), np.zeros(512, np.int32)
        def steady():
            while not done.is_set():
                kernel(steady_hits, group_size=512, num_threads=2)
                launches.append(1)
        def growing():
            for threads in range(3, 40):
                kernel(growing_hits, group_size=512, num_threads=threads)
            done.set()
        threads = [threading.Thread(target=steady), threading.Thread(target=growing)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert (steady_hits == len(launches)).all() and (growing_hits == 37).all()
        print("ok", len(launches))
        """
    )
    assert result.returncode == 0 and result.stdout.startswith("ok"), result.stderr
