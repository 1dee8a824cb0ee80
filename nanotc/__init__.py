"""nanotc: a compiler for the tiny tensor language that generates its own GEMM nanokernels.

import nanotc
program = nanotc.load(text)          # parse and check
print(nanotc.dump(program))          # canonical text
kernels = nanotc.compile(text)       # native code for this machine (through the kernel cache)
kernels["name"](*args, group_size=N) # numpy arrays, torch tensors, numbers

nanotc.recipes: ready-made batched and tall-and-skinny GEMMs; nanotc.tuning: measured choices.
"""

from nanotc.api import Compilation, compile
from nanotc.check import check, load, verify
from nanotc.diagnostics import CompileError
from nanotc.frontend.parser import parse
from nanotc.ir.printer import print_program as dump
from nanotc.lowering.choices import CompileOptions, GemmChoice

__version__ = "0.1.0"

__all__ = [
    "Compilation",
    "CompileError",
    "CompileOptions",
    "GemmChoice",
    "__version__",
    "check",
    "compile",
    "dump",
    "load",
    "parse",
    "verify",
]
