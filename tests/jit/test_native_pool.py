"""The native thread pool of multi-threaded launches (`nanotc.runtime.pool`): every chunk runs
once, on spinning or sleeping workers, from concurrent Python threads, in forked children, and
the process exits cleanly with its workers running; Ctrl-C during starts, stops and compiles."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from nanotc.runtime import jit, pool
from nanotc.runtime.interrupts import interrupts_held
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


def test_a_child_forked_while_another_thread_compiles_runs_on_the_inherited_pool_code() -> None:
    """The parent's pool has run and another thread is compiling (inside LLVM, holding
    llvmlite's lock) when the process forks: the child neither frees the parent's pool nor
    compiles the pool's code again, so its fork returns and its two-thread launch runs (2 of
    10 children hung inside os.fork when the fork handler freed the parent's pool)."""
    result = run_python(
        f"""
        import os, threading, time, numpy as np, nanotc
        kernel = nanotc.compile({HITS!r}, cache=False)["k"]
        kernel(np.zeros(8, np.int32), group_size=8, num_threads=2)  # the parent's pool runs
        def compiling():
            for i in range(200):
                nanotc.compile({HITS!r} + f"; {{i}}", cache=False)
        threading.Thread(target=compiling, daemon=True).start()
        time.sleep(0.2)
        hung = 0
        for _ in range(10):
            pid = os.fork()
            if pid == 0:
                hits = np.zeros(64, np.int32)
                kernel(hits, group_size=64, num_threads=2)
                os._exit(0 if (hits == 1).all() else 3)
            for _ in range(100):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    assert os.waitstatus_to_exitcode(status) == 0
                    break
                time.sleep(0.05)
            else:
                hung += 1
                os.kill(pid, 9)
                os.waitpid(pid, 0)
        print("hung", hung)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["hung", "0"]


def ctrl_c_during(function: object) -> object:
    """`function` (a native entry point of the pool) with a SIGINT sent just before it runs:
    Python sees it at the first bytecode after the native call returns. It is sent to this
    thread, which then has it before the call (sent to the process, any thread may take it)."""

    def interrupted(*args: object) -> object:
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        return function(*args)  # type: ignore[operator]

    return interrupted


def worker_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_ctrl_c_during_a_pool_stop_is_raised_once_the_workers_are_joined(monkeypatch) -> None:
    """A KeyboardInterrupt between the native stop and `workers = 0` left a pool that claimed
    workers it no longer had: the next launch on it waited forever."""
    workers = pool.NativePool(2)
    before = worker_threads()
    monkeypatch.setattr(workers._code, "stop", ctrl_c_during(workers._code.stop))
    # held only under Python's own handler (`interrupts_held`): another one would take it
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        workers.stop()
    assert workers.workers == 0 and worker_threads() == before - 2


def test_ctrl_c_during_a_pool_start_stops_the_started_workers(monkeypatch) -> None:
    """A KeyboardInterrupt as the workers start must not leave them running on a pool nobody
    holds (the process crashed once it was freed)."""
    before = worker_threads()
    code = pool._pool_code(pool.SPIN_CYCLES)
    monkeypatch.setattr(code, "start", ctrl_c_during(code.start))
    with pytest.raises(KeyboardInterrupt):
        pool.NativePool(3)
    assert worker_threads() == before
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_while_the_process_pool_grows_records_the_new_pool(monkeypatch) -> None:
    """The interrupt is raised after the grown pool is the process's: a launch right after
    runs on it."""
    wanted = pool.pool_for(2).workers + 2  # started before the interrupts, when run alone
    code = pool._pool_code(pool.SPIN_CYCLES)
    monkeypatch.setattr(code, "start", ctrl_c_during(code.start))
    with pytest.raises(KeyboardInterrupt):
        pool.pool_for(wanted + 1)
    monkeypatch.undo()
    assert pool.pool_for(wanted + 1).workers == wanted
    assert (hits_after(100, wanted + 1) == 1).all()


def test_interrupts_held_raises_after_the_block() -> None:
    with pytest.raises(KeyboardInterrupt), interrupts_held():
        os.kill(os.getpid(), signal.SIGINT)
        finished = True
    assert finished and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with interrupts_held():
        pass  # nothing noted, nothing raised


def test_ctrl_c_storm_during_compiles_raises_keyboard_interrupt_only() -> None:
    """SIGINT at random moments of cold and cached compiles: each is a KeyboardInterrupt (or
    nothing), never an abort. An interrupt inside llvmlite's string handling freed a string
    twice (`free(): double free detected`, SIGABRT) within seconds."""
    result = run_python(
        f"""
        import os, random, signal, threading, time, nanotc
        rng = random.Random(1)
        def storm():
            while True:
                time.sleep(rng.uniform(0.0005, 0.02))
                os.kill(os.getpid(), signal.SIGINT)
        for i in range(7):
            nanotc.compile({HITS!r} + f"; {{i}}")  # the even ones below are memory hits
        compiles = interrupts = i = 0
        threading.Thread(target=storm, daemon=True).start()
        end = time.time() + 3
        try:
            while time.time() < end:
                i += 1
                try:
                    nanotc.compile({HITS!r} + f"; {{i % 7}}", cache=i % 2 == 0)
                    compiles += 1
                except KeyboardInterrupt:
                    interrupts += 1
        except KeyboardInterrupt:
            pass  # the storm's signal may also land in this loop's own lines
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("compiles", compiles > 0, "interrupts", interrupts > 0)
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["compiles", "True", "interrupts", "True"]


_TRY_RUN = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * 5, ctypes.c_int64, ctypes.c_int64)


def test_native_launches_get_the_pool_only_while_no_launch_has_it(recorder: jit.JitModule) -> None:
    """`nanotc_pool_try_run` (native launches) runs nothing and returns -1 while the pool is
    taken, where it has too few workers, and once it is stopped; a second stop returns."""
    workers = pool.NativePool(1)
    try_run = _TRY_RUN(workers._code.try_run_address)
    bounds = np.array([(0, 1), (1, 2)], dtype=np.int64)
    slots = np.zeros(8, dtype=np.int64)
    launching = workers._state[16:24].view(np.int64)

    def attempt(chunks: int) -> int:
        return try_run(workers._state_at, workers._boxes_at, recorder.address("record"),
                       slots.ctypes.data, bounds.ctypes.data, chunks, 2)  # fmt: skip

    assert attempt(2) == 3 and list(slots[:2]) == [1, 2]
    launching[0] = 1
    assert attempt(2) == -1
    launching[0] = 0
    assert attempt(3) == -1  # two workers wanted
    assert list(slots[:2]) == [1, 2]
    workers.stop()
    assert attempt(2) == -1 and attempt(1) == -1
    workers._call_stop(1)  # stopped before: returns at once
    assert list(slots[:2]) == [1, 2]


def test_python_launches_try_the_published_pool_first(recorder: jit.JitModule, monkeypatch) -> None:
    """`pool.try_published` runs chunks on the process's pool as a native launch would: the
    chunks' codes when the pool is free and has the workers; None, having run nothing, while
    another launch has it, where it has too few workers, or where no pool is published."""
    workers = pool.pool_for(2)
    bounds = np.array([(0, 1), (1, 2), (2, 3)], dtype=np.int64)
    slots = np.zeros(8, dtype=np.int64)
    launching = workers._state[16:24].view(np.int64)

    def attempt(chunks: int) -> int | None:
        return pool.try_published(recorder.address("record"), slots.ctypes.data,
                                  bounds.ctypes.data, chunks, 3)  # fmt: skip

    assert attempt(2) == 3 and list(slots[:2]) == [1, 2]
    launching[0] = 1
    try:
        assert attempt(2) is None
    finally:
        launching[0] = 0
    assert attempt(workers.workers + 2) is None
    monkeypatch.setattr(pool, "_published_try_run", None)
    assert attempt(2) is None
    assert list(slots[:3]) == [1, 2, 0]


def test_a_prepared_launch_waits_its_turn_while_the_pool_is_taken() -> None:
    """A launch of several chunks that finds the published pool taken runs nothing, then
    waits for the pool (`pool.run_chunks`) instead of failing."""
    hits = np.zeros(64, np.int32)
    launch = compiled(HITS)["k"].prepare(hits, group_size=64, num_threads=2)
    launch()
    launching = pool.pool_for(2)._state[16:24].view(np.int64)
    launching[0] = 1
    runner = threading.Thread(target=launch)
    try:
        runner.start()
        runner.join(0.2)
        assert runner.is_alive() and (hits == 1).all()
    finally:
        launching[0] = 0
        runner.join()
    assert (hits == 2).all()
