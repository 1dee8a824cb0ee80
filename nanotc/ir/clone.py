"""Deep copies of IR, derived from the instruction declarations.

Lowering rewrites a copy, so the checked program stays available (for the reference
evaluator and for printing). `clone_region` is also how a lowering moves a loop body into a
microkernel: values from outside the region are kept, values defined inside are renamed.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from nanotc.ir.core import Function, Instruction, OperandField, Program, Region
from nanotc.ir.values import Value

ValueMap = MutableMapping[int, Value]


def clone_program(program: Program) -> Program:
    return Program([clone_function(f) for f in program.functions], program.source)


def clone_function(func: Function) -> Function:
    mapping: ValueMap = {}
    body = clone_region(func.body, mapping)
    return Function(
        func.name, body, func.work_group_size, func.subgroup_size, func.loc, dict(func.attr_locs)
    )


def clone_region(region: Region, mapping: ValueMap) -> Region:
    copy = Region(region.kind, region.loc)
    for param in region.params:
        mapping[id(param)] = copy.add_param(param.type, param.name, param.loc)
    for inst in region.instructions:
        copy.append(clone_instruction(inst, mapping))
    return copy


def clone_instruction(inst: Instruction, mapping: ValueMap) -> Instruction:
    fields: dict[str, Any] = {}
    for f in inst.spec.operands:
        fields[f.name] = _map_operand(f, inst.fields[f.name], mapping)
    for a in inst.spec.attrs:
        fields[a.name] = inst.fields[a.name]
    for r in inst.spec.regions:
        region = inst.fields[r.name]
        fields[r.name] = None if region is None else clone_region(region, mapping)
    copy = type(inst)(loc=inst.loc, result_types=[r.type for r in inst.results], **fields)
    copy.operand_locs = dict(inst.operand_locs)
    for old, new in zip(inst.results, copy.results):
        new.name = old.name
        mapping[id(old)] = new
    return copy


def _map_operand(f: OperandField, value: Any, mapping: ValueMap) -> Any:
    if f.variadic:
        return [None if v is None else mapping.get(id(v), v) for v in value]
    return None if value is None else mapping.get(id(value), value)
