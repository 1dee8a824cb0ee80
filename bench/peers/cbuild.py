"""Building the peers' small C drivers: compiled on first use, cached by content, loaded by ctypes.

A driver is compiled with $CC (default gcc) into a shared object under bench/results/.build/
(gitignored; a temporary directory if that is not writable), named by a hash of its source, the
command, the drivers' own headers it includes (`#include "..."`) and a caller's stamp (e.g. the
system headers it includes), so any change rebuilds it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

BUILD = Path(__file__).resolve().parent.parent / "results" / ".build"


class Unavailable(RuntimeError):
    """A driver cannot be built or loaded here."""


def compile_shared(
    source: Path,
    cflags: Sequence[str],
    link_options: Sequence[Sequence[str]],
    stamp: str = "",
    directory: Path = BUILD,
) -> Path:
    """The shared object of `source`, linked with the first of `link_options` that works (or
    a cached build); raise `Unavailable` with the compiler's first error line."""
    compiler = os.environ.get("CC", "gcc")
    if not shutil.which(compiler):
        raise Unavailable(f"no C compiler ({compiler}) to build {source.name}")
    text = source.read_text(encoding="utf-8")
    local = [(source.parent / name).read_text(encoding="utf-8") for name in _local_headers(text)]
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        directory = Path(tempfile.gettempdir()) / "nanotc-bench-build"
        directory.mkdir(parents=True, exist_ok=True)
    errors = []
    for libs in link_options:
        key = "\n".join([text, *local, compiler, *cflags, *libs, stamp])
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        output = directory / f"{source.stem}-{digest}.so"
        if output.exists():
            return output
        partial = output.with_suffix(f".{os.getpid()}.tmp")
        command = [compiler, *cflags, str(source), "-o", str(partial), *libs]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode == 0:
            os.replace(partial, output)
            return output
        partial.unlink(missing_ok=True)
        errors.append(done.stderr.strip().splitlines()[:1] or [f"exit {done.returncode}"])
    detail = errors[-1][0] if errors else "unknown error"
    raise Unavailable(f"{source.name} did not build ({detail})")


def _local_headers(text: str) -> list[str]:
    """The headers a driver includes by quoted name: its siblings in bench/peers/."""
    return re.findall(r'^#include "([^"]+)"', text, re.MULTILINE)
