"""nanotc: a compiler for the tiny tensor language that generates its own GEMM nanokernels.

import nanotc
program = nanotc.load(text)          # parse and check
print(nanotc.dump(program))          # canonical text
"""

from nanotc.api import Compilation, compile
from nanotc.check import check, load, verify
from nanotc.diagnostics import CompileError
from nanotc.frontend.parser import parse
from nanotc.ir.printer import print_program as dump

__version__ = "0.1.0"

__all__ = [
    "Compilation",
    "CompileError",
    "__version__",
    "check",
    "compile",
    "dump",
    "load",
    "parse",
    "verify",
]
