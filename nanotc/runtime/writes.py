"""What a kernel's writes ask of its launch arguments: an array it writes must be writeable,
its elements distinct (`elements_overlap`), and it must not share memory with an operand
read while it is written.

`written_parameters` finds, once per kernel, the parameters whose views a store or a
collective instruction writes; binding refuses read-only arrays for them (numpy's
`writeable` flag: a view of a `bytes` object, `broadcast_to`'s result), which the kernel
would otherwise write through.

A gemm, gemv, ger, sum or transposing axpby computes its output piece by piece while it
still reads its operands, so an output overlapping an operand gives undefined results
(docs/language.md). The checker rejects an output that is the very SSA value of an operand;
views of distinct parameters can only be seen to share memory at launch. `disjoint_pairs`
derives, once per kernel, which parameter each such output and operand is a view of;
`share_memory` tests the arrays bound to a pair (`nanotc.runtime.arguments` raises the
error), and launches that skip binding (`KnownLayouts`) test their byte ranges
(`byte_range`), the cheap half of it.

Arrays count as overlapping when they share a byte (`numpy.shares_memory`): interleaved
arrays whose elements never meet pass. Members of a group with a non-zero offset are tested
where the kernel sees them, shifted past their arrays (`shifted_member`).
"""

from __future__ import annotations

import ctypes
import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nanotc.ir.core import Function, Instruction, walk
from nanotc.ir.instructions import (
    Axpby,
    BlasInstruction,
    Expand,
    Fuse,
    Gemm,
    Gemv,
    Ger,
    Load,
    Store,
    Subview,
    Sum,
    Transpose,
)
from nanotc.ir.types import MemRefType
from nanotc.ir.values import OpResult, Value

_READS_WHILE_WRITING = (Gemm, Gemv, Ger, Sum)
_VIEWS = (Subview, Expand, Fuse, Load)  # a Load whose result is a memref takes a group member


@dataclass(frozen=True)
class DisjointPair:
    """Parameters `output` and `operand` (indices) must not share memory: `where` writes a
    view of the first while it reads a view of the second."""

    output: int
    operand: int
    where: str


def written_parameters(func: Function) -> dict[int, str]:
    """The parameters (indices) the kernel writes through some view, each with the first
    instruction that does."""
    params = {id(p): i for i, p in enumerate(func.arguments)}
    written: dict[int, str] = {}
    for inst in walk(func.body):
        if isinstance(inst, BlasInstruction):
            target = inst.output()
        elif isinstance(inst, Store):
            target = inst.target
        else:
            continue
        param = _parameter_of(target, params)
        if param is not None:
            written.setdefault(param, instruction_site(inst))
    return written


def disjoint_pairs(func: Function) -> tuple[DisjointPair, ...]:
    """One pair per (output, operand) parameters of the kernel's gemm, gemv, ger, sum and axpby.t
    instructions, where those are views of two distinct parameters."""
    params = {id(p): i for i, p in enumerate(func.arguments)}
    pairs: dict[tuple[int, int], DisjointPair] = {}
    for inst in walk(func.body):
        if not (isinstance(inst, _READS_WHILE_WRITING) or _transposing_axpby(inst)):
            continue
        output = _parameter_of(inst.output(), params)
        if output is None:
            continue
        where = instruction_site(inst)
        for value in inst.inputs():
            operand = _parameter_of(value, params)
            if operand is not None and operand != output:
                pairs.setdefault((output, operand), DisjointPair(output, operand, where))
    return tuple(pairs.values())


def _transposing_axpby(inst: Instruction) -> bool:
    """`axpby.t` of a matrix writes element (i, j) from (j, i), which it may already have
    written: its output and operand must not share memory either."""
    return (
        isinstance(inst, Axpby)
        and inst.trans is Transpose.T
        and isinstance(inst.a.type, MemRefType)
        and inst.a.type.order == 2
    )


def instruction_site(inst: Instruction) -> str:
    """An instruction as error messages name it: `the gemm at 7.5`."""
    return f"the {inst.name}" + (f" at {inst.loc.begin}" if inst.loc else "")


def _parameter_of(value: Value, params: dict[int, int]) -> int | None:
    """The parameter `value` is a view of (through subviews, reshapes and group loads)."""
    while id(value) not in params:
        if not (isinstance(value, OpResult) and isinstance(value.owner, _VIEWS)):
            return None
        value = value.owner.source
    return params[id(value)]


def byte_range(
    address: int, shape: Sequence[int], byte_strides: Sequence[int], itemsize: int
) -> tuple[int, int]:
    """Bytes [low, high) spanned by the elements of a non-empty strided array."""
    extents = [(n - 1) * s for n, s in zip(shape, byte_strides)]
    low = address + sum(min(0, e) for e in extents)
    return low, address + sum(max(0, e) for e in extents) + itemsize


# element offsets elements_overlap computes exactly (2^22 of them: 32 MiB); past it, strides
# that fail the ordered test count as overlapping
_EXACT_OVERLAP_ELEMENTS = 1 << 22


def elements_overlap(shape: Sequence[int], byte_strides: Sequence[int], itemsize: int) -> bool:
    """Whether two elements of a strided array share a byte. Modes in order of their strides
    that each step past all the smaller ones (every view numpy slicing or transposing makes)
    never overlap; other layouts (`as_strided`'s) have their element offsets compared."""
    modes = sorted((abs(s), n) for n, s in zip(shape, byte_strides) if n > 1)
    if 0 in shape or not modes:
        return False
    span = itemsize
    for stride, count in modes:
        if stride < span:
            break
        span += stride * (count - 1)
    else:
        return False
    if np.prod([n for _, n in modes], dtype=np.float64) > _EXACT_OVERLAP_ELEMENTS:
        return True
    offsets = np.zeros(1, np.int64)
    for stride, count in modes:
        offsets = (offsets[:, None] + stride * np.arange(count, dtype=np.int64)).ravel()
    offsets.sort()
    return bool(np.any(np.diff(offsets) < itemsize))


def shifted_member(
    address: int, shape: Sequence[int], byte_strides: Sequence[int], dtype: np.dtype
) -> np.ndarray:
    """The elements a kernel sees at `address` with this layout, as an array over that memory
    (a group member seen past its array's start; binding has checked that the memory is the
    caller's). It does not keep the memory alive: the launch's arguments do."""
    low, high = byte_range(address, shape, byte_strides, dtype.itemsize)
    memory = (ctypes.c_char * (high - low)).from_address(low)
    return np.ndarray(tuple(shape), dtype, memory, address - low, tuple(byte_strides))


Piece = tuple[int, int, np.ndarray]  # bytes [low, high) and the array spanning them


def share_memory(xs: list[Piece], ys: list[Piece]) -> bool:
    """Whether an array of `xs` shares a byte with one of `ys`: a sweep over both sides'
    ranges in address order tests only pairs whose ranges intersect."""
    if not xs or not ys:
        return False
    events = sorted([(p[0], 0, i) for i, p in enumerate(xs)] +
                    [(p[0], 1, i) for i, p in enumerate(ys)])  # fmt: skip
    sides = (xs, ys)
    open_pieces: tuple[list[tuple[int, int]], list[tuple[int, int]]] = ([], [])  # (high, index)
    for low, side, index in events:
        other = open_pieces[1 - side]
        while other and other[0][0] <= low:
            heapq.heappop(other)
        array = sides[side][index][2]
        if any(np.shares_memory(array, sides[1 - side][j][2]) for high, j in other if high > low):
            return True
        heapq.heappush(open_pieces[side], (sides[side][index][1], index))
    return False
