"""The kernel cache: hits in memory and from disk (in another process), keys that change with
everything that changes the code, damaged entries, disabling, and several threads and
processes compiling at once. No timing is asserted; `origin` says where code came from."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import nanotc
from nanotc.lowering.choices import CompileOptions, GemmChoice
from nanotc.runtime import cache as kernel_cache
from nanotc.targets import get

SCALE = """func @scale(%alpha: f64, %x: memref<f64x?>) {
    %g = group_id
    %v = load %x[%g] : memref<f64x?>
    %w = arith.mul %v, %alpha : f64
    store %w, %x[%g] : memref<f64x?>
}
"""

CHILD = f"""
import sys, numpy as np, nanotc
c = nanotc.compile({SCALE!r})
x = np.arange(4.0)
c["scale"](2.0, x, group_size=4)
assert x.tolist() == [0, 2, 4, 6], x
print(c.origin)
"""


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("NANOTC_CACHE_DIR", str(directory))
    monkeypatch.delenv("NANOTC_CACHE", raising=False)
    return directory


def entries(directory: Path) -> list[Path]:
    return sorted((directory / "kernels").glob("*/*.nko"))


def variant(i: int) -> str:
    return SCALE.replace("@scale", f"@scale{i}")


def run_scale(compilation: nanotc.Compilation, name: str = "scale") -> list[float]:
    x = np.arange(4.0)
    compilation[name](3.0, x, group_size=4)
    return x.tolist()


def test_second_compile_in_a_process_hits_memory(cache_dir: Path) -> None:
    first = nanotc.compile(SCALE)
    second = nanotc.compile(SCALE)
    assert (first.origin, second.origin) == ("compiled", "memory")
    assert second.native is first.native
    assert run_scale(second) == [0, 3, 6, 9]
    assert len(entries(cache_dir)) == 1


def test_another_process_loads_the_entry_from_disk(cache_dir: Path) -> None:
    outputs = [
        subprocess.run(
            [sys.executable, "-c", CHILD],
            capture_output=True,
            text=True,
            timeout=120,
            env=os.environ.copy(),
        )
        for _ in range(2)
    ]
    assert [o.returncode for o in outputs] == [0, 0], outputs[0].stderr + outputs[1].stderr
    assert [o.stdout.strip() for o in outputs] == ["compiled", "disk"]


def test_stages_are_still_available_after_a_hit(cache_dir: Path) -> None:
    nanotc.compile(SCALE)
    kernel_cache._caches.clear()  # as in a new process: only the disk entry is left
    hit = nanotc.compile(SCALE)
    assert hit.origin == "disk"
    assert "define" in hit.optimized_ir() and "scale:" in hit.assembly()


def test_key_changes_with_text_target_options_and_version(monkeypatch) -> None:
    host, avx2 = get(None), get("avx2")
    base = kernel_cache.cache_key(SCALE, host, "")
    assert kernel_cache.cache_key(SCALE, host, "") == base
    assert kernel_cache.cache_key(SCALE + "\n", host, "") != base
    assert kernel_cache.cache_key(SCALE, avx2, "") != base
    tuned = CompileOptions.of({"direct f64,f64,f64 n.n 8x8x8 r0": GemmChoice(tile=(1, 4))})
    assert kernel_cache.cache_key(SCALE, host, tuned.fingerprint()) != base
    monkeypatch.setattr(nanotc, "__version__", "999.0")
    kernel_cache.compiler_fingerprint.cache_clear()
    try:
        assert kernel_cache.cache_key(SCALE, host, "") != base
    finally:
        monkeypatch.undo()
        kernel_cache.compiler_fingerprint.cache_clear()


def test_damaged_entry_is_a_miss_and_is_rewritten(cache_dir: Path) -> None:
    nanotc.compile(SCALE)
    (entry,) = entries(cache_dir)
    data = entry.read_bytes()
    entry.write_bytes(data[:-10] + b"\0" * 10)  # same length, wrong checksum
    kernel_cache._caches.clear()
    again = nanotc.compile(SCALE)
    assert again.origin == "compiled" and run_scale(again) == [0, 3, 6, 9]
    assert entry.read_bytes() != data[:-10] + b"\0" * 10
    header = kernel_cache.read_header(entry)
    assert header is not None and header["kernels"] == ["scale"]


def test_entry_with_a_header_nested_past_the_parser_is_a_miss(cache_dir: Path) -> None:
    nanotc.compile(SCALE)
    (entry,) = entries(cache_dir)
    nested = b"[" * 200_000
    entry.write_bytes(kernel_cache.MAGIC + len(nested).to_bytes(8, "little") + nested)
    assert kernel_cache.read_header(entry) is None
    kernel_cache._caches.clear()
    again = nanotc.compile(SCALE)
    assert again.origin == "compiled" and run_scale(again) == [0, 3, 6, 9]


@pytest.mark.parametrize(
    ("setting", "limit"),
    [("inf", sys.maxsize), ("1e400", sys.maxsize), ("nan", 1 << 30), ("-5", 1 << 30),
     ("x", 1 << 30), ("0.5", 1 << 19)],
)  # fmt: skip
def test_cache_size_limit_from_the_environment(monkeypatch, setting: str, limit: int) -> None:
    monkeypatch.setenv("NANOTC_CACHE_MAX_MB", setting)
    assert kernel_cache._max_bytes() == limit


def test_clear_reports_entries_it_could_not_delete(cache_dir: Path, monkeypatch) -> None:
    nanotc.compile(SCALE)
    nanotc.compile(variant(1))
    kept, *_ = entries(cache_dir)
    unlink = Path.unlink

    def refuse_one(path: Path, missing_ok: bool = False) -> None:
        if path == kept:
            raise PermissionError(13, "Permission denied", str(path))
        unlink(path, missing_ok)

    monkeypatch.setattr(Path, "unlink", refuse_one)
    store = kernel_cache.KernelCache(cache_dir)
    with pytest.raises(OSError, match=r"1 cached kernels could not be deleted .*1 were"):
        store.clear()
    assert entries(cache_dir) == [kept]


def test_disabled_cache_writes_nothing(cache_dir: Path, monkeypatch) -> None:
    assert nanotc.compile(SCALE, cache=False).origin == "compiled"
    monkeypatch.setenv("NANOTC_CACHE", "0")
    assert nanotc.compile(SCALE).origin == "compiled"
    assert nanotc.compile(SCALE).origin == "compiled"
    assert not cache_dir.exists()
    monkeypatch.setenv("NANOTC_CACHE", "memory")
    assert [nanotc.compile(SCALE).origin for _ in range(2)] == ["compiled", "memory"]
    assert not cache_dir.exists()


def test_an_unknown_cache_mode_warns_once_and_means_disk(cache_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("NANOTC_CACHE", "sometimes")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nanotc.compile(variant(3))
        nanotc.compile(variant(4))
    (warning,) = [w for w in caught if "NANOTC_CACHE='sometimes'" in str(w.message)]
    assert "the disk cache is used" in str(warning.message)
    assert warning.filename == __file__
    assert len(entries(cache_dir)) == 2


def test_cache_command_names_a_directory_that_is_a_file(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("NANOTC_CACHE_DIR", str(blocker))
    result = subprocess.run([sys.executable, "-m", "nanotc", "cache"], capture_output=True,
                            text=True, timeout=120, env=os.environ.copy())  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"state: memory only ({blocker} is not a directory)" in result.stdout


def test_unwritable_directory_warns_once_and_still_compiles(tmp_path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("NANOTC_CACHE_DIR", str(blocker / "cache"))
    one_warning_over_two_compiles(1, "not writable")


def one_warning_over_two_compiles(first: int, about: str) -> warnings.WarningMessage:
    """Compiles of kernels `first` and `first + 1`, which run; their one warning `about`
    something, which names the user's call, not a line inside nanotc."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = nanotc.compile(variant(first))
        nanotc.compile(variant(first + 1))
    assert run_scale(compiled, f"scale{first}") == [0, 3, 6, 9]
    (warning,) = [w for w in caught if about in str(w.message)]
    assert warning.filename == __file__
    return warning


def test_special_files_where_entries_belong_are_misses(cache_dir: Path) -> None:
    """A FIFO would block a read, /dev/zero never end one: both count as damaged entries, for
    the kernels and the tuning database alike (in a child process: a hang fails by timeout)."""
    nanotc.compile(SCALE)
    (entry,) = entries(cache_dir)
    entry.unlink()
    os.mkfifo(entry)
    os.mkfifo(cache_dir / "tuning.json")
    kernel_cache._caches.clear()
    child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                           timeout=120, env=os.environ.copy())  # fmt: skip
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "compiled"
    entry.unlink()
    entry.symlink_to("/dev/zero")
    again = nanotc.compile(SCALE)
    assert again.origin == "compiled" and run_scale(again) == [0, 3, 6, 9]
    assert entry.is_file() and not entry.is_symlink()  # rewritten in place of the link


def test_no_home_directory_keeps_code_in_memory_with_one_warning(monkeypatch) -> None:
    """As in a container run as a user without a password entry: `~` cannot be expanded."""
    monkeypatch.setenv("NANOTC_CACHE_DIR", "~no_such_user_of_nanotc/cache")
    monkeypatch.delenv("NANOTC_CACHE", raising=False)
    monkeypatch.setattr(kernel_cache, "_warned_no_directory", [])
    warning = one_warning_over_two_compiles(3, "no kernel cache directory")
    assert "no home directory to find it in (set NANOTC_CACHE_DIR" in str(warning.message)
    result = subprocess.run([sys.executable, "-m", "nanotc", "cache"], capture_output=True,
                            text=True, timeout=120, env=os.environ.copy())  # fmt: skip
    assert result.returncode == 1
    assert "~no_such_user_of_nanotc/cache: no home directory to find it in" in result.stderr


def test_a_relative_xdg_cache_home_is_ignored(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("NANOTC_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert kernel_cache.cache_directory() == tmp_path / ".cache" / "nanotc"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernel_cache.cache_directory() == tmp_path / "xdg" / "nanotc"


def test_threads_compiling_at_once(cache_dir: Path) -> None:
    sources = [variant(i % 3) for i in range(9)]  # three kernels, each asked for three times
    results: list[tuple[str, list[float]]] = [("", [])] * len(sources)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            compilation = nanotc.compile(sources[i])
            results[i] = (compilation.origin, run_scale(compilation, f"scale{i % 3}"))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(sources))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(values == [0, 3, 6, 9] for _, values in results)
    assert sorted(origin for origin, _ in results).count("compiled") == 3  # once per kernel
    assert len(entries(cache_dir)) == 3


def test_processes_compiling_at_once(cache_dir: Path) -> None:
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        for _ in range(3)
    ]
    outputs = [child.communicate(timeout=120) for child in children]
    assert [c.returncode for c in children] == [0, 0, 0], [err for _, err in outputs]
    assert {out.strip() for out, _ in outputs} <= {"compiled", "disk"}
    (entry,) = entries(cache_dir)
    assert kernel_cache.read_header(entry) is not None
    assert not list((cache_dir / "kernels").glob("*/.*.tmp"))  # no temporary file left


def test_prune_keeps_the_disk_cache_under_its_limit(cache_dir: Path) -> None:
    for i in range(4):
        nanotc.compile(variant(i))
    files = entries(cache_dir)
    assert len(files) == 4
    for age, path in enumerate(files):  # oldest first in this order
        os.utime(path, (1000 + age, 1000 + age))
    store = kernel_cache.KernelCache(cache_dir, max_bytes=sum(p.stat().st_size for p in files) - 1)
    store.prune()  # over the limit: the oldest go until under three quarters of it
    assert entries(cache_dir) == files[2:]


def test_cache_command_reports_and_clears(cache_dir: Path) -> None:
    nanotc.compile(SCALE)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nanotc", "cache", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=os.environ.copy(),
        )

    info = cli("info")
    assert info.returncode == 0 and "entries: 1" in info.stdout and str(cache_dir) in info.stdout
    assert cli("dir").stdout.strip() == str(cache_dir)
    cleared = cli("clear")
    assert cleared.returncode == 0 and "removed 1 cached kernels" in cleared.stdout
    assert entries(cache_dir) == []


def test_cache_command_lists_the_tuning_records_compiles_take(cache_dir: Path) -> None:
    from nanotc.tuning import database

    host = get(None)
    records = {"good": {"tile": [2, 8]}, "bool": {"tile": [True, 8]}, "long": {"tile": [2, 8, 3]}}
    database.record(host, records)
    result = subprocess.run([sys.executable, "-m", "nanotc", "cache"], capture_output=True,
                            text=True, timeout=120, env=os.environ.copy())  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert (
        "tuned gemm signatures for this host: 1 (2 malformed records, which compiles ignore)"
        in lines
    )
    assert "  good: [2, 8]" in lines and not any("bool" in x or "long" in x for x in lines)


def test_cache_clear_names_a_tuning_database_it_cannot_replace(cache_dir: Path) -> None:
    (cache_dir / "tuning.json").mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, "-m", "nanotc", "cache", "clear", "--tuning"],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
    )
    assert result.returncode == 1
    assert result.stderr == f"nanotc cache: {cache_dir / 'tuning.json'}: Is a directory\n"
    assert not list(cache_dir.glob("*.tmp"))  # no temporary left


@pytest.mark.parametrize("cache", [False, True])
def test_machine_code_lives_as_long_as_what_can_run_it(cache_dir: Path, cache: bool) -> None:
    """A kernel or a prepared launch keeps its compilation's machine code; once neither is
    left (and the memory cache has let the program go), the JIT engine is freed: a process
    compiling many kernels holds only the ones it can still run."""
    import gc
    import weakref

    compilation = nanotc.compile(SCALE, cache=cache)
    native = weakref.ref(compilation.native)
    kernel = compilation["scale"]
    x = np.arange(4.0)
    launch = kernel.prepare(2.0, x, group_size=4)
    del compilation, kernel
    gc.collect()
    launch()
    assert native() is not None and x.tolist() == [0, 2, 4, 6]
    del launch
    if cache:
        kernel_cache.active(True).clear()  # type: ignore[union-attr]
    gc.collect()
    assert native() is None


RUNTIME_CHILD = f"""
import numpy as np, nanotc
kernel = nanotc.compile({SCALE!r})["scale"]
x = np.arange(4.0)
kernel(2.0, x, group_size=4, num_threads=2)  # binds, starts the pool
kernel(2.0, x, group_size=4, num_threads=2)  # natively
assert x.tolist() == [0, 4, 8, 12], x
"""


def test_the_pool_and_native_launch_code_is_cached_beside_the_kernels(cache_dir: Path) -> None:
    """The first process compiles pool.ll and fast_launch.ll into `runtime/`; the next loads
    them from there (read and touched, not rewritten); neither counts as a kernel."""

    def child() -> None:
        result = subprocess.run([sys.executable, "-c", RUNTIME_CHILD], capture_output=True,
                                text=True, timeout=120, env=os.environ.copy())  # fmt: skip
        assert result.returncode == 0, result.stderr

    child()
    runtime = sorted((cache_dir / "runtime" / "kernels").glob("*/*.nko"))
    assert sorted(kernel_cache.read_header(p)["source"] for p in runtime) == [  # type: ignore[index]
        "fast_launch.ll", "pool.ll"
    ]  # fmt: skip
    assert len(entries(cache_dir)) == 1
    before = {p: p.stat().st_ino for p in runtime}
    for path in runtime:
        os.utime(path, (1000, 1000))
    child()
    assert {p: p.stat().st_ino for p in runtime} == before
    assert all(p.stat().st_mtime > 1000 for p in runtime)
