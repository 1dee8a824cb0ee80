"""`nanotc.compile`: source text (or a built Program) to callable native kernels.

    prog = nanotc.compile(text)
    prog["fused_kernel"](alpha, A, B, C, D, group_size=1000)

The stages are the pipeline of DESIGN.md; `Compilation` keeps each stage's result so the CLI
and tests can inspect them (`--emit`, `--dump-dir`). Machine code for the host goes through
the kernel cache (`nanotc.runtime.cache`): a program compiled before, in this process or
another, is loaded instead of compiled. Lowering takes the tuned choices of the tuning
database (`nanotc.tuning.database`) unless `options` are given.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import llvmlite.binding as llvm
from llvmlite import ir

from nanotc.check import check, load
from nanotc.codegen import abi
from nanotc.codegen.llvm.helpers import loop_census
from nanotc.codegen.llvm.module import emit_module
from nanotc.diagnostics import require_type
from nanotc.ir.core import Program, walk
from nanotc.ir.printer import print_instruction, print_program
from nanotc.ir.tile import TileBatchGemm, TileGemm
from nanotc.lowering.choices import DEFAULT_OPTIONS, CompileOptions
from nanotc.lowering.nanokernel import plan
from nanotc.lowering.pipeline import lower
from nanotc.runtime import amx, jit
from nanotc.runtime import cache as kernel_cache
from nanotc.runtime.interrupts import interrupts_held
from nanotc.runtime.launcher import Kernel
from nanotc.targets import Target, get, runs_on_host
from nanotc.tuning import database

NativeCode = jit.JitModule | jit.ObjectModule


@dataclass
class Compilation:
    """One program compiled for one target; stages are computed on first use.

    `origin` says where the machine code came from: "compiled", or "memory" / "disk" for the
    kernel cache (then no stage before it has run; asking for one computes it)."""

    program: Program
    target: Target
    options: CompileOptions = DEFAULT_OPTIONS
    origin: str = "compiled"
    _code: NativeCode | None = None
    _kernels: dict[str, Kernel] = field(default_factory=dict)

    @cached_property
    def lowered(self) -> Program:
        """The program after nanotc's lowering pipeline (tiles and microkernels)."""
        return lower(self.program, self.target, options=self.options)

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
    def _emitted(self) -> tuple[str, jit.Pipeline]:
        module = emit_module(self.lowered, self.target)
        return str(module), llvm_pipeline(module)

    @property
    def llvm_ir(self) -> str:
        """LLVM IR as emitted, before LLVM's optimisations."""
        return self._emitted[0]

    @property
    def pipeline(self) -> jit.Pipeline:
        """How LLVM optimises the module (`jit.Pipeline`): chosen by its loops."""
        return self._emitted[1]

    @cached_property
    def optimized(self) -> llvm.ModuleRef:
        return jit.optimize(self.llvm_ir, self.target, self.pipeline)

    def optimized_ir(self) -> str:
        with interrupts_held():  # llvmlite's string of the module is freed twice if interrupted
            return str(self.optimized)

    def assembly(self) -> str:
        return jit.assembly(self.optimized, self.target)

    def object_code(self) -> bytes:
        """A position-independent object file for linking with C (`nanotc compile --emit
        obj`, `--emit shared`)."""
        return jit.object_code(self.optimized, self.target)

    def jit_object_code(self) -> bytes:
        """An object file to load into this process (what the kernel cache stores)."""
        # the cache keeps no module alive
        module = jit.optimize(self.llvm_ir, self.target, self.pipeline)
        return jit.jit_object_code(module, self.target)

    @property
    def native(self) -> NativeCode:
        """The machine code, in this process (JIT-compiled now unless the cache gave it)."""
        if self._code is None:
            _require_host(self.target)
            module = jit.optimize(self.llvm_ir, self.target, self.pipeline)
            self._code = jit.JitModule(module, self.target)
        return self._code

    def __getitem__(self, name: str) -> Kernel:
        """The kernel of function `name`, written with or without its `@`."""
        name = name.removeprefix("@") if isinstance(name, str) else name
        kernel = self._kernels.get(name)
        if kernel is None:
            func = self.program.function(name)
            address = self.native.address(abi.packed_name(name))
            kernel = self._kernels[name] = Kernel(func, address, self.native)
        return kernel

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(f.name for f in self.program.functions)

    def dump(self) -> str:
        return print_program(self.program)


def llvm_pipeline(module: ir.Module) -> jit.Pipeline:
    """O2 where a loop of `module` leaves LLVM's vectorizer work, else function simplification
    only (`jit.Pipeline`)."""
    return jit.Pipeline.O2 if loop_census(module).leaves_work_to_llvm else jit.Pipeline.SIMPLIFY


def _require_host(target: Target) -> None:
    if not runs_on_host(target):
        raise RuntimeError(
            f"code for target {target.name!r} cannot run on this machine "
            f"(it lacks some of: {target.llvm_features})"
        )


def compile(
    source: str | Program,
    target: str | Target | None = None,
    name: str = "<memory>",
    *,
    options: CompileOptions | None = None,
    cache: bool | None = None,
) -> Compilation:
    """Parse (if text), check, and compile a program for `target` (default: this machine).

    `options`: register-tile and blocking choices overriding the analytical ones (default:
    the tuning database's for the target). `cache`: use the kernel cache (default: unless
    `NANOTC_CACHE=0`). With `$NANOTC_DUMP_DIR` set, every stage is written there."""
    require_type(source, str | Program, "nanotc.compile: expected program text or a Program")
    require_type(options, CompileOptions | None, "nanotc.compile: options must be CompileOptions")
    require_type(cache, bool | None, "nanotc.compile: cache must be True, False or None")
    program = load(source, name) if isinstance(source, str) else check(source)
    resolved = get(target)
    if options is None:
        options = database.options_for(resolved)
    compilation = Compilation(program, resolved, options)
    if runs_on_host(resolved):
        if resolved.amx:
            amx.enable()  # before any AMX instruction runs in this process
        store = kernel_cache.active(cache)
        if store is None:
            _ = compilation.native  # compile eagerly so errors surface here, not at first launch
        else:
            text = source if isinstance(source, str) else print_program(program)
            _attach_cached(compilation, store, text, name)
    dump_dir = os.environ.get("NANOTC_DUMP_DIR")
    if dump_dir:
        _dump_stages(compilation, dump_dir, _text_or_none(source))
    return compilation


def _dump_stages(compilation: Compilation, directory: str, source: str | None) -> None:
    """Every stage into $NANOTC_DUMP_DIR; a directory that cannot be written costs only the
    dump, with a warning (as a kernel cache that cannot be written does)."""
    from nanotc.stages import dump_compilation

    try:
        dump_compilation(compilation, directory, unique=True, source=source)
    except OSError as e:
        warnings.warn(f"nanotc: NANOTC_DUMP_DIR={directory}: stages not written ({e})",
                      RuntimeWarning, stacklevel=3)  # fmt: skip


def _text_or_none(source: str | Program) -> str | None:
    return source if isinstance(source, str) else None


def _attach_cached(
    compilation: Compilation, store: kernel_cache.KernelCache, text: str, name: str
) -> None:
    key = kernel_cache.cache_key(text, compilation.target, compilation.options.fingerprint())
    meta: dict[str, Any] = {
        "source": name,
        "kernels": [f.name for f in compilation.program.functions],
        "target": compilation.target.name,
    }
    code, origin = store.get_or_build(key, compilation.target, compilation.jit_object_code, meta)
    compilation._code, compilation.origin = code, origin
