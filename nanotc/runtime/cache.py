"""The kernel cache: compiled machine code, in memory and on disk, keyed by everything that
determines it.

The key is a SHA-256 over the cache format, nanotc's version and a digest of nanotc's own
source files' names, sizes and times (so an edited checkout never loads code an older compiler
made), llvmlite's and LLVM's versions, the whole target description, the compile options
(tuned choices) and the program text. An entry holds the object file of the program's
kernels (`jit.jit_object_code`); a hit links it into the process (`jit.ObjectModule`),
skipping lowering, LLVM's optimisation and code generation. The program itself is re-parsed
from the source by the caller (a few milliseconds): launching needs its checked signatures.

Where: `$NANOTC_CACHE_DIR`, else `$XDG_CACHE_HOME/nanotc`, else `~/.cache/nanotc`;
`NANOTC_CACHE=0` disables the cache, `NANOTC_CACHE=memory` keeps it in memory only. Entries
live in `kernels/<xx>/<key>.nko`; nanotc's own runtime code (`runtime_module`) in
`runtime/kernels/`, apart from the kernels that `nanotc cache` counts and clears.

Trust: entries are machine code that a hit runs, so the directory is created private to its
owner; point `NANOTC_CACHE_DIR` only at a directory no one else can write.

Concurrency: an entry is written to a temporary file in its directory and renamed into place
(`os.replace` is atomic), so a reader sees a whole entry or none, and processes compiling the
same kernel at once each write a complete, identical entry. Every read is validated (magic,
lengths, checksum, key); a damaged entry counts as a miss and is rewritten. In a process, a
lock per key makes threads compiling the same kernel wait for the first one. Caching is best
effort: a directory that cannot be written only costs the disk half, with one warning.

The disk cache is kept under `$NANOTC_CACHE_MAX_MB` (default 1024) by deleting the least
recently used entries; `nanotc cache info|clear` inspects or empties it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import struct
import sys
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from stat import S_ISREG
from typing import Any, BinaryIO

from nanotc.runtime import jit
from nanotc.targets import Target

FORMAT = 1
MAGIC = b"nanotc kernel cache\n"
SUFFIX = ".nko"
MEMORY_ENTRIES = 256
DEFAULT_MAX_MB = 1024
PRUNE_EVERY = 64  # stores between size checks of the disk cache


_OFF = ("0", "false", "no", "off")
_DISK = ("", "1", "true", "yes", "on", "disk")
_warned_modes: set[str] = set()


def mode_from_environment() -> str:
    """`NANOTC_CACHE`: "off" (0, false, no, off), "memory", or "disk" (1, true, yes, on,
    disk; another value warns once and means disk)."""
    value = os.environ.get("NANOTC_CACHE", "1").strip().lower()
    if value in _OFF:
        return "off"
    if value == "memory":
        return "memory"
    if value not in _DISK and value not in _warned_modes:
        _warned_modes.add(value)
        warnings.warn(f"nanotc: NANOTC_CACHE={value!r} is none of {', '.join(_OFF)}, memory, "
                      f"{', '.join(_DISK[1:])}: the disk cache is used",
                      RuntimeWarning, stacklevel=_caller_outside_nanotc())  # fmt: skip
    return "disk"


class NoCacheDirectory(OSError):
    """The cache directory's path starts at a home directory that cannot be found (no
    `$HOME` and no password entry, as in a container run as an arbitrary user; `~name` of
    no such user)."""


def cache_directory() -> Path:
    """Where the kernel cache and the tuning database live (NoCacheDirectory where that
    cannot be told). A relative `$XDG_CACHE_HOME` is ignored, as the XDG specification asks."""
    explicit = os.environ.get("NANOTC_CACHE_DIR")
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg if os.path.isabs(xdg) else os.path.join("~", ".cache")) / "nanotc"
    path = Path(explicit) if explicit else base
    try:
        return path.expanduser()
    except RuntimeError:  # pathlib's "Could not determine home directory."
        raise NoCacheDirectory(
            errno.ENOENT,
            "no home directory to find it in (set NANOTC_CACHE_DIR to an absolute path)",
            str(path),
        ) from None


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading where it is a regular file; OSError for anything else: a FIFO
    would block the read, a device never end it (a damaged or hostile cache directory)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """nanotc's version, the name, size and modification time of each of its source files,
    llvmlite's and LLVM's versions, as one digest. File metadata rather than contents keeps
    this to a millisecond; an edit changes the time even when it keeps the size."""
    import llvmlite
    import llvmlite.binding as llvm

    import nanotc

    digest = hashlib.sha256()
    digest.update(f"{FORMAT} {nanotc.__version__} {llvmlite.__version__}".encode())
    digest.update(str(llvm.llvm_version_info).encode())
    package = Path(nanotc.__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(package)} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def cache_key(text: str, target: Target, options_fingerprint: str) -> str:
    """The key of a program's machine code."""
    digest = hashlib.sha256()
    for part in (compiler_fingerprint(), repr(asdict(target)), options_fingerprint, text):
        # surrogatepass: text read with errors="surrogateescape" holds lone surrogates
        encoded = part.encode("utf-8", "surrogatepass")
        digest.update(struct.pack("<Q", len(encoded)))  # length-prefixed: parts cannot blur
        digest.update(encoded)
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheInfo:
    directory: Path
    entries: int
    bytes: int
    memory_entries: int


class KernelCache:
    """Machine code by key: an LRU of loaded code in memory over a directory of entries."""

    def __init__(self, directory: Path | None, max_bytes: int = DEFAULT_MAX_MB << 20):
        self.directory = directory
        self.max_bytes = max_bytes
        self._memory: OrderedDict[str, jit.ObjectModule] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[str, _KeyLock] = {}
        self._stores = 0
        self._warned = False

    # --- lookup ----------------------------------------------------------------------------

    def get_or_build(
        self,
        key: str,
        target: Target,
        build: Callable[[], bytes],
        meta: dict[str, Any],
    ) -> tuple[jit.ObjectModule, str]:
        """Loaded machine code for `key` and where it came from: "memory", "disk", or
        "compiled" (by `build`, which returns a `jit_object_code` object file)."""
        with self._key_lock(key):
            with self._lock:
                code = self._memory.get(key)
                if code is not None:
                    self._memory.move_to_end(key)
                    return code, "memory"
            code, origin = self._load(key, target), "disk"
            if code is None:
                data = build()
                self._write(key, data, meta)
                code, origin = jit.ObjectModule(data, target), "compiled"
            self._remember(key, code)
            return code, origin

    @contextmanager
    def _key_lock(self, key: str) -> Iterator[None]:
        """Serialise the threads that look up one key, so only the first compiles it."""
        with self._lock:
            entry = self._key_locks.setdefault(key, _KeyLock(threading.Lock()))
            entry.users += 1
        try:
            with entry.lock:
                yield
        finally:
            with self._lock:
                entry.users -= 1
                if entry.users == 0:
                    del self._key_locks[key]

    def _remember(self, key: str, code: jit.ObjectModule) -> None:
        with self._lock:
            self._memory[key] = code
            self._memory.move_to_end(key)
            while len(self._memory) > MEMORY_ENTRIES:
                self._memory.popitem(last=False)

    def _load(self, key: str, target: Target) -> jit.ObjectModule | None:
        data = self._read(key)
        if data is None:
            return None
        try:
            return jit.ObjectModule(data, target)
        except RuntimeError:  # an object LLVM refuses: rebuild and overwrite it
            return None

    # --- disk --------------------------------------------------------------------------------

    def path(self, key: str) -> Path | None:
        if self.directory is None:
            return None
        return self.directory / "kernels" / key[:2] / (key + SUFFIX)

    def _read(self, key: str) -> bytes | None:
        path = self.path(key)
        if path is None:
            return None
        try:
            with open_regular(path) as f:
                blob = f.read()
        except OSError:
            return None
        data = decode_entry(blob, key)
        if data is not None:
            _touch(path)  # least recently used entries are pruned first
        return data

    def _write(self, key: str, data: bytes, meta: dict[str, Any]) -> None:
        path = self.path(key)
        if path is None:
            return
        try:
            _make_private(self.directory)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(encode_entry(key, data, meta))
                os.replace(temporary, path)
            except BaseException:
                _unlink(Path(temporary))
                raise
        except OSError as e:
            self._warn(f"nanotc: kernel cache {self.directory} is not writable ({e}); "
                       "compiled code is kept in memory only")  # fmt: skip
            return
        self._stores += 1
        if self._stores % PRUNE_EVERY == 1:
            self.prune()

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(message, RuntimeWarning, stacklevel=_caller_outside_nanotc())

    def entries(self) -> Iterator[Path]:
        if self.directory is None:
            return iter(())
        return (p for p in (self.directory / "kernels").glob(f"*/*{SUFFIX}") if p.is_file())

    def prune(self) -> None:
        """Delete least recently used entries (and abandoned temporary files) until the disk
        cache is under three quarters of its limit, once it exceeds the limit."""
        if self.directory is None:
            return
        now = time.time()
        for stale in (self.directory / "kernels").glob("*/.*.tmp"):
            if now - _mtime(stale) > 3600:
                _unlink(stale)
        files = [(p, _mtime(p), _size(p)) for p in self.entries()]
        total = sum(size for _, _, size in files)
        if total <= self.max_bytes:
            return
        for path, _, size in sorted(files, key=lambda f: f[1]):
            _unlink(path)
            total -= size
            if total <= self.max_bytes * 3 // 4:
                break

    def info(self) -> CacheInfo:
        sizes = [_size(p) for p in self.entries()]
        directory = self.directory or Path()
        return CacheInfo(directory, len(sizes), sum(sizes), len(self._memory))

    def clear(self) -> int:
        """Forget everything; the number of disk entries deleted. Raises OSError, once every
        entry was tried, if some could not be deleted."""
        with self._lock:
            self._memory.clear()
        removed, failures = 0, []
        for path in list(self.entries()):
            try:
                path.unlink()
                removed += 1
            except FileNotFoundError:
                pass  # another process deleted it
            except OSError as e:
                failures.append(e)
        if self.directory is not None:
            for stale in (self.directory / "kernels").glob("*/.*.tmp"):
                _unlink(stale)
        if failures:
            first = failures[0]
            raise OSError(
                first.errno,
                f"{len(failures)} cached kernels could not be deleted ({first.strerror}), "
                f"{removed} were",
                first.filename,
            )
        return removed


@dataclass
class _KeyLock:
    """The lock of one key and how many threads hold or wait for it."""

    lock: threading.Lock
    users: int = 0


# --- entry format --------------------------------------------------------------------------


def encode_entry(key: str, data: bytes, meta: dict[str, Any]) -> bytes:
    """MAGIC, 8-byte length of the JSON header, the header, the object file."""
    header = {
        **meta,
        "key": key,
        "object_bytes": len(data),
        "object_sha256": hashlib.sha256(data).hexdigest(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    encoded = json.dumps(header, sort_keys=True).encode()
    return MAGIC + struct.pack("<Q", len(encoded)) + encoded + data


def decode_entry(blob: bytes, key: str) -> bytes | None:
    """The object file of a valid entry for `key`, else None."""
    start = len(MAGIC) + 8
    if not blob.startswith(MAGIC) or len(blob) < start:
        return None
    (length,) = struct.unpack("<Q", blob[len(MAGIC) : start])
    try:
        header = json.loads(blob[start : start + length])
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        return None
    data = blob[start + length :]
    valid = (
        isinstance(header, dict)
        and header.get("key") == key
        and header.get("object_bytes") == len(data)
        and header.get("object_sha256") == hashlib.sha256(data).hexdigest()
    )
    return data if valid else None


def read_header(path: Path) -> dict[str, Any] | None:
    """The JSON header of an entry file (for `nanotc cache info`)."""
    try:
        with open_regular(path) as f:
            head = f.read(len(MAGIC) + 8)
            if not head.startswith(MAGIC) or len(head) < len(MAGIC) + 8:
                return None
            (length,) = struct.unpack("<Q", head[len(MAGIC) :])
            header = json.loads(f.read(min(length, path.stat().st_size)))
    except (OSError, ValueError, RecursionError):
        return None
    return header if isinstance(header, dict) else None


# --- the process's cache -------------------------------------------------------------------

_caches: dict[Path | None, KernelCache] = {}
_caches_lock = threading.Lock()
_warned_no_directory: list[bool] = []  # once per process


def active(enabled: bool | None = None) -> KernelCache | None:
    """The cache compiles use: None when disabled (`enabled=False`, or `NANOTC_CACHE=0` when
    `enabled` is None). One cache object per directory, so `$NANOTC_CACHE_DIR` may change
    between compiles (tests do)."""
    mode = mode_from_environment()
    if enabled is False or (enabled is None and mode == "off"):
        return None
    if mode == "memory":
        return _cache_at(None)
    try:
        return _cache_at(cache_directory())
    except NoCacheDirectory as error:
        if not _warned_no_directory:
            _warned_no_directory.append(True)
            warnings.warn(f"nanotc: no kernel cache directory ({error.filename}: "
                          f"{error.strerror}); compiled code is kept in memory only",
                          RuntimeWarning, stacklevel=_caller_outside_nanotc())  # fmt: skip
        return _cache_at(None)


def _cache_at(directory: Path | None) -> KernelCache:
    with _caches_lock:
        cache = _caches.get(directory)
        if cache is None:
            cache = _caches[directory] = KernelCache(directory, _max_bytes())
        return cache


def runtime_module(name: str, text: str, target: Target) -> jit.ObjectModule | jit.JitModule:
    """nanotc's own LLVM IR (the thread pool, native launches) as machine code for this
    process, cached like a kernel's in the directory's `runtime/`: compiling it took 60-90 ms
    at a process's first launch, loading it a few."""
    kernels = active()
    if kernels is None:
        return jit.JitModule(jit.optimize(text, target), target)
    # beside the kernels, not among them: `nanotc cache` counts and clears the user's kernels
    store = _cache_at(None if kernels.directory is None else kernels.directory / "runtime")
    key = cache_key(text, target, f"runtime {name}")
    meta: dict[str, Any] = {"source": name, "kernels": [], "target": target.name}
    code, _ = store.get_or_build(
        key, target, lambda: jit.jit_object_code(jit.optimize(text, target), target), meta
    )
    return code


def _caller_outside_nanotc() -> int:
    """The `stacklevel` that attributes a warning issued by this module's caller to the
    first frame outside the nanotc package (the user's line, however deep the call came)."""
    package = str(Path(__file__).resolve().parents[1])
    frame, level = sys._getframe(2), 2  # 2: the caller of the function that warns
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _max_bytes() -> int:
    """`NANOTC_CACHE_MAX_MB` in bytes: `inf` is no limit; what is not a size the default."""
    try:
        megabytes = float(os.environ.get("NANOTC_CACHE_MAX_MB", DEFAULT_MAX_MB))
    except ValueError:
        return DEFAULT_MAX_MB << 20
    if math.isinf(megabytes) and megabytes > 0:
        return sys.maxsize
    if not megabytes >= 0 or math.isinf(megabytes):  # NaN, negative
        return DEFAULT_MAX_MB << 20
    return min(int(megabytes * (1 << 20)), sys.maxsize)


def _make_private(directory: Path | None) -> None:
    """Create the cache directory readable and writable by its owner only: it holds machine
    code this process will run, so nobody else may write into it."""
    if directory is not None and not directory.exists():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)


def _touch(path: Path) -> None:
    with suppress(OSError):
        os.utime(path)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _unlink(path: Path) -> int:
    try:
        path.unlink()
        return 1
    except OSError:
        return 0
