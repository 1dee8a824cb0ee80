"""The evaluator's entry point and its control flow: launch, regions, if, for, foreach, yield.

`evaluate(program, name, args, group_size)` binds the launch arguments with
`nanotc.runtime.arguments.bind_arguments` (so bad arguments raise the same ArgumentError as a
native launch), then runs work-groups 0 .. group_size-1 one after another, each executing the
function body in program order and updating the caller's arrays in place.

Control flow:

- `if`: the condition is an i1; the branch taken runs, and the if's results are the values its
  final `yield` gives. Without an else region a false condition does nothing.
- `for %i = start, stop[, step]`: the loop variable takes start, start + step, ... while it is
  less than stop (a signed comparison); step defaults to 1. The trip count is computed exactly
  (decision: the loop variable never wraps around the loop type; the native backend must not
  turn `var + step` overflowing past `stop` into extra iterations). A run-time step <= 0 runs
  no iterations (so no loop can run forever); a literal one is rejected by the checker.
- `foreach`: the same range with step 1. Its iterations may run in any order; the reference
  runs them in increasing order.
- `yield` ends its region and hands its values to the enclosing `if`.

Floating-point exceptions (overflow, division by zero, invalid) are silent, as in native code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nanotc.ir.conversions import from_python
from nanotc.ir.core import Function, Instruction, Program, Region
from nanotc.ir.instructions import For, Foreach, If, Yield
from nanotc.ir.types import GroupType, MemRefType, Type
from nanotc.ir.values import Value
from nanotc.reference import blas, replicated
from nanotc.reference.errors import EvaluationError
from nanotc.reference.frame import Constants, Frame, HandlerTable
from nanotc.reference.memory import GroupArgument, argument_view
from nanotc.runtime.arguments import BoundArgument, GroupView, MemrefView, bind_arguments


def evaluate(program: Program, name: str, args: Sequence[Any], group_size: int) -> None:
    """Run work-groups 0..group_size-1 of function `name` (with or without `@`) on `args`."""
    func = program.function(name.removeprefix("@"))
    if isinstance(group_size, bool) or not isinstance(group_size, int | np.integer):
        raise TypeError(f"group_size must be an integer, not {type(group_size).__name__}")
    if group_size < 0:
        raise ValueError(f"group_size must be non-negative, not {group_size}")
    group_size = int(group_size)
    arguments = _argument_values(func, bind_arguments(func, args, group_size))
    constants = Constants()
    with np.errstate(all="ignore"):
        for group_id in range(group_size):
            frame = Frame(group_id, group_size, dict(arguments), constants)
            run_region(func.body, frame)


def _argument_values(func: Function, bound: Sequence[BoundArgument]) -> dict[Value, Any]:
    return {param: _argument_value(param.type, b) for param, b in zip(func.arguments, bound)}


def _argument_value(t: Type, bound: BoundArgument) -> Any:
    if isinstance(bound, MemrefView):
        assert isinstance(t, MemRefType)
        return argument_view(bound, t)
    if isinstance(bound, GroupView):
        assert isinstance(t, GroupType)
        return GroupArgument(bound, t)
    return bound


def run_region(region: Region, frame: Frame) -> list[Any]:
    """Execute a region's instructions in order; return the values of its final yield."""
    for inst in region.instructions:
        if isinstance(inst, Yield):
            return [frame.get(v) for v in inst.values]
        execute(inst, frame)
    return []


def execute(inst: Instruction, frame: Frame) -> None:
    handler = HANDLERS.get(type(inst))
    if handler is None:
        raise NotImplementedError(f"the reference evaluator does not know {inst.name}")
    try:
        results = handler(inst, frame)
    except EvaluationError as e:
        e.locate(inst, frame.group_id)
        raise
    frame.define(inst.results, results)


def _if(inst: If, frame: Frame) -> Sequence[Any]:
    region = inst.then if frame.get(inst.cond) else inst.otherwise
    if region is None:
        return ()
    return run_region(region, frame)[: len(inst.results)]


def _loop(inst: For | Foreach, frame: Frame, step: int) -> Sequence[Any]:
    start, stop = frame.get_int(inst.start), frame.get_int(inst.stop)
    if start >= stop or step <= 0:
        return ()
    variable = inst.body.params[0]
    for i in range(start, stop, step):
        frame.values[variable] = from_python(i, inst.loop_type)
        run_region(inst.body, frame)
    return ()


def _for(inst: For, frame: Frame) -> Sequence[Any]:
    step = 1 if inst.step is None else frame.get_int(inst.step)
    return _loop(inst, frame, step)


def _foreach(inst: Foreach, frame: Frame) -> Sequence[Any]:
    return _loop(inst, frame, 1)


HANDLERS: HandlerTable = {
    **replicated.HANDLERS,
    **blas.HANDLERS,
    If: _if,
    For: _for,
    Foreach: _foreach,
}
