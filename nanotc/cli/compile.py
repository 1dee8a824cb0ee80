"""`nanotc compile`: emit one stage of the pipeline, an object file or a shared library for C,
its C header, and (`--dump-dir`) every stage at once."""

from __future__ import annotations

import argparse
import os
import secrets
import stat
import sys
from pathlib import Path

import nanotc
from nanotc import targets
from nanotc.api import Compilation
from nanotc.check import load
from nanotc.codegen.aot import c_header, header_guard, link_shared
from nanotc.stages import dump_compilation
from nanotc.tuning import database

EMITS = ("ir", "tiled", "nano", "llvm", "llvm-raw", "asm", "obj", "shared")


class UsageError(Exception):
    """A command line that cannot work (reported as `nanotc COMMAND: message`)."""


def read_source(path: str) -> tuple[str, str]:
    """The text and the name diagnostics use for it."""
    data, name = (sys.stdin.buffer.read(), "<stdin>") if path == "-" else (_read(path), path)
    try:
        return data.decode("utf-8"), name
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - data.rfind(b"\n", 0, e.start)
        byte = data[e.start]
        raise UsageError(f"{name}:{line}.{column}: not UTF-8 text (byte 0x{byte:02x})") from None


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write_output(output: str | bytes, path: str | None, mode: int = 0o666) -> None:
    """`output` to standard output (`path` None or "-") or to the file `path`, created with
    `mode` (less the umask) where it is new."""
    if path is None or path == "-":
        if isinstance(output, bytes):
            sys.stdout.buffer.write(output)
        else:
            sys.stdout.write(output)
        return
    data = output.encode() if isinstance(output, str) else output
    try:
        _write_file(Path(path), data, mode)
    except OSError as e:  # named: a write's own error (a full disk) names no file
        raise OSError(e.errno, e.strerror, path) from None


def _write_file(path: Path, data: bytes, mode: int) -> None:
    """A regular file (or a new one) is replaced whole: written beside it under a temporary
    name, then renamed into place, so a failed write (a full disk, a file size limit) leaves
    it as it was. Anything else (a device, a FIFO) is written to as it is."""
    try:
        existing = path.stat()
    except FileNotFoundError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        with open(path, "wb") as f:
            f.write(data)
        return
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if existing is not None:
            os.chmod(temporary, stat.S_IMODE(existing.st_mode))
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def compilation_for(text: str, name: str, target: str | None) -> Compilation:
    """A compilation that generates code only when asked (no JIT), with tuned choices."""
    resolved = targets.get(target)
    return Compilation(load(text, name), resolved, database.options_for(resolved))


def cmd_compile(args: argparse.Namespace) -> int:
    text, name = read_source(args.file)
    compilation = compilation_for(text, name, args.target)
    if args.emit == "shared" and args.output in (None, "-"):
        raise UsageError("--emit shared needs an output file: -o LIBRARY.so")
    if args.emit == "obj" and args.output in (None, "-") and sys.stdout.isatty():
        raise UsageError("--emit obj writes a binary file, not to a terminal: -o KERNEL.o")
    _check_output_places(args)
    header = None
    if args.header:  # first: a kernel C cannot declare fails before anything is written
        if not Path(args.header).resolve().parent.is_dir():
            raise UsageError(f"--header {args.header}: no such directory")
        banner = header_banner(compilation, name)
        guard = header_guard(args.header)
        header = c_header(compilation.program, guard, banner, amx=compilation.target.amx)
    if args.emit == "shared":
        write_output(link_shared(compilation.object_code()), args.output, mode=0o777)
    else:
        write_output(emit(compilation, args.emit), args.output)
    if header is not None:
        write_output(header, args.header)
    if args.dump_dir:
        written = dump_compilation(compilation, args.dump_dir, source=text)
        print(f"nanotc compile: stages written to {written}", file=sys.stderr)
    return 0


def _check_output_places(args: argparse.Namespace) -> None:
    """UsageError before anything is written where one output would overwrite another, or
    --dump-dir names something other than a directory or one that cannot be made (it is
    made here, empty)."""
    output = None if args.output in (None, "-") else Path(args.output).resolve()
    if args.header and output is not None and Path(args.header).resolve() == output:
        raise UsageError(f"--header {args.header} is the output file too: name another")
    if args.dump_dir and Path(args.dump_dir).exists() and not Path(args.dump_dir).is_dir():
        raise UsageError(f"--dump-dir {args.dump_dir}: not a directory")
    if args.dump_dir:
        try:
            Path(args.dump_dir).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--dump-dir {args.dump_dir}: {e.strerror}") from None


def emit(compilation: Compilation, stage: str) -> str | bytes:
    if stage == "ir":
        return compilation.dump()
    if stage == "tiled":
        return compilation.tiled()
    if stage == "nano":
        return compilation.nanokernels()
    if stage == "llvm":
        return compilation.optimized_ir()
    if stage == "llvm-raw":
        return compilation.llvm_ir
    if stage == "asm":
        return compilation.assembly()
    return compilation.object_code()


def header_banner(compilation: Compilation, source: str) -> str:
    target = compilation.target
    return (
        f"Generated by nanotc {nanotc.__version__} from {Path(source).name}, for target "
        f"{target.name} (cpu {target.llvm_cpu}).\n"
        "Calling convention: docs/calling-convention.md of nanotc. Link with the object file\n"
        "(nanotc compile --emit obj) or the shared library (--emit shared)."
    )


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    comp = sub.add_parser(
        "compile",
        help="compile and emit a stage of the pipeline, an object file or a shared library",
        description="Compile a program and write one stage of the pipeline. For C: --emit obj "
        "or --emit shared with --header.",
    )
    comp.add_argument("file", help="program file, or - for standard input")
    comp.add_argument(
        "--emit",
        choices=EMITS,
        default="asm",
        help="stage: checked IR, tiled IR, nanokernel plans, LLVM IR (optimised or raw), "
        "assembly, object file, shared library (default: asm)",
    )
    comp.add_argument("-o", "--output", default=None, help="output file (default: stdout)")
    comp.add_argument("--header", metavar="FILE.h", help="also write the C header of the kernels")
    comp.add_argument("--dump-dir", metavar="DIR", help="also write every stage into DIR")
    comp.add_argument("--target", default=None, help="target name (default: host)")
    comp.set_defaults(run=cmd_compile)
