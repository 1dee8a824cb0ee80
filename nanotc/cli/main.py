"""`nanotc` subcommands. Each reads a program file (`-` for standard input), reports errors
on stderr in the reference implementation's format, and exits 1 when the program is invalid."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from nanotc.check import load
from nanotc.diagnostics import CompileError
from nanotc.ir.core import Program
from nanotc.ir.printer import print_program


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nanotc", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="parse and verify a program")
    check.add_argument("file", help="program file, or - for standard input")
    check.set_defaults(run=cmd_check)
    dump = sub.add_parser("dump", help="print a program in canonical form")
    dump.add_argument("file", help="program file, or - for standard input")
    dump.set_defaults(run=cmd_dump)
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
