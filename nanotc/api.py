"""`nanotc.compile`: source text (or a built Program) to callable native kernels.

    prog = nanotc.compile(text)
    prog["fused_kernel"](alpha, A, B, C, D, group_size=1000)

The stages are the pipeline of DESIGN.md; `Compilation` keeps each stage's result so the CLI
and tests can inspect them (`--emit`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import llvmlite.binding as llvm

from nanotc.check import check, load
from nanotc.codegen.llvm.module import emit_module
from nanotc.ir.core import Program, walk
from nanotc.ir.printer import print_instruction, print_program
from nanotc.ir.tile import TileBatchGemm, TileGemm
from nanotc.lowering.nanokernel import plan
from nanotc.lowering.pipeline import lower
from nanotc.runtime import amx, jit
from nanotc.runtime.launcher import Kernel
from nanotc.targets import Target, get, runs_on_host


@dataclass
class Compilation:
    """One program compiled for one target; stages are computed on first use."""

    program: Program
    target: Target
    _kernels: dict[str, Kernel] = field(default_factory=dict)

    @cached_property
    def lowered(self) -> Program:
        """The program after nanotc's lowering pipeline (tiles and microkernels)."""
        return lower(self.program, self.target)

    def tiled(self) -> str:
        """The lowered program in text: loop nests around tile-dialect microkernels."""
        return print_program(self.lowered)

    def nanokernels(self) -> str:
        """The nanokernel plan of every microkernel of the lowered program, in order."""
        listings = []
        for func in self.lowered.functions:
            for inst in walk(func.body):
                if isinstance(inst, TileGemm | TileBatchGemm):
                    head = f"@{func.name}: {print_instruction(inst).splitlines()[0]}"
                    listings.append(head + "\n" + plan(inst, self.target).listing())
        return "\n\n".join(listings) + ("\n" if listings else "")

    @cached_property
    def llvm_ir(self) -> str:
        """LLVM IR as emitted, before LLVM's optimisations."""
        return str(emit_module(self.lowered, self.target))

    @cached_property
    def optimized(self) -> llvm.ModuleRef:
        return jit.optimize(self.llvm_ir, self.target)

    def optimized_ir(self) -> str:
        return str(self.optimized)

    def assembly(self) -> str:
        return jit.assembly(self.optimized, self.target)

    def object_code(self) -> bytes:
        return jit.object_code(self.optimized, self.target)

    @cached_property
    def native(self) -> jit.JitModule:
        if not runs_on_host(self.target):
            raise RuntimeError(
                f"code for target {self.target.name!r} cannot run on this machine "
                f"(it lacks some of: {self.target.llvm_features})"
            )
        return jit.JitModule(jit.optimize(self.llvm_ir, self.target), self.target)

    def __getitem__(self, name: str) -> Kernel:
        kernel = self._kernels.get(name)
        if kernel is None:
            func = self.program.function(name)
            address = self.native.address(f"{name}__packed")
            kernel = self._kernels[name] = Kernel(func, address, self.native)
        return kernel

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(f.name for f in self.program.functions)

    def dump(self) -> str:
        return print_program(self.program)


def compile(
    source: str | Program, target: str | Target | None = None, name: str = "<memory>"
) -> Compilation:
    """Parse (if text), check, and compile a program; kernels JIT on first use."""
    program = load(source, name) if isinstance(source, str) else check(source)
    compilation = Compilation(program, get(target))
    if runs_on_host(compilation.target):
        if compilation.target.amx:
            amx.enable()  # before any AMX instruction runs in this process
        _ = compilation.native  # compile eagerly so errors surface here, not at first launch
    return compilation
