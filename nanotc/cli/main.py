"""`nanotc` subcommands: check, dump, run, compile, tune, bench, peak, cache (docs/cli.md).

Commands that read a program take a file (`-` for standard input), report errors on stderr in
the reference implementation's format, and exit 1 when the program is invalid; every other
mistake is one line on stderr (`nanotc COMMAND: message`) and exit status 1."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import nanotc
from nanotc import targets
from nanotc.api import Compilation
from nanotc.check import load
from nanotc.cli.compile import UsageError, read_source
from nanotc.cli.compile import add_parser as add_compile_parser
from nanotc.cli.options import kernel_name, non_negative, positive
from nanotc.cli.run import (
    RunError,
    compare_outputs,
    make_arguments,
    parse_sizes,
    time_launches,
    total_flops,
)
from nanotc.cli.tools import add_bench_parsers, add_cache_parser, add_tune_parser, cmd_bench
from nanotc.diagnostics import CompileError
from nanotc.ir.core import Function, Program
from nanotc.ir.printer import print_program
from nanotc.runtime.arguments import ArgumentError, copy_argument
from nanotc.stages import dump_compilation


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
    if args.dump_dir:
        dump_compilation(compilation, args.dump_dir, source=text)
    func = compilation.program.function(args.kernel)
    rng = np.random.default_rng(args.seed)
    arguments = make_arguments(func, args.group_size, parse_sizes(args.size), rng)
    # the reference runs first: it reports an index out of bounds that native code would
    # follow into memory it does not own
    expected = _reference(compilation, func, arguments, args.group_size) if args.check else None
    kernel = compilation[args.kernel]
    kernel(*arguments, group_size=args.group_size, num_threads=args.threads)
    status = 0 if expected is None else _compare(func, arguments, expected)
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


def _reference(
    compilation: Compilation, func: Function, arguments: list[Any], group_size: int
) -> list[Any]:
    """The reference evaluator's results on copies of the arguments."""
    from nanotc.reference import evaluate

    expected = [copy_argument(a) for a in arguments]
    evaluate(compilation.program, func.name, expected, group_size)
    return expected


def _compare(func: Function, native: list[Any], expected: list[Any]) -> int:
    report = compare_outputs(func, native, expected)
    for name, error, ok in report:
        print(f"check %{name}: max relative error {error:.2e} {'ok' if ok else 'MISMATCH'}")
    return 0 if all(ok for _, _, ok in report) else 1


def compile_program(text: str, name: str, target: str | None) -> Compilation:
    """Compiled for running here, through the kernel cache, with tuned choices."""
    return nanotc.compile(text, targets.get(target), name)


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
    run.add_argument(
        "--kernel", type=kernel_name, required=True, help="name of the function to launch"
    )
    run.add_argument("--group-size", type=non_negative, required=True,
                     help="number of work-groups")  # fmt: skip
    run.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                     help="integer parameter or dynamic size (PARAM.MODE); repeatable")  # fmt: skip
    run.add_argument(
        "--check", action="store_true", help="validate against the reference evaluator"
    )
    run.add_argument(
        "--threads", type=positive, default=None, help="worker threads (default: all cores)"
    )
    run.add_argument("--repeat", type=positive, default=10,
                     help="timed launches, at least 1 (median reported)")  # fmt: skip
    run.add_argument("--seed", type=non_negative, default=0, help="seed of the random inputs")
    run.add_argument("--target", default=None, help="target name (default: host)")
    run.add_argument("--dump-dir", metavar="DIR", help="also write every compile stage into DIR")
    run.set_defaults(run=cmd_run)

    add_compile_parser(sub)
    add_tune_parser(sub)
    add_bench_parsers(sub)
    add_cache_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["bench"]:  # options belong to the suite: argparse would misread them
        return guarded("bench", lambda: cmd_bench(arguments[1:]))
    args = build_parser().parse_args(arguments)
    return guarded(args.command, lambda: args.run(args))


def guarded(command: str, run: Callable[[], int]) -> int:
    """Run a command; a user's mistake becomes a message on stderr and exit status 1."""
    try:
        return run()
    except CompileError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"nanotc {command}: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except (RunError, UsageError, ArgumentError, KeyError, ValueError, RuntimeError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"nanotc {command}: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: the shell's status for SIGINT, no traceback
        print(f"nanotc {command}: interrupted", file=sys.stderr)
        return 130
