"""Evaluation of the replicated instructions: scalar arithmetic, comparison and cast, group id
and size, load, store, size, the views subview, expand and fuse, and the memory instructions
alloca, lifetime_stop and barrier.

Every work-item of a work-group computes the same replicated result, so each is evaluated once
per work-group. `alloca` is collective but evaluated here with the other memory instructions;
`lifetime_stop` and `barrier` have no observable effect when a work-group's instructions run in
program order. Semantics of the values: `nanotc.reference.scalars`, of the views:
`nanotc.reference.memory`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nanotc.ir.instructions import (
    Alloca,
    ArithBinary,
    ArithUnary,
    Barrier,
    Cast,
    Cmp,
    Expand,
    Fuse,
    GroupId,
    GroupSize,
    LifetimeStop,
    Load,
    Size,
    Store,
    Subview,
)
from nanotc.ir.values import Constant, Value
from nanotc.reference import memory, scalars
from nanotc.reference.frame import Frame, HandlerTable
from nanotc.reference.memory import GroupArgument, Slice


def _arith_binary(inst: ArithBinary, frame: Frame) -> Sequence[Any]:
    lhs, rhs = frame.get(inst.lhs), frame.get(inst.rhs)
    return (scalars.arith_binary(inst.op, lhs, rhs, inst.lhs.type),)


def _arith_unary(inst: ArithUnary, frame: Frame) -> Sequence[Any]:
    return (scalars.arith_unary(inst.op, frame.get(inst.a), inst.a.type),)


def _cmp(inst: Cmp, frame: Frame) -> Sequence[Any]:
    lhs, rhs = frame.get(inst.lhs), frame.get(inst.rhs)
    return (scalars.compare(inst.cond, lhs, rhs, inst.lhs.type),)


def _cast(inst: Cast, frame: Frame) -> Sequence[Any]:
    return (scalars.cast(frame.get(inst.a), inst.a.type, inst.to),)


def _group_id(inst: GroupId, frame: Frame) -> Sequence[Any]:
    return (np.int64(frame.group_id),)


def _group_size(inst: GroupSize, frame: Frame) -> Sequence[Any]:
    return (np.int64(frame.group_size),)


def _indices(values: Sequence[Value], frame: Frame) -> list[int]:
    return [frame.get_int(v) for v in values]


def _load(inst: Load, frame: Frame) -> Sequence[Any]:
    source = frame.get(inst.source)
    indices = _indices(inst.indices, frame)
    if isinstance(source, GroupArgument):
        return (source.member(indices[0]),)
    return (source[memory.element(source, indices)],)


def _store(inst: Store, frame: Frame) -> Sequence[Any]:
    target = frame.get(inst.target)
    target[memory.element(target, _indices(inst.indices, frame))] = frame.get(inst.value)
    return ()


def _size(inst: Size, frame: Frame) -> Sequence[Any]:
    return (np.int64(frame.get(inst.source).shape[inst.mode]),)


def _subview(inst: Subview, frame: Frame) -> Sequence[Any]:
    source = frame.get(inst.source)
    slices = []
    for mode, (offset_value, size_value) in enumerate(zip(inst.offsets, inst.sizes)):
        offset = frame.get_int(offset_value)
        if size_value is None:
            size = None
        elif _is_wildcard(size_value):
            size = source.shape[mode] - offset
        else:
            size = frame.get_int(size_value)
        slices.append(Slice(offset, size))
    return (memory.subview(source, slices),)


def _expand(inst: Expand, frame: Frame) -> Sequence[Any]:
    entries = [None if _is_wildcard(v) else frame.get_int(v) for v in inst.shape]
    return (memory.expand(frame.get(inst.source), inst.mode, entries),)


def _is_wildcard(value: Value) -> bool:
    return isinstance(value, Constant) and value.is_wildcard


def _fuse(inst: Fuse, frame: Frame) -> Sequence[Any]:
    return (memory.fuse(frame.get(inst.source), inst.first, inst.last),)


def _alloca(inst: Alloca, frame: Frame) -> Sequence[Any]:
    return (memory.alloca(inst.memref),)


def _no_effect(inst: LifetimeStop | Barrier, frame: Frame) -> Sequence[Any]:
    return ()


HANDLERS: HandlerTable = {
    ArithBinary: _arith_binary,
    ArithUnary: _arith_unary,
    Cmp: _cmp,
    Cast: _cast,
    GroupId: _group_id,
    GroupSize: _group_size,
    Load: _load,
    Store: _store,
    Size: _size,
    Subview: _subview,
    Expand: _expand,
    Fuse: _fuse,
    Alloca: _alloca,
    LifetimeStop: _no_effect,
    Barrier: _no_effect,
}
