"""Tiny bf16 batch members multiplied two at a time on AMX tiles (`pair-members`).

An AMX tile product takes as long for 8 rows of C as for 16, and each tile load and store
has a fixed cost besides; a loop of bf16 8x8x8 gemms, one exact tile product per member, ran
at 0.7x this project's f32 kernels. Where two members fit one tile product, this pass
multiplies them together. For members C_i += A_i B_i of a dense batch (M x N, M x K and
K x N, with M <= 16, 2N <= 16 and 2K <= 32):

    [C_i C_i+1] += [A_i A_i+1] x | B_i   0     |      (M x 2N) += (M x 2K) (2K x 2N)
                                 | 0     B_i+1 |

The batch lays C_i+1 right after C_i and A_i+1 after A_i, so [C_i C_i+1] and [A_i A_i+1]
are views of the batch (fused modes); only the block-diagonal B is built, as the row panel
of the AMX gemm: op(B_i)^T at rows 0.. and columns 0.., op(B_i+1)^T at rows N.., columns
K.., in a buffer zeroed once per loop (the exact pack of a row may write zeros after its K
values, to the end of its vector: into zeros of its own row or, in the second block, of the
next row). As in `pack-ahead`, each
pair's A and B are packed one pair ahead into the other half of double buffers, where the
arrays read ahead and C cannot overlap (a run-time test; the plain paired loop otherwise).
An odd member left at the end runs the original loop body, once.

    for %i = %lo, %hi {                       %mid = %hi - (%hi - %lo) % 2
      %a, %b, %c = views of member %i          for %i = %lo, %mid, 2 {
      gemm.n.n alpha, %a, %b, beta, %c           pack [A_i A_i+1], blockdiag(B_i, B_i+1)
    }                                            tile.amx_small_gemm .., [C_i C_i+1] k 2K
                                               }
                                               if %mid < %hi { the body for %mid }

In-process against one product per member (bf16 8x8x8 into f32, one thread): 1.4x, from
0.70x to 0.99x this project's f32 kernel (`docs/benchmarks.md`, W4).
"""

from __future__ import annotations

from dataclasses import dataclass

from nanotc.ir.builder import Builder
from nanotc.ir.clone import ValueMap, clone_instruction
from nanotc.ir.core import Function, Instruction, Region, rewrite_bottom_up, walk
from nanotc.ir.instructions import BinaryOp, CmpCond, For, Fuse, Gemm, Subview, Transpose
from nanotc.ir.tile import TileAmxSmallGemm, TilePackAmx, TileScale
from nanotc.ir.types import INDEX, MemRefType, ScalarType
from nanotc.ir.values import Constant, Value, is_literal
from nanotc.lowering.gemm_amx import CHUNK, PANEL, amx_applies
from nanotc.lowering.gemm_tiles import gemm_extents
from nanotc.lowering.pack_ahead import all_disjoint
from nanotc.targets import Target

A_HALF = PANEL * CHUNK  # bf16 values of one packed [A_i A_i+1]: one VNNI panel
ROW_SLACK = 1  # a row after B's 16-row panel, for zeros the last row's pack may write past it
B_HALF = (PANEL + ROW_SLACK) * CHUNK


@dataclass(frozen=True)
class _Members:
    """A loop over batch members: arrays a, b, c (M x K x batch etc., from outside the loop)
    viewed at the loop index, the member gemm and its extents M, N, K."""

    loop: For
    arrays: tuple[Value, Value, Value]
    gemm: Gemm
    extents: tuple[int, int, int]


def pair_members(func: Function, target: Target) -> None:
    """Rewrite the one loop of tiny AMX gemms of `func` (functions with other AMX gemms are
    left alone: the tile registers' shapes are shared by all of them)."""
    gemms = [g for g in walk(func.body) if isinstance(g, Gemm) and amx_applies(g, target)]
    if len(gemms) != 1:
        return

    def replace(inst: Instruction) -> list[Instruction]:
        members = _match(inst) if isinstance(inst, For) else None
        return [inst] if members is None else _paired(members)

    rewrite_bottom_up(func.body, replace)


def _match(loop: For) -> _Members | None:
    body = loop.body
    if loop.loop_type is not INDEX or not (loop.step is None or is_literal(loop.step, 1)):
        return None
    *views, gemm = body.instructions
    if not isinstance(gemm, Gemm) or len(views) != 3:
        return None
    if not all(isinstance(v, Subview) for v in views) or gemm.atomic:
        return None
    if (gemm.trans_a, gemm.trans_b) != (Transpose.N, Transpose.N):
        return None
    by_result = {id(v.results[0]): v for v in views}
    inside = {id(r) for inst in walk(body) for r in inst.results}
    arrays = [
        _member_array(by_result.get(id(x)), body.params[0], inside)
        for x in (gemm.a, gemm.b, gemm.c)
    ]
    m, n, k = gemm_extents(gemm)
    if None in arrays or m is None or n is None or k is None:
        return None
    a, b, c = arrays
    assert a is not None and b is not None and c is not None
    types = (gemm.a.type.element, gemm.b.type.element, gemm.c.type.element)
    if types != (ScalarType.BF16, ScalarType.BF16, ScalarType.F32):
        return None
    if not (m <= PANEL and 2 * n <= PANEL and 2 * k <= CHUNK):
        return None
    if not (_dense(a.type, k) and _dense(c.type, n)):
        return None
    return _Members(loop, (a, b, c), gemm, (m, n, k))


def _member_array(view: Subview | None, index: Value, inside: set[int]) -> Value | None:
    """The rank-3 array of `subview %X[0:.., 0:.., %index]` (whole first two modes), when
    X comes from outside the loop (`inside`: ids of the values the loop defines)."""
    if view is None or not isinstance(view.source.type, MemRefType):
        return None
    source: MemRefType = view.source.type
    if source.order != 3 or view.offsets[2] is not index or view.sizes[2] is not None:
        return None
    whole = all(is_literal(o, 0) for o in view.offsets[:2])
    full = view.results[0].type.shape == source.shape[:2]
    outside = id(view.source) not in inside
    return view.source if whole and full and outside else None


def _dense(t: MemRefType, columns: int) -> bool:
    """Member i + 1 starts where member i ends: columns contiguous, the batch stride
    `columns` column strides (all static)."""
    s0, s1, s2 = t.stride
    return s0 == 1 and isinstance(s1, int) and isinstance(s2, int) and s2 == columns * s1


def _paired(members: _Members) -> list[Instruction]:
    loop, (a, b_array, c) = members.loop, members.arrays
    b = Builder(Region())
    start, stop = loop.start, loop.stop
    odd = b.index(BinaryOp.REM, b.index(BinaryOp.SUB, stop, start), 2)
    mid = b.index(BinaryOp.SUB, stop, odd)
    pair = _Pair(members, b.add(Fuse, source=a, first=1, last=2),
                 b.add(Fuse, source=c, first=1, last=2))  # fmt: skip
    a_buffer = b.alloca(MemRefType.packed(ScalarType.BF16, [2 * A_HALF]))
    b_rows = b.alloca(MemRefType.packed(ScalarType.BF16, [CHUNK, 2 * (PANEL + ROW_SLACK)]))
    b.add(TileScale, beta=Constant(0.0, ScalarType.F32), c=b_rows)
    b_buffer = b.add(Fuse, source=b_rows, first=0, last=1)
    buffers = (a_buffer, b_buffer)
    branch = b.if_(all_disjoint(b, [(a, c), (b_array, c)]))
    assert branch.otherwise is not None
    _ahead(branch.then, pair, buffers, (start, mid))
    with branch.otherwise.for_(start, mid, 2) as (body, i):
        halves = _halves(body, buffers, 0)
        pair.pack(body, i, halves)
        pair.multiply(body, i, halves)
    # an `if`, not a loop of at most one iteration, which pack-ahead would pipeline: a third
    # of this kernel's compile time for nothing
    last = b.if_(b.cmp(CmpCond.LT, mid, stop), with_else=False)
    mapping: ValueMap = {id(loop.body.params[0]): mid}
    for inst in loop.body.instructions:
        last.then.region.append(clone_instruction(inst, mapping))
    return b.region.instructions


def _ahead(b: Builder, pair: _Pair, buffers: tuple[Value, Value],
           bounds: tuple[Value, Value]) -> None:  # fmt: skip
    """The paired loop with each pair's operands packed one pair ahead."""
    start, mid = bounds
    first = b.if_(b.cmp(CmpCond.LT, start, mid), with_else=False)
    pair.pack(first.then, start, _halves(first.then, buffers, 0))
    with b.for_(start, mid, 2) as (body, i):
        iteration = body.index(BinaryOp.DIV, body.index(BinaryOp.SUB, i, start), 2)
        parity = body.index(BinaryOp.REM, iteration, 2)
        following = body.index(BinaryOp.ADD, i, 2)
        more = body.if_(body.cmp(CmpCond.LT, following, mid), with_else=False)
        other = more.then.index(BinaryOp.SUB, 1, parity)
        pair.pack(more.then, following, _halves(more.then, buffers, other))
        pair.multiply(body, i, _halves(body, buffers, parity))


def _halves(b: Builder, buffers: tuple[Value, Value], half: Value | int) -> tuple[Value, Value]:
    a_buffer, b_buffer = buffers
    return (
        b.subview(a_buffer, [b.index(BinaryOp.MUL, half, A_HALF)], [A_HALF]),
        b.subview(b_buffer, [b.index(BinaryOp.MUL, half, B_HALF)], [B_HALF]),
    )


@dataclass(frozen=True)
class _Pair:
    """Members i and i + 1 as one gemm: views of the fused A and C, and the packs."""

    members: _Members
    a_fused: Value
    c_fused: Value

    def pack(self, b: Builder, i: Value, halves: tuple[Value, Value]) -> None:
        """[A_i A_i+1] into VNNI pairs; op(B_i)^T and op(B_i+1)^T into the row panel's
        diagonal blocks."""
        m, n, k = self.members.extents
        a_half, b_half = halves
        a2 = b.subview(self.a_fused, [0, b.index(BinaryOp.MUL, i, k)], [m, 2 * k])
        b.add(TilePackAmx, trans=Transpose.N, pairs=True, exact=True, source=a2, row=0, col=0,
              rows=m, cols=2 * k, target=a_half, panel=PANEL)  # fmt: skip
        b_array = self.members.arrays[1]
        corner = n * CHUNK + k  # row n, column k of the panel
        second = b.subview(b_half, [corner], [B_HALF - corner])
        for member, target in ((i, b_half), (b.index(BinaryOp.ADD, i, 1), second)):
            view = b.subview(b_array, [0, 0, member], [k, n, None])
            b.add(TilePackAmx, trans=Transpose.T, exact=True, source=view, row=0, col=0,
                  rows=n, cols=k, target=target, panel=PANEL)  # fmt: skip

    def multiply(self, b: Builder, i: Value, halves: tuple[Value, Value]) -> None:
        m, n, k = self.members.extents
        g = self.members.gemm
        c2 = b.subview(self.c_fused, [0, b.index(BinaryOp.MUL, i, n)], [m, 2 * n])
        zero = is_literal(g.beta, 0)
        if not zero and not is_literal(g.beta, 1):
            b.add(TileScale, beta=g.beta, c=c2)
        b.add(TileAmxSmallGemm, trans_b=Transpose.N, zero=zero, alpha=g.alpha, a=halves[0],
              b=halves[1], c=c2, k=2 * k)  # fmt: skip
