"""How collective instructions write their output: out := alpha * x + beta * out.

The compute type is the output's element type (f32 for f16/bf16 outputs); inputs, alpha and
beta are converted to it first and the result is converted back on store. beta = 0 never
reads the output: a literal 0 selects the store-only form, a run-time beta branches once per
instruction between the two forms (`with_output_update`), never per element. `.atomic` makes
each element update an atomic read-modify-write: atomicrmw add for beta 1, a compare-exchange
loop for any other beta, an atomic exchange for beta 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from nanotc.codegen.llvm.emitter import FunctionEmitter
from nanotc.codegen.llvm.helpers import convert, from_memory, load_scalar, to_memory
from nanotc.codegen.llvm.scalar import binary
from nanotc.codegen.llvm.types import MemrefValue, memory_type
from nanotc.ir.instructions import BinaryOp, BlasInstruction
from nanotc.ir.types import ScalarType
from nanotc.ir.values import Value, literal_in


def compute_type(output: ScalarType) -> ScalarType:
    return ScalarType.F32 if output in (ScalarType.F16, ScalarType.BF16) else output


@dataclass(frozen=True)
class OutputUpdate:
    """How one output element is written: out := alpha * x + beta * out."""

    element: ScalarType
    compute: ScalarType
    alpha: ir.Value
    beta: ir.Value | None  # None: beta is zero and the output is not read
    beta_is_one: bool
    atomic: bool


def with_output_update(
    e: FunctionEmitter,
    inst: BlasInstruction,
    output: MemrefValue,
    nest: Callable[[OutputUpdate], None],
) -> None:
    """Emit `nest` once per beta case (one branch on a run-time beta, outside the loops)."""
    fields = inst.fields
    update_output(e, fields["beta"], fields["alpha"], bool(fields["atomic"]), output, nest)


def update_output(
    e: FunctionEmitter,
    beta_operand: Value,
    alpha_operand: Value,
    atomic: bool,
    output: MemrefValue,
    nest: Callable[[OutputUpdate], None],
) -> None:
    """`with_output_update` for given alpha, beta and atomicity."""
    element = output.type.element
    ct = compute_type(element)
    alpha = convert(e.b, e.value(alpha_operand), alpha_operand.type, ct)

    def update(beta: ir.Value | None, one: bool = False) -> OutputUpdate:
        return OutputUpdate(element, ct, alpha, beta, one, atomic)

    literal = literal_in(beta_operand, ct)  # judged as converted: 1e-50 is 0 in f32
    if literal is not None:
        if literal == 0:
            nest(update(None))
        else:
            beta = convert(e.b, e.value(beta_operand), beta_operand.type, ct)
            nest(update(beta, literal == 1))
        return
    beta = convert(e.b, e.value(beta_operand), beta_operand.type, ct)
    zero = ir.Constant(beta.type, 0)
    is_zero = (
        e.b.fcmp_ordered("==", beta, zero) if ct.is_float else e.b.icmp_signed("==", beta, zero)
    )
    with e.b.if_else(is_zero) as (then, otherwise):
        with then:
            nest(update(None))
        with otherwise:
            nest(update(beta))


def write_output(b: ir.IRBuilder, u: OutputUpdate, ptr: ir.Value, x: ir.Value) -> None:
    ax = binary(b, BinaryOp.MUL, u.compute, u.alpha, x)
    if u.beta is None:
        value = to_memory(b, convert(b, ax, u.compute, u.element), u.element)
        if u.atomic:  # an atomic store (llvmlite's store_atomic needs typed pointers)
            b.atomic_rmw("xchg", ptr, value, "monotonic")
        else:
            b.store(value, ptr)
    elif not u.atomic:
        old = convert(b, load_scalar(b, ptr, u.element), u.element, u.compute)
        new = binary(b, BinaryOp.ADD, u.compute, ax, _scaled(b, u, old))
        b.store(to_memory(b, convert(b, new, u.compute, u.element), u.element), ptr)
    elif u.beta_is_one and u.element == u.compute and u.element.bits >= 32:
        b.atomic_rmw("fadd" if u.compute.is_float else "add", ptr, ax, "monotonic")
    else:
        _compare_exchange_update(b, u, ptr, ax)


def _scaled(b: ir.IRBuilder, u: OutputUpdate, old: ir.Value) -> ir.Value:
    assert u.beta is not None
    return old if u.beta_is_one else binary(b, BinaryOp.MUL, u.compute, u.beta, old)


def _compare_exchange_update(b: ir.IRBuilder, u: OutputUpdate, ptr: ir.Value, ax: ir.Value) -> None:
    """out := ax + beta*out as a compare-exchange loop on the element's bits."""
    mem = memory_type(u.element)
    bits = ir.IntType(max(8, u.element.bits))
    first = b.load_atomic(ptr, "monotonic", u.element.size, typ=bits)
    entry = b.block
    loop = b.append_basic_block("cas.loop")
    done = b.append_basic_block("cas.done")
    b.branch(loop)
    b.position_at_end(loop)
    seen = b.phi(bits)
    seen.add_incoming(first, entry)
    old_mem = seen if mem == bits else b.bitcast(seen, mem)
    old = convert(b, from_memory(b, old_mem, u.element), u.element, u.compute)
    new = binary(b, BinaryOp.ADD, u.compute, ax, _scaled(b, u, old))
    new_mem = to_memory(b, convert(b, new, u.compute, u.element), u.element)
    new_bits = new_mem if mem == bits else b.bitcast(new_mem, bits)
    pair = b.cmpxchg(ptr, seen, new_bits, "monotonic", "monotonic")
    seen.add_incoming(b.extract_value(pair, 0), b.block)
    b.cbranch(b.extract_value(pair, 1), done, loop)
    b.position_at_end(done)
