"""Measured peak of this machine: register-resident FMA (fp32, fp64) and bf16 dot-product loops.

Each loop keeps `chains` independent accumulators in vector registers (enough to hide the
latency on every port, few enough that none spills: `chains_for`) and never touches memory,
so its speed is the core's arithmetic peak at the current clock. On AMX hosts a loop of
`tdpbf16ps` on four accumulator tiles gives the bf16 tile peak ("amx-bf16"). Run:
`python bench/peak.py` (or `nanotc peak`).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from nanotc import targets
from nanotc.runtime import jit
from nanotc.runtime.pool import run_chunks

if TYPE_CHECKING:
    from bench import harness

ITERATIONS = 10_000_000
CONTENDER = "peak"  # the peak loop's name among a comparison's contenders
ROUND_UNIT = 500_000  # iterations per call in a comparison: about 2 ms
F32, F64, I32, I64 = ir.FloatType(), ir.DoubleType(), ir.IntType(32), ir.IntType(64)


@dataclass(frozen=True)
class PeakLoop:
    name: str
    accumulator: ir.VectorType
    operand: ir.VectorType
    flops_per_lane: int  # 2 for an FMA; 4 for a bf16 pair dot product into f32
    intrinsic: str


def peak_loops(target: targets.Target) -> list[PeakLoop]:
    w = target.vector_bits
    f32, f64 = ir.VectorType(F32, w // 32), ir.VectorType(F64, w // 64)
    loops = [
        PeakLoop("fp32", f32, f32, 2, f"llvm.fma.v{w // 32}f32"),
        PeakLoop("fp64", f64, f64, 2, f"llvm.fma.v{w // 64}f64"),
    ]
    if target.bf16_dot:
        acc, pairs = ir.VectorType(F32, 16), ir.VectorType(I32, 16)
        loops.append(PeakLoop("bf16", acc, pairs, 4, "llvm.x86.avx512bf16.dpbf16ps.512"))
    return loops


def chains_for(target: targets.Target) -> int:
    """Independent accumulators of a target's peak loop: three quarters of its vector
    registers, 24 of AVX-512's 32 and 12 of AVX2's 16. That hides the FMA latency on both
    ports (4 cycles x 2 needs 8) and leaves the operands their registers: 24 chains on AVX2
    spilled, and its loop measured 26-69 GFLOP/s on a Zen 3 whose 8-14 chains ran at 90-92."""
    return target.vector_registers * 3 // 4


def _splat(t: ir.VectorType, value: float | int) -> ir.Constant:
    return ir.Constant(t, [ir.Constant(t.element, value)] * t.count)


def peak_module(loop: PeakLoop, chains: int) -> str:
    """`float peak(i64 n)`: n iterations of `chains` independent FMAs (or dot products)."""
    module = ir.Module(name="peak")
    acc_t, op_t = loop.accumulator, loop.operand
    fn_type = ir.FunctionType(acc_t, [acc_t, op_t, op_t])
    op = ir.Function(module, fn_type, loop.intrinsic)
    kernel = ir.Function(module, ir.FunctionType(acc_t.element, [I64]), "peak")
    b = ir.IRBuilder(kernel.append_basic_block("entry"))
    # the operands are loaded, not constants: LLVM folds fma(1, 1, acc) into an add
    operand = ir.GlobalVariable(module, op_t, "peak_operand")
    operand.initializer = _splat(op_t, 1)
    x = y = b.load(operand)
    entry, body, done = b.block, b.append_basic_block("loop"), b.append_basic_block("done")
    b.branch(body)
    b.position_at_end(body)
    counter = b.phi(I64)
    counter.add_incoming(kernel.args[0], entry)
    accumulators = []
    for c in range(chains):
        phi = b.phi(acc_t)
        phi.add_incoming(_splat(acc_t, float(c)), entry)
        accumulators.append(phi)
    updated = []
    for phi in accumulators:
        # fma(x, y, acc) and dpbf16ps(acc, x, y): the accumulator position differs
        args = [phi, x, y] if "dpbf16" in loop.intrinsic else [x, y, phi]
        updated.append(b.call(op, args))
        phi.add_incoming(updated[-1], body)
    remaining = b.sub(counter, ir.Constant(I64, 1))
    counter.add_incoming(remaining, body)
    b.cbranch(b.icmp_signed(">", remaining, ir.Constant(I64, 0)), body, done)
    b.position_at_end(done)
    total = updated[0]
    for value in updated[1:]:
        total = b.fadd(total, value)
    b.ret(b.extract_element(total, ir.Constant(I32, 0)))
    _packed_entry(module, kernel)
    return str(module)


def _packed_entry(module: ir.Module, kernel: ir.Function) -> None:
    """`i32 peak_packed(i64 *slots, i64 begin, i64 end, i64 size)`: the loop behind nanotc's
    packed entry point, so that its native pool runs it as it runs kernels. slots[0] is the
    iteration count; the result goes to slots[1 + begin] (stored, so that it is computed)."""
    slots_t = I64.as_pointer()
    packed = ir.Function(module, ir.FunctionType(I32, [slots_t, I64, I64, I64]), "peak_packed")
    slots, begin = packed.args[0], packed.args[1]
    b = ir.IRBuilder(packed.append_basic_block("entry"))
    result = b.call(kernel, [b.load(slots)])
    out = b.gep(slots, [b.add(begin, ir.Constant(I64, 1))])
    b.store(b.fptosi(result, I64), out)
    b.ret(ir.Constant(I32, 0))


def measure(
    loop: PeakLoop, target: targets.Target, chains: int | None = None, repeat: int = 5
) -> float:
    """GFLOP/s of one core (best of `repeat` runs of ITERATIONS iterations)."""
    warmup = 1000
    call, flops = peak_call(loop, target, warmup, chains)
    call(1)
    units = ITERATIONS // warmup
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        call(units)
        best = min(best, time.perf_counter() - start)
    return units * flops / best / 1e9


def peak_call(
    loop: PeakLoop, target: targets.Target, unit: int = 100_000, chains: int | None = None
) -> tuple[Callable[[int], None], float]:
    """The peak loop as a benchmark contender: a call running `reps` units of `unit`
    iterations, and the flops of one unit (so kernels and the peak can be timed in the same
    interleaved rounds)."""
    chains = chains or chains_for(target)
    native = _compiled(loop, target, chains)
    result = ctypes.c_float if loop.accumulator.element == F32 else ctypes.c_double
    fn = ctypes.CFUNCTYPE(result, ctypes.c_int64)(native.address("peak"))

    def call(reps: int, native: jit.JitModule = native) -> None:  # native: keeps the code alive
        fn(reps * unit)

    return call, unit_flops(loop, unit, chains)


def unit_flops(loop: PeakLoop, unit: int, chains: int) -> float:
    """The flops of `unit` iterations of the loop on one thread."""
    return unit * chains * loop.accumulator.count * loop.flops_per_lane


def _compiled(loop: PeakLoop, target: targets.Target, chains: int) -> jit.JitModule:
    return jit.JitModule(jit.optimize(peak_module(loop, chains), target), target)


def on_every_thread(
    loop: PeakLoop, target: targets.Target, threads: int, unit: int
) -> Callable[[int], None]:
    """A call running `reps` units of `unit` iterations on each of `threads` threads at once,
    one chunk per thread of nanotc's native pool: its workers spin between launches, so the
    loop starts on every core as a kernel's launch does (Python threads woke up late)."""
    native = _compiled(loop, target, chains_for(target))
    entry = native.address("peak_packed")
    slots = (ctypes.c_uint64 * (1 + threads))()
    bounds = (ctypes.c_int64 * (2 * threads))(*[x for c in range(threads) for x in (c, c + 1)])
    slots_at, bounds_at = ctypes.addressof(slots), ctypes.addressof(bounds)

    def call(reps: int, keep: object = (native, slots, bounds)) -> None:  # keep: alive with it
        slots[0] = reps * unit
        run_chunks(entry, slots_at, bounds_at, threads, threads)

    return call


def contender(
    precision: str, threads: int = 1, target: targets.Target | None = None
) -> tuple[harness.Contender, float] | None:
    """The peak loop of `precision` ("fp32", "fp64", "bf16") on `threads` threads at once, as
    a contender to time in the same rounds as the kernels whose percent of peak it gives, and
    the flops of one call unit on all threads. None where the target has no such loop (AMX
    tiles: their loop is measured once, by `peaks`)."""
    from bench.harness import Contender  # here: `python bench/peak.py` runs without the package

    target = target or targets.host()
    loop = next((x for x in peak_loops(target) if x.name == precision), None)
    if loop is None:
        return None
    if threads == 1:
        call, _ = peak_call(loop, target, ROUND_UNIT)
    else:
        call = on_every_thread(loop, target, threads, ROUND_UNIT)
    flops = unit_flops(loop, ROUND_UNIT, chains_for(target)) * threads
    return Contender(CONTENDER, call, check=_unchecked), flops


def _unchecked(what: str) -> None:
    """The peak loop computes nothing to validate."""


AMX_TILE_FLOPS = 2 * 16 * 16 * 32  # one tdpbf16ps: 16 x 16 f32 += 16 x 32 by 32 x 16 bf16


def amx_peak_module() -> str:
    """`float peak(i64 n)`: n iterations of 4 independent tdpbf16ps on tile registers (2 x 2
    accumulators from 2 + 2 operand tiles, all zero), then one accumulator stored."""
    from nanotc.codegen.llvm.amx import AMX

    module = ir.Module(name="amx_peak")
    i16 = ir.IntType(16)
    rows, cols = ir.Constant(i16, 16), ir.Constant(i16, 64)
    zero = ir.Function(module, ir.FunctionType(AMX, [i16, i16]), "llvm.x86.tilezero.internal")
    dot = ir.Function(
        module, ir.FunctionType(AMX, [i16, i16, i16, AMX, AMX, AMX]), "llvm.x86.tdpbf16ps.internal"
    )
    ptr = ir.PointerType(ir.IntType(8))
    store = ir.Function(
        module, ir.FunctionType(ir.VoidType(), [i16, i16, ptr, I64, AMX]),
        "llvm.x86.tilestored64.internal",
    )  # fmt: skip
    kernel = ir.Function(module, ir.FunctionType(F32, [I64]), "peak")
    b = ir.IRBuilder(kernel.append_basic_block("entry"))
    buffer = b.alloca(ir.ArrayType(F32, 256))
    buffer.align = 64
    operands = [b.call(zero, [rows, cols]) for _ in range(4)]
    initial = [b.call(zero, [rows, cols]) for _ in range(4)]
    entry, body, done = b.block, b.append_basic_block("loop"), b.append_basic_block("done")
    b.branch(body)
    b.position_at_end(body)
    counter = b.phi(I64)
    counter.add_incoming(kernel.args[0], entry)
    phis = [b.phi(AMX) for _ in initial]
    updated = []
    for i, (phi, start) in enumerate(zip(phis, initial)):
        phi.add_incoming(start, entry)
        updated.append(b.call(dot, [rows, cols, cols, phi, operands[i // 2], operands[2 + i % 2]]))
        phi.add_incoming(updated[-1], body)
    remaining = b.sub(counter, ir.Constant(I64, 1))
    counter.add_incoming(remaining, body)
    b.cbranch(b.icmp_signed(">", remaining, ir.Constant(I64, 0)), body, done)
    b.position_at_end(done)
    raw = b.bitcast(buffer, ptr)
    for tile in updated:
        b.call(store, [rows, cols, raw, ir.Constant(I64, 64), tile])
    first = b.gep(buffer, [ir.Constant(I32, 0), ir.Constant(I32, 0)])
    b.ret(b.load(first))
    return str(module)


def measure_amx(target: targets.Target, repeat: int = 5) -> float:
    """GFLOP/s of one core's AMX bf16 tile unit (best of `repeat` runs)."""
    from nanotc.runtime import amx

    amx.enable()
    native = jit.JitModule(jit.optimize(amx_peak_module(), target), target)
    fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64)(native.address("peak"))
    fn(1000)
    iterations = ITERATIONS // 4
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn(iterations)
        best = min(best, time.perf_counter() - start)
    return iterations * 4 * AMX_TILE_FLOPS / best / 1e9


def peaks(target: targets.Target | None = None) -> dict[str, float]:
    """Per-core peak GFLOP/s by precision ("fp32", "fp64", "bf16" for vdpbf16ps and
    "amx-bf16" for AMX tiles where supported)."""
    target = target or targets.host()
    found = {loop.name: measure(loop, target) for loop in peak_loops(target)}
    if target.amx:
        found["amx-bf16"] = measure_amx(target)
    return found


def main() -> None:
    target = targets.host()
    print(f"host: cpu {target.llvm_cpu}, {target.vector_bits}-bit vectors")
    for name, gflops in peaks(target).items():
        print(f"{name} peak: {gflops:7.1f} GFLOP/s per core")


if __name__ == "__main__":
    main()
