"""Writing every stage of a compilation to a directory, to inspect what nanotc generated.

`nanotc compile FILE --dump-dir DIR` (and `nanotc run ... --dump-dir DIR`) write into DIR;
`NANOTC_DUMP_DIR=DIR` makes every `nanotc.compile` in a Python process write into a
subdirectory of DIR named after its first kernel and a digest of its source (where DIR cannot
be written, with a warning instead). The files, in
pipeline order:

    00-source.ir         the program as given (canonical text for a built Program)
    01-checked.ir        the tensor IR after checking and the tensor-level passes
    02-tiled.ir          after lowering: loop nests around tile-dialect microkernels
    03-nanokernels.txt   the nanokernel plan of every microkernel
    04-llvm.ll           LLVM IR as emitted
    05-llvm-opt.ll       LLVM IR after LLVM's optimisations for the target
    06-assembly.s        the target's assembly
    options.json         tuned choices in effect, when there are any

Stages are computed for the dump when the kernel cache skipped them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nanotc.ir.printer import print_program

if TYPE_CHECKING:
    from nanotc.api import Compilation

STAGES: tuple[tuple[str, Callable[[Compilation], str]], ...] = (
    ("00-source.ir", lambda c: print_program(c.program)),
    ("01-checked.ir", lambda c: c.dump()),
    ("02-tiled.ir", lambda c: c.tiled()),
    ("03-nanokernels.txt", lambda c: c.nanokernels()),
    ("04-llvm.ll", lambda c: c.llvm_ir),
    ("05-llvm-opt.ll", lambda c: c.optimized_ir()),
    ("06-assembly.s", lambda c: c.assembly()),
)


def dump_compilation(
    compilation: Compilation,
    directory: str | Path,
    unique: bool = False,
    source: str | None = None,
) -> Path:
    """Write every stage into `directory` (or, with `unique`, into a subdirectory of it named
    after the program); returns the directory written."""
    out = Path(directory)
    if unique:
        out = out / _program_label(compilation)
    out.mkdir(parents=True, exist_ok=True)
    for filename, stage in STAGES:
        text = source if filename == "00-source.ir" and source is not None else stage(compilation)
        # surrogateescape: source read so (undecodable bytes) is written back as it was
        (out / filename).write_text(text, encoding="utf-8", errors="surrogateescape")
    if compilation.options.gemms:
        choices = {k: c.to_json() for k, c in compilation.options.gemms}
        (out / "options.json").write_text(json.dumps(choices, indent=1), encoding="utf-8")
    return out


def _program_label(compilation: Compilation) -> str:
    text = print_program(compilation.program) + compilation.target.name
    text += compilation.options.fingerprint()
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    first = next(iter(compilation), "program")
    return f"{first}-{compilation.target.name}-{digest}"
