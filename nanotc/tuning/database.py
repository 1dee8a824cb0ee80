"""The tuning database: the choices `nanotc tune` measured best, per target and gemm signature.

One JSON file, `<cache directory>/tuning.json` (see `nanotc.runtime.cache`):

    {"format": 1,
     "targets": {"<target id>": {"<signature key>": {"tile": [mv, nr], "blocking": [mc, kc, nc],
                                                    "seconds": ..., "analytical_seconds": ...,
                                                    "kernel": "...", "tuned": "<date>"}}}}

The target id names the target and hashes its whole description, so choices measured on one
CPU never apply to another. `nanotc.compile` builds its default `CompileOptions` from the
entries of its target (`options_for`); `NANOTC_TUNING=0` ignores the database. The options are
part of the kernel cache's key, so a new tuning result recompiles what it may change.

Reads are cached by the file's modification time and size. Writers hold an exclusive lock on
`tuning.json.lock` around read-modify-write and replace the file atomically, so concurrent
tuning runs in several processes merge their results.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nanotc.lowering.choices import DEFAULT_OPTIONS, CompileOptions, GemmChoice
from nanotc.runtime.cache import NoCacheDirectory, cache_directory, open_regular
from nanotc.targets import Target

FORMAT = 1
_read_cache: dict[Path, tuple[tuple[float, int], dict[str, Any]]] = {}
_lock = threading.Lock()


def database_path() -> Path:
    return cache_directory() / "tuning.json"


def target_id(target: Target) -> str:
    digest = hashlib.sha256(repr(asdict(target)).encode()).hexdigest()[:12]
    return f"{target.name}-{target.llvm_cpu}-{digest}"


def enabled() -> bool:
    return os.environ.get("NANOTC_TUNING", "1").strip().lower() not in ("0", "false", "no", "off")


def entries(target: Target, path: Path | None = None) -> dict[str, dict[str, Any]]:
    """Signature key -> stored record, for one target."""
    data = _read(path or database_path())
    found: dict[str, dict[str, Any]] = data.get("targets", {}).get(target_id(target), {})
    return found


def options_for(target: Target) -> CompileOptions:
    """The tuned choices of `target` (none when tuning is disabled or nothing was tuned)."""
    if not enabled():
        return DEFAULT_OPTIONS
    try:
        stored = entries(target)
    except NoCacheDirectory:  # no directory, so no database (the kernel cache warns)
        return DEFAULT_OPTIONS
    choices = {}
    for key, record in stored.items():
        try:
            choices[key] = GemmChoice.from_json(record)
        except ValueError:
            continue  # a hand-edited record that does not parse is skipped
    return CompileOptions.of(choices) if choices else DEFAULT_OPTIONS


def check_writable(path: Path | None = None) -> None:
    """OSError unless `record` could write the database: checked before a search rather
    than after it, when its results would be lost."""
    path = path or database_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.exists() and not path.is_file():
        raise OSError(errno.EISDIR, "the tuning database is not a regular file", str(path))
    if not os.access(path.parent, os.W_OK):
        raise OSError(
            errno.EACCES, "not writable: the tuning database cannot be stored", str(path.parent)
        )


def record(
    target: Target, results: Mapping[str, Mapping[str, Any]], path: Path | None = None
) -> Path:
    """Store (replace) the records of `results` for `target`; returns the database's path."""
    path = path or database_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # as the kernel cache's
    with _exclusive(path):
        data = _read(path, fresh=True)
        data["format"] = FORMAT
        section = data.setdefault("targets", {}).setdefault(target_id(target), {})
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        for key, value in results.items():
            section[key] = {**value, "tuned": stamp}
        _write(path, data)
    return path


def forget(target: Target | None = None, path: Path | None = None) -> int:
    """Delete the records of one target (or all); how many were deleted."""
    path = path or database_path()
    if not path.exists():
        return 0
    with _exclusive(path):
        data = _read(path, fresh=True)
        targets = data.get("targets", {})
        if target is None:
            removed = sum(len(v) for v in targets.values())
            targets.clear()
        else:
            removed = len(targets.pop(target_id(target), {}))
        _write(path, data)
    return removed


def _read(path: Path, fresh: bool = False) -> dict[str, Any]:
    try:
        stat = path.stat()
    except OSError:
        return {}
    stamp = (stat.st_mtime, stat.st_size)
    with _lock:
        cached = _read_cache.get(path)
        if cached is not None and cached[0] == stamp and not fresh:
            return json.loads(json.dumps(cached[1]))  # a copy callers may modify
    try:
        with open_regular(path) as f:
            data = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested past the parser
        return {}  # unreadable or damaged: as if empty (the next record rewrites it)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return {}
    data = _well_formed(data)
    with _lock:
        _read_cache[path] = (stamp, data)
    return json.loads(json.dumps(data))


def _well_formed(data: dict[str, Any]) -> dict[str, Any]:
    """`data` without what does not have the database's shape (targets and their records are
    JSON objects; a hand edit may have made them anything): only that part is ignored."""
    targets = data.get("targets")
    kept = {
        target: {key: r for key, r in section.items() if isinstance(r, dict)}
        for target, section in (targets.items() if isinstance(targets, dict) else ())
        if isinstance(section, dict)
    }
    return {**data, "targets": kept}


def _write(path: Path, data: dict[str, Any]) -> None:
    fd, temporary = tempfile.mkstemp(prefix=".tuning.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        try:
            os.replace(temporary, path)
        except OSError as error:  # name the database, not the temporary file (a user's error)
            raise OSError(error.errno, error.strerror, str(path)) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """An exclusive lock between processes (POSIX `flock`; elsewhere threads only)."""
    with _lock_file(path) as f:
        try:
            import fcntl
        except ImportError:  # not POSIX: the atomic replace still keeps the file whole
            yield
            return
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def _lock_file(path: Path) -> Iterator[Any]:
    with open(path.with_name(path.name + ".lock"), "a+b") as f:
        yield f
