"""What a kernel's collective instructions ask of its arguments' sizes: the operand modes an
instruction pairs element for element must be equally long.

The checker compares the static extents of those modes (`BlasInstruction.matching_modes`);
a dynamic one (`?`) is only known at launch, and the native code trusts it: an axpby of a
4-element x into a 10^8-element y would read far past x. `same_extents` derives, once per
kernel, the pairs of parameter modes that such operands are whole views of: the parameter
itself, or a subview that keeps the mode whole (`:`), as a batch's `subview %A[:, :, %g]`
keeps A's first two, or the work-group's member of a group (`load %G[%g]` with `%g =
group_id`), whose sizes are compared member by member over the launch's work-groups.
Binding then compares the arrays' sizes (`nanotc.runtime.arguments` raises the error). Modes
reached otherwise (a slice `0:%n`, an expand, a member picked by another index) are not
tested: the program's own arithmetic decides them.

Likewise `group_indexed_modes` finds the parameter modes that every work-group indexes by its
own id (`subview %A[:, :, %g]`, `load` or `store` at `%g`, in the function's body itself,
not under an `if` or a `for`): they must hold at least as many elements as the launch has
work-groups, or the last work-groups would read and write past the array.
"""

from __future__ import annotations

from dataclasses import dataclass

from nanotc.ir.core import Function, Instruction, walk
from nanotc.ir.instructions import BlasInstruction, Load, Mode, Store, Subview, is_group_id
from nanotc.ir.types import DYNAMIC, GroupType, MemRefType
from nanotc.ir.values import Constant, OpResult
from nanotc.runtime.writes import instruction_site


@dataclass(frozen=True)
class ParameterMode:
    """Mode `mode` of parameter `param`: of its array, or where `member`, of the member of its
    group that each work-group loads (its group id's)."""

    param: int
    mode: int
    member: bool = False


@dataclass(frozen=True)
class SameExtent:
    """The two parameter modes must have equal sizes: `where` pairs their elements."""

    first: ParameterMode
    second: ParameterMode
    where: str


@dataclass(frozen=True)
class GroupIndexed:
    """Every work-group indexes mode `mode` of memref parameter `param` by its id (`where`)."""

    param: int
    mode: int
    where: str


def same_extents(func: Function) -> tuple[SameExtent, ...]:
    """One entry per pair of distinct parameter modes that a collective instruction pairs,
    where at least one of them is dynamic."""
    params = {id(p): i for i, p in enumerate(func.arguments)}
    pairs: dict[tuple[ParameterMode, ParameterMode], SameExtent] = {}
    for inst in walk(func.body):
        if not isinstance(inst, BlasInstruction):
            continue
        for x, y in inst.matching_modes():
            if DYNAMIC not in (x[0].type.shape[x[1]], y[0].type.shape[y[1]]):
                continue
            first, second = _parameter_mode(x, params), _parameter_mode(y, params)
            if first is not None and second is not None and first != second:
                pairs.setdefault((first, second), SameExtent(first, second, instruction_site(inst)))
    return tuple(pairs.values())


def _parameter_mode(mode: Mode, params: dict[int, int]) -> ParameterMode | None:
    """The parameter mode that `mode` of a value is whole, through subviews that keep it
    whole and a load of the work-group's member of a group; None where it is not."""
    value, index = mode
    member = False
    while id(value) not in params:
        owner = value.owner if isinstance(value, OpResult) else None
        if isinstance(owner, Load) and is_group_id(owner.indices[0]):
            value, member = owner.source, True
            continue
        if not isinstance(owner, Subview):
            return None
        kept = [m for m, size in enumerate(owner.sizes) if size is not None]
        source_mode = kept[index]
        offset, size = owner.offsets[source_mode], owner.sizes[source_mode]
        starts_at_zero = isinstance(offset, Constant) and offset.value == 0
        if not (starts_at_zero and isinstance(size, Constant) and size.is_wildcard):
            return None
        value, index = owner.source, source_mode
    kind = GroupType if member else MemRefType
    return ParameterMode(params[id(value)], index, member) if isinstance(value.type, kind) else None


def group_indexed_modes(func: Function) -> tuple[GroupIndexed, ...]:
    """The memref parameter modes (of the parameter, or kept whole by subviews) that an
    instruction every work-group runs indexes by `group_id`."""
    params = {id(p): i for i, p in enumerate(func.arguments)}
    found: dict[tuple[int, int], GroupIndexed] = {}
    for inst in func.body.instructions:
        for mode in _modes_indexed_by_group_id(inst):
            place = _parameter_mode(mode, params)
            if place is not None and not place.member:
                key = (place.param, place.mode)
                found.setdefault(key, GroupIndexed(*key, instruction_site(inst)))
    return tuple(found.values())


def _modes_indexed_by_group_id(inst: Instruction) -> list[Mode]:
    """The modes of a memref that `inst` indexes (a subview's dropped modes, a load's or a
    store's indices) by `group_id`."""
    if isinstance(inst, Subview):
        indexed = zip(inst.offsets, inst.sizes)
        return [
            (inst.source, m)
            for m, (at, size) in enumerate(indexed)
            if size is None and is_group_id(at)
        ]
    if isinstance(inst, Load | Store):
        source = inst.source if isinstance(inst, Load) else inst.target
        if isinstance(source.type, MemRefType):
            return [(source, m) for m, at in enumerate(inst.indices) if is_group_id(at)]
    return []
