"""`nanotc` subcommands. Each reads a program file (`-` for standard input), reports errors
on stderr in the reference implementation's format, and exits 1 when the program is invalid."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nanotc import targets
from nanotc.api import Compilation
from nanotc.check import load
from nanotc.cli.run import (
    RunError,
    compare_outputs,
    make_arguments,
    parse_sizes,
    time_launches,
    total_flops,
)
from nanotc.diagnostics import CompileError
from nanotc.ir.core import Function, Program
from nanotc.ir.printer import print_program
from nanotc.runtime.arguments import ArgumentError


def read_source(path: str) -> tuple[str, str]:
    """The text and the name diagnostics use for it."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    with open(path, encoding="utf-8") as f:
        return f.read(), path


def load_file(path: str) -> Program:
    text, name = read_source(path)
    return load(text, name)


def cmd_check(args: argparse.Namespace) -> int:
    load_file(args.file)
    return 0


def cmd_dump(args: argparse.Namespace) -> int:
    sys.stdout.write(print_program(load_file(args.file)))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    text, name = read_source(args.file)
    compilation = compile_program(text, name, args.target)
    func = compilation.program.function(args.kernel)
    rng = np.random.default_rng(args.seed)
    arguments = make_arguments(func, args.group_size, parse_sizes(args.size), rng)
    originals = [a.copy(order="K") if isinstance(a, np.ndarray) else a for a in arguments]
    kernel = compilation[args.kernel]
    kernel(*arguments, group_size=args.group_size, num_threads=args.threads)
    status = 0
    if args.check:
        status = _validate(compilation, func, arguments, originals, args.group_size)
    timing = time_launches(
        lambda: kernel(*arguments, group_size=args.group_size, num_threads=args.threads),
        args.repeat,
    )
    flops = total_flops(func, args.group_size, arguments)
    speed = f", {flops / timing.median / 1e9:.2f} GFLOP/s" if flops else ""
    print(
        f"@{args.kernel}: {args.group_size} work-groups, median {timing.median * 1e3:.3f} ms "
        f"(best {timing.best * 1e3:.3f} ms of {timing.runs}){speed}"
    )
    return status


def _validate(compilation: Compilation, func: Function, native: list[Any],
              originals: list[Any], group_size: int) -> int:  # fmt: skip
    from nanotc.reference import evaluate

    expected = [a.copy(order="K") if isinstance(a, np.ndarray) else a for a in originals]
    evaluate(compilation.program, func.name, expected, group_size)
    report = compare_outputs(func, native, expected)
    for name, error, ok in report:
        print(f"check %{name}: max relative error {error:.2e} {'ok' if ok else 'MISMATCH'}")
    return 0 if all(ok for _, _, ok in report) else 1


def cmd_compile(args: argparse.Namespace) -> int:
    text, name = read_source(args.file)
    compilation = compile_program(text, name, args.target, jit=False)
    emit = args.emit
    if emit == "ir":
        output: str | bytes = compilation.dump()
    elif emit == "tiled":
        output = compilation.tiled()
    elif emit == "nano":
        output = compilation.nanokernels()
    elif emit == "llvm":
        output = compilation.optimized_ir()
    elif emit == "llvm-raw":
        output = compilation.llvm_ir
    elif emit == "asm":
        output = compilation.assembly()
    else:
        output = compilation.object_code()
    write_output(output, args.output)
    return 0


def compile_program(text: str, name: str, target: str | None, jit: bool = True) -> Compilation:
    program = load(text, name)
    compilation = Compilation(program, targets.get(target))
    if jit:
        _ = compilation.native
    return compilation


def write_output(output: str | bytes, path: str | None) -> None:
    if path is None or path == "-":
        if isinstance(output, bytes):
            sys.stdout.buffer.write(output)
        else:
            sys.stdout.write(output)
        return
    with open(path, "wb" if isinstance(output, bytes) else "w") as f:
        f.write(output)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nanotc", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="parse and verify a program")
    check.add_argument("file", help="program file, or - for standard input")
    check.set_defaults(run=cmd_check)
    dump = sub.add_parser("dump", help="print a program in canonical form")
    dump.add_argument("file", help="program file, or - for standard input")
    dump.set_defaults(run=cmd_dump)

    run = sub.add_parser("run", help="run a kernel on random data and report its speed")
    run.add_argument("file", help="program file, or - for standard input")
    run.add_argument("--kernel", required=True, help="name of the function to launch")
    run.add_argument("--group-size", type=int, required=True, help="number of work-groups")
    run.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                     help="integer parameter or dynamic size (PARAM.MODE); repeatable")  # fmt: skip
    run.add_argument(
        "--check", action="store_true", help="validate against the reference evaluator"
    )
    run.add_argument(
        "--threads", type=int, default=None, help="worker threads (default: all cores)"
    )
    run.add_argument("--repeat", type=int, default=10, help="timed launches (median reported)")
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    run.add_argument("--target", default=None, help="target name (default: host)")
    run.set_defaults(run=cmd_run)

    comp = sub.add_parser("compile", help="compile and emit a stage of the pipeline")
    comp.add_argument("file", help="program file, or - for standard input")
    comp.add_argument(
        "--emit",
        choices=["ir", "tiled", "nano", "llvm", "llvm-raw", "asm", "obj"],
        default="asm",
        help="stage: checked IR, tiled IR, nanokernel plans, LLVM IR (optimised or raw), "
        "assembly, object file",
    )
    comp.add_argument("-o", "--output", default=None, help="output file (default: stdout)")
    comp.add_argument("--target", default=None, help="target name (default: host)")
    comp.set_defaults(run=cmd_compile)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except CompileError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except OSError as e:
        print(f"nanotc: {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    except (RunError, ArgumentError, KeyError, ValueError, RuntimeError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"nanotc {args.command}: {message}", file=sys.stderr)
        return 1
