"""Packing the next iteration's AMX operand ahead (`pack-ahead`).

A small AMX gemm (`tile.amx_small_gemm`) interleaves op(A) into VNNI rows on the stack and
loads them into a tile right away. A tile load does not take data from the store buffer: it
waits until the packed rows reach L1, and in a loop of small gemms that wait is most of the
time (bf16 8x8x8: 35 GFLOP/s packed in place, 96 with the rows packed long before). So in a
loop over a batch this pass packs each iteration's operand one iteration ahead:

    for %i = %lo, %hi, %s {              if tile.disjoint(A, C) for each A packed, C written {
      %p = alloca                          %buf = alloca              (two packed operands)
      tile.pack_amx %a(%i) into %p         for %i = %lo, %hi, %s {
      tile.amx_small_gemm %p, .., %c(%i)     %cur, %next = the halves of %buf, by iteration
    }                                        if %i == %lo { tile.pack_amx %a(%i) into %cur }
                                             if %i + %s < %hi {
                                               tile.pack_amx %a(%i + %s) into %next }
                                             tile.amx_small_gemm %cur, .., %c(%i)
                                           }
                                         } else { the loop as it was }

Reading op(A) one iteration early is only right when nothing the loop writes lies in A's
memory, so the loop may hold nothing but views, index arithmetic, prefetches, the packs and
the gemms (which write C), and a run-time test of the memory spans keeps the original loop
for arrays that overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

from nanotc.ir.builder import Builder
from nanotc.ir.clone import ValueMap, clone_instruction
from nanotc.ir.core import Function, Instruction, Region, rewrite_bottom_up, walk
from nanotc.ir.instructions import Alloca, ArithBinary, BinaryOp, Cmp, CmpCond, For, Size, Subview
from nanotc.ir.tile import (
    TileAmxSmallGemm,
    TileDisjoint,
    TileMin,
    TilePackAmx,
    TilePrefetch,
    TileScale,
)
from nanotc.ir.types import INDEX, MemRefType
from nanotc.ir.values import Constant, OpResult, Value, is_literal

_PURE = (Subview, ArithBinary, Cmp, Size, TileMin, TilePrefetch, Alloca)
_WRITE_C = (TileAmxSmallGemm, TileScale)


def pack_ahead(func: Function) -> None:
    rewrite_bottom_up(func.body, _pack_loop_ahead)


def _pack_loop_ahead(inst: Instruction) -> list[Instruction]:
    plan = _plan(inst) if isinstance(inst, For) else None
    return [inst] if plan is None else _pipelined(inst, plan)  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Plan:
    packs: list[TilePackAmx]  # those reading a view of this iteration's batch member
    guards: list[tuple[Value, Value]]  # (array read ahead, array written): must not overlap


def _plan(loop: For) -> _Plan | None:
    body = loop.body
    if loop.loop_type is not INDEX:
        return None
    inside = {id(r) for inst in walk(body) for r in inst.results} | {id(p) for p in body.params}
    packs, written = [], []
    for inst in body.instructions:
        if isinstance(inst, TilePackAmx) and _member_view(inst, body.params[0], inside):
            packs.append(inst)
        elif isinstance(inst, _WRITE_C):
            written.append(_root(inst.c))
        elif not isinstance(inst, (*_PURE, TilePackAmx)):
            return None
    read = [_root(p.source) for p in packs]
    if not packs or any(id(v) in inside for v in read + written):
        return None
    if any(r is w for r in read for w in written):
        return None
    return _Plan(packs, [(r, w) for r in read for w in written])


def _member_view(pack: TilePackAmx, index: Value, inside: set[int]) -> bool:
    """The pack reads a view of an array from outside the loop at the loop index (other
    offsets and sizes from outside too) into an alloca of the loop."""
    source, target = pack.source, pack.target
    if not (isinstance(target, OpResult) and isinstance(target.owner, Alloca)):
        return False
    if not (isinstance(source, OpResult) and isinstance(source.owner, Subview)):
        return False
    view = source.owner
    outside = [v for v in [view.source, *view.offsets, *view.sizes] if v is not None]
    at_index = [v for v in outside if v is index]
    return len(at_index) == 1 and all(v is index or id(v) not in inside for v in outside)


def _root(view: Value) -> Value:
    while isinstance(view, OpResult) and isinstance(view.owner, Subview):
        view = view.owner.source
    return view


def _pipelined(loop: For, plan: _Plan) -> list[Instruction]:
    b = Builder(Region())
    branch = b.if_(all_disjoint(b, plan.guards))
    assert branch.otherwise is not None
    buffers = {id(p): branch.then.alloca(_doubled(p.target.type)) for p in plan.packs}
    step = loop.step if loop.step is not None else Constant(1, INDEX)
    with branch.then.for_(loop.start, loop.stop, step) as (body, index):
        old_index = loop.body.params[0]
        mapping: ValueMap = {id(old_index): index}
        iteration = body.index(BinaryOp.SUB, index, loop.start)
        if not is_literal(step, 1):
            iteration = body.index(BinaryOp.DIV, iteration, step)
        parity = body.index(BinaryOp.REM, iteration, 2)
        halves = {}
        for p in plan.packs:
            size = p.target.type.shape[0]
            current = body.index(BinaryOp.MUL, parity, size)
            other = body.index(BinaryOp.SUB, size, current)
            halves[id(p)] = [body.subview(buffers[id(p)], [x], [size]) for x in (current, other)]
            mapping[id(p.target)] = halves[id(p)][0]
        ahead = _Ahead(old_index, index, loop.start, loop.stop, step)
        for inst in loop.body.instructions:
            if any(inst is p for p in plan.packs):
                ahead.emit(body, inst, mapping, halves[id(inst)][1])
            elif not any(r is p.target for p in plan.packs for r in inst.results):
                body.region.append(clone_instruction(inst, mapping))
    branch.otherwise.region.instructions.append(loop)
    return b.region.instructions


def all_disjoint(b: Builder, pairs: list[tuple[Value, Value]]) -> Value:
    """The run-time test that, in each pair, an array read ahead and an array written
    share no memory (at least one pair)."""
    tests = [b.add(TileDisjoint, lhs=read, rhs=written) for read, written in pairs]
    safe = tests[0]
    for apart in tests[1:]:
        safe = b.arith(BinaryOp.AND, safe, apart)
    return safe


def _doubled(packed: MemRefType) -> MemRefType:
    return MemRefType.packed(packed.element, [2 * packed.shape[0]])


@dataclass(frozen=True)
class _Ahead:
    """The loop's index before (`old`) and after (`new`) the rewrite, and its bounds."""

    old: Value
    new: Value
    start: Value
    stop: Value
    step: Value

    def emit(self, b: Builder, pack: TilePackAmx, mapping: ValueMap, next_half: Value) -> None:
        """This iteration's operand where the loop starts, then the next iteration's."""
        first = b.if_(b.cmp(CmpCond.EQ, self.new, self.start), with_else=False)
        _copy_pack(first.then, pack, mapping[id(pack.source)], mapping[id(pack.target)], mapping)
        following = b.index(BinaryOp.ADD, self.new, self.step)
        more = b.if_(b.cmp(CmpCond.LT, following, self.stop), with_else=False)
        view: Subview = pack.source.owner  # type: ignore[attr-defined]
        offsets = [following if v is self.old else mapping.get(id(v), v) for v in view.offsets]
        sizes = [None if v is None else mapping.get(id(v), v) for v in view.sizes]
        source = more.then.add(Subview, source=view.source, offsets=offsets, sizes=sizes)
        _copy_pack(more.then, pack, source, next_half, mapping)


def _copy_pack(b: Builder, pack: TilePackAmx, source: Value, target: Value,
               mapping: ValueMap) -> None:  # fmt: skip
    def mapped(v: Value) -> Value:
        return mapping.get(id(v), v)

    b.add(TilePackAmx, trans=pack.trans, pairs=pack.pairs, exact=pack.exact, panel=pack.panel,
          source=source, row=mapped(pack.row), col=mapped(pack.col), rows=mapped(pack.rows),
          cols=mapped(pack.cols), target=target)  # fmt: skip
