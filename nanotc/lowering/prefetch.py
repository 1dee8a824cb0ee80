"""Prefetching a later work-group's operands of batched gemms on group-indexed views.

The language's main use is a batch of small gemms, one per work-group, on views such as
`subview %A[:, :, %g]` with `%g = group_id`. Each gemm's operands then arrive from memory
with no reuse, and the nanokernel waits on them. A thread runs its work-groups in order, so
before each such gemm this pass asks for the operands of work-group g + d (the same views
at a later group id, at most the last group):

    %next = tile.min (g + d), (group_size - 1)
    %a1 = subview %A[:, :, %next]        and likewise for B and C
    tile.prefetch %a1 ; tile.prefetch %b1 ; tile.prefetch.write %c1

They arrive while this work-group computes (W2's memory-bound batches: 16^3 1.17x, 20x9x20
1.2-1.27x). The distance d is 1, or more for members so small that one ahead would ask too
late to cover the latency: as many members as fill an eighth of L1 (f32 8^3: 8 ahead, 1.12-1.21x
against 1 ahead; f64 8^3: 4, 1.01-1.07x; f32 16^3 and 20x9x20: 2, 0.95-1.08x).

Two ranges of sizes (static operands, A, B and C together) get it:

- small, at most a quarter of L1: the next group's lines do not evict the current group's;
- streamed, from twice L1 to a quarter of L2: the current group's operands do not stay in L1
  anyway, and one run over the next group's lines, in order, brings them in faster than the
  nanokernels' column-by-column reads do. In-process A/B runs against the gemms without it,
  memory-bound batches: f64 64^3 1.17-1.33x, 72^3 1.14-1.22x, 96^3 1.21x, 128^3 1.11-1.12x;
  f32 96^3 1.31-1.46x, 112^3 1.15x, 128^3 1.16x (one and two threads).

Between the two the next group's lines evict the current group's (f32 64^3, 48 KiB: 0.78-0.85x;
f64 48^3, 54 KiB: 0.83x; f64 32^3, 24 KiB: 0.9x); above a quarter of L2 it did not help
(f64 192^3, 864 KiB: 1.0x). The streamed range is for f32 and f64 operands, the ones measured;
bf16 gemms on AMX pack their operands, reading them in order themselves (memory-bound batches of
128^3 and 128x128x192 ran 0.92-1.18x with the prefetch: no trend).
"""

from __future__ import annotations

from nanotc.ir.builder import Builder
from nanotc.ir.core import Function, Instruction, Region, rewrite_bottom_up
from nanotc.ir.instructions import BinaryOp, Gemm, Subview, is_group_id
from nanotc.ir.tile import TileMin, TilePrefetch
from nanotc.ir.types import DYNAMIC, MemRefType, ScalarType
from nanotc.ir.values import OpResult, Value
from nanotc.lowering.register_tile import SMALL_GEMM_L1_SHARE
from nanotc.targets import Target

STREAMED_L1_MULTIPLE = 2  # the streamed range starts at twice L1 ...
L2_SHARE = 4  # ... and ends at a quarter of L2
LEAD_L1_SHARE = 8  # the prefetched members ahead fill this share of L1


def prefetch_next_group(func: Function, target: Target) -> None:
    def prefetched(inst: Instruction) -> list[Instruction]:
        wanted = isinstance(inst, Gemm) and _prefetched(inst, target)
        return [*_prefetches(inst, target), inst] if wanted else [inst]  # type: ignore[arg-type]

    rewrite_bottom_up(func.body, prefetched)


def _prefetches(g: Gemm, target: Target) -> list[Instruction]:
    operands = ((g.a, False), (g.b, False), (g.c, True))
    views = [(view, write) for v, write in operands if (view := _group_view(v)) is not None]
    if not views:
        return []
    b = Builder(Region())
    last = b.index(BinaryOp.SUB, b.group_size(), 1)
    group_id = next(o for o in views[0][0].offsets if is_group_id(o))  # all are equal
    ahead = b.index(BinaryOp.ADD, group_id, _distance(g, target))
    following = b.add(TileMin, lhs=ahead, rhs=last)
    for view, write in views:
        b.add(TilePrefetch, write=write, source=_next_group_view(b, view, following))
    return b.region.instructions


def _prefetched(g: Gemm, target: Target) -> bool:
    """Static operands with unit row stride, small or streamed (see the module docstring)."""
    types = _operand_types(g)
    if any(DYNAMIC in t.shape or t.stride[0] != 1 for t in types):
        return False
    total = _member_bytes(g)
    small = total <= target.l1_bytes // SMALL_GEMM_L1_SHARE
    streamed = STREAMED_L1_MULTIPLE * target.l1_bytes <= total <= target.l2_bytes // L2_SHARE
    return small or (streamed and all(t.element in (ScalarType.F32, ScalarType.F64) for t in types))


def _distance(g: Gemm, target: Target) -> int:
    """How many groups ahead to prefetch: enough members to fill L1 / LEAD_L1_SHARE, so the
    tiniest ones ask early enough to cover the memory latency."""
    return max(1, target.l1_bytes // LEAD_L1_SHARE // _member_bytes(g))


def _operand_types(g: Gemm) -> list[MemRefType]:
    return [g.a.type, g.b.type, g.c.type]


def _member_bytes(g: Gemm) -> int:
    return sum(t.shape[0] * t.shape[1] * t.element.size for t in _operand_types(g))


def _group_view(value: Value) -> Subview | None:
    """The subview defining `value` when it picks one member of a batch mode by the group
    id (the mode is dropped: `%A[:, :, %g]`)."""
    if not isinstance(value, OpResult) or not isinstance(value.owner, Subview):
        return None
    view = value.owner
    picks = any(is_group_id(o) and s is None for o, s in zip(view.offsets, view.sizes))
    return view if picks else None


def _next_group_view(b: Builder, view: Subview, following: Value) -> Value:
    offsets = [following if is_group_id(o) else o for o in view.offsets]
    return b.add(Subview, source=view.source, offsets=offsets, sizes=list(view.sizes))
