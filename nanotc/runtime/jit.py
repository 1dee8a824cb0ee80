"""LLVM optimisation and machine code: JIT engines, assembly and object files.

An MCJIT engine takes ownership of the target machine it is given, so every engine gets a
target machine of its own (sharing one between two engines crashes at exit).

Machine code may call the compiler runtime (libgcc): targets without F16C convert f16 through
`__extendhfsf2` / `__truncsfhf2`. MCJIT resolves such calls in the process's global symbol
namespace, where libgcc_s is not (llvmlite's library links it privately), and an unresolved call
jumps to address 0, so the runtime library is loaded into that namespace first.

Ctrl-C waits until a call into LLVM is done (`interrupts.uninterrupted`): llvmlite's bindings
are not safe against a KeyboardInterrupt between their statements.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import threading
from enum import Enum
from functools import lru_cache

import llvmlite.binding as llvm

from nanotc.runtime.interrupts import uninterrupted
from nanotc.targets import Target

# The nanokernels arrive vectorised and unrolled: O3's extra loop work added ~30% to compile
# times of gemm kernels and measured no faster on W2/W3 (A/B in one run), so O2 it is.
SPEED_LEVEL = 2


class Pipeline(Enum):
    """LLVM's optimisation of a module.

    O2: LLVM's per-module pipeline (function simplification, then the loop and SLP
    vectorizers, the unroller and their clean-up), with loop and SLP vectorisation on.
    SIMPLIFY: only O2's function simplification (SROA, InstCombine, LICM, GVN, loop
    rotation, IndVarSimplify, ...), for a module whose loops are all the compiler's own
    vector code (`codegen.llvm.helpers.LoopCensus`): what the rest adds there is 30-35% of
    LLVM's optimisation time and, on the AMX Xeon, nothing to the hot loops' instructions
    or speed (docs/benchmarks.md, thirty-sixth session)."""

    O2 = "O2"
    SIMPLIFY = "simplify"


_init_lock = threading.Lock()


@lru_cache(maxsize=1)
def _initialize() -> None:
    with _init_lock:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        llvm.initialize_native_asmparser()
        _load_compiler_runtime()


def _load_compiler_runtime() -> None:
    """Make libgcc's helper functions (half-float conversions) visible to the JIT's linker."""
    # the usual soname first: find_library runs `ldconfig -p`, which costs milliseconds
    library = "libgcc_s.so.1" if _loadable("libgcc_s.so.1") else ctypes.util.find_library("gcc_s")
    if library is None:
        return  # not a libgcc platform: its C library provides the helpers
    # if it fails, f16 on targets without F16C cannot link; every other kernel still runs
    with contextlib.suppress(RuntimeError):
        llvm.load_library_permanently(library)


def _loadable(name: str) -> bool:
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


def target_machine(target: Target, jit: bool = False) -> llvm.TargetMachine:
    _initialize()
    llvm_target = llvm.Target.from_default_triple()
    return llvm_target.create_target_machine(
        cpu=target.llvm_cpu,
        features=target.llvm_features,
        opt=3,
        reloc="pic" if not jit else "default",
        codemodel="jitdefault" if jit else "small",
        jit=jit,
    )


@uninterrupted
def optimize(llvm_ir: str, target: Target, pipeline: Pipeline = Pipeline.O2) -> llvm.ModuleRef:
    """Parse, verify and optimise for the target by `pipeline`."""
    _initialize()
    module = llvm.parse_assembly(llvm_ir)
    module.verify()
    tm = target_machine(target)
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    tuning = llvm.create_pipeline_tuning_options(speed_level=SPEED_LEVEL)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    passes = llvm.create_pass_builder(tm, tuning)
    if pipeline is Pipeline.O2:
        passes.getModulePassManager().run(module, passes)
        return module
    simplification = passes.getFunctionPassManager()
    for function in module.functions:
        if not function.is_declaration:
            simplification.run(function, passes)
    return module


@uninterrupted
def assembly(module: llvm.ModuleRef, target: Target) -> str:
    return target_machine(target).emit_assembly(module)


@uninterrupted
def object_code(module: llvm.ModuleRef, target: Target) -> bytes:
    return target_machine(target).emit_object(module)


class _LoadedCode:
    """Machine code in an MCJIT engine of this process, looked up by function name."""

    engine: llvm.ExecutionEngine

    def address(self, name: str) -> int:
        address = self.engine.get_function_address(name)
        if not address:
            raise KeyError(f"no native function {name!r}")
        return address


class JitModule(_LoadedCode):
    """Optimised machine code of one module, loaded into this process."""

    @uninterrupted
    def __init__(self, module: llvm.ModuleRef, target: Target):
        self.module = module
        self.engine = llvm.create_mcjit_compiler(module, target_machine(target, jit=True))
        self.engine.finalize_object()


@uninterrupted
def jit_object_code(module: llvm.ModuleRef, target: Target) -> bytes:
    """An object file of `module` for loading into this process (`ObjectModule`): generated
    as the JIT generates code (JIT code model), unlike `object_code`'s position-independent
    object for linking with a system linker."""
    return target_machine(target, jit=True).emit_object(module)


class ObjectModule(_LoadedCode):
    """Machine code from an object file (`jit_object_code`), linked into this process.

    Loading links the object in memory (relocations, the C library's symbols) without
    generating code, so it takes milliseconds: the kernel cache loads its entries this way."""

    @uninterrupted
    def __init__(self, data: bytes, target: Target):
        _initialize()
        machine = target_machine(target, jit=True)
        empty = llvm.parse_assembly("")
        empty.triple = machine.triple
        empty.data_layout = str(machine.target_data)
        self.engine = llvm.create_mcjit_compiler(empty, machine)
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(data))
        self.engine.finalize_object()
