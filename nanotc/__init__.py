"""nanotc: a compiler for the tiny tensor language that generates its own GEMM nanokernels.

import nanotc
program = nanotc.load(text)          # parse and check
print(nanotc.dump(program))          # canonical text
kernels = nanotc.compile(text)       # native code for this machine (through the kernel cache)
kernels["name"](*args, group_size=N) # numpy arrays, torch tensors, numbers
c = nanotc.zeros_aligned((m, n), "f32")  # operands on a cache line (numpy's are 16 bytes past)

nanotc.recipes: ready-made batched and tall-and-skinny GEMMs; nanotc.tuning: measured choices.
"""

from nanotc.api import Compilation, compile
from nanotc.check import check, load, verify
from nanotc.diagnostics import CompileError
from nanotc.frontend.parser import parse
from nanotc.ir.printer import print_program as dump
from nanotc.lowering.choices import CompileOptions, GemmChoice
from nanotc.runtime.aligned import aligned, empty_aligned, zeros_aligned

__version__ = "0.1.0"

__all__ = [
    "Compilation",
    "CompileError",
    "CompileOptions",
    "GemmChoice",
    "__version__",
    "aligned",
    "check",
    "compile",
    "dump",
    "empty_aligned",
    "load",
    "parse",
    "verify",
    "zeros_aligned",
]
