"""The state of one work-group while it runs: its id, the launch's group size, and the values
of the SSA identifiers defined so far (function arguments, results, loop variables).

Values are numpy scalars (scalar types), numpy views (memrefs, see `nanotc.reference.memory`)
and `GroupArgument`s (groups). Inline constants are turned into values of their type once per
launch and shared by all work-groups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from nanotc.ir.conversions import from_python
from nanotc.ir.core import Instruction
from nanotc.ir.types import ScalarType
from nanotc.ir.values import Constant, Value


class Constants:
    """Values of inline constants, converted to their type on first use."""

    def __init__(self) -> None:
        self._values: dict[Constant, np.generic] = {}

    def value(self, constant: Constant) -> np.generic:
        known = self._values.get(constant)
        if known is None:
            assert constant.value is not None, "`?` is handled by subview and expand"
            assert isinstance(constant.type, ScalarType)
            known = self._values[constant] = from_python(constant.value, constant.type)
        return known


@dataclass
class Frame:
    group_id: int
    group_size: int
    values: dict[Value, Any]
    constants: Constants

    def get(self, value: Value) -> Any:
        """The value of an operand: an inline constant or an identifier defined earlier."""
        if isinstance(value, Constant):
            return self.constants.value(value)
        return self.values[value]

    def get_int(self, value: Value) -> int:
        """The value of an integer operand as a Python int (signed)."""
        return int(self.get(value))

    def define(self, targets: Sequence[Value], results: Sequence[Any]) -> None:
        for target, result in zip(targets, results, strict=True):
            self.values[target] = result


Handler: TypeAlias = Callable[[Any, Frame], Sequence[Any]]
"""Evaluates one instruction of a given class in a frame and returns its results' values."""

HandlerTable: TypeAlias = dict[type[Instruction], Handler]
