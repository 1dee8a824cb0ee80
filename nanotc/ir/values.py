"""SSA values: instruction results, region parameters, and inline constants.

Constants are values without a definition, exactly as they appear inline in the text
(`gemm.n.n 1.0, ...`, `load %a[5]`). The `?` of expand shapes and subview sizes is the
`WILDCARD` constant: "infer this extent".
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from nanotc.diagnostics import SourceRange
from nanotc.ir.conversions import convert_scalar, from_python
from nanotc.ir.types import INDEX, ScalarType, Type

if TYPE_CHECKING:
    from nanotc.ir.core import Instruction, Region


class Value:
    """A typed SSA value. `name` is the identifier without `%` (None: numbered on print)."""

    __slots__ = ("loc", "name", "type")

    def __init__(self, type: Type, name: str | None = None, loc: SourceRange | None = None):
        self.type = type
        self.name = name
        self.loc = loc

    def __repr__(self) -> str:
        return f"<{type(self).__name__} %{self.name} : {self.type}>"


class OpResult(Value):
    __slots__ = ("index", "owner")

    def __init__(self, type: Type, owner: Instruction, index: int, name: str | None = None):
        super().__init__(type, name)
        self.owner = owner
        self.index = index


class RegionParam(Value):
    """A value defined on entry to a region: a function argument or a loop variable."""

    __slots__ = ("index", "region")

    def __init__(
        self, type: Type, region: Region, index: int, name: str | None, loc: SourceRange | None
    ):
        super().__init__(type, name, loc)
        self.region = region
        self.index = index


class Constant(Value):
    """An inline literal of a scalar type; `value` is None only for WILDCARD (`?`)."""

    __slots__ = ("value",)

    def __init__(self, value: int | float | None, type: ScalarType, loc: SourceRange | None = None):
        super().__init__(type, None, loc)
        if value is not None:
            value = float(value) if type.is_float else int(value)
        self.value = value

    @property
    def is_wildcard(self) -> bool:
        return self.value is None

    def literal(self) -> str:
        """The literal as printed: `?`, `true`/`false` for i1, shortest round-trip floats."""
        if self.value is None:
            return "?"
        if self.type is ScalarType.I1:
            return "true" if self.value else "false"
        if isinstance(self.value, float):
            return _float_literal(self.value)
        return str(self.value)

    def __repr__(self) -> str:
        return f"<Constant {self.literal()} : {self.type}>"


def is_literal(value: object, number: int | float) -> bool:
    """Whether `value` is the inline literal `number` (alpha 1, beta 0, a step of 1)."""
    return isinstance(value, Constant) and value.value == number


def _float_literal(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"non-finite float constant {value} has no literal")
    text = repr(value)
    return text if any(c in text for c in ".e") else text + ".0"


def wildcard(loc: SourceRange | None = None) -> Constant:
    return Constant(None, INDEX, loc)


def literal_in(value: Value, t: ScalarType) -> int | float | None:
    """A literal operand's value once converted to `t`, as an instruction computing in `t`
    sees it (an f64 beta of 1e-50 is 0 in f32); None for a value known only at run time."""
    if not isinstance(value, Constant) or value.value is None:
        return None
    assert isinstance(value.type, ScalarType)
    # as the cast rules convert it: an f64 1e10 saturates in i32, an i64 2^40 wraps
    own = from_python(value.value, value.type)
    with np.errstate(all="ignore"):  # a NaN or an infinity converted to an integer type
        converted: int | float = convert_scalar(own, value.type, t).item()
    return converted


class Poison(Value):
    """Stands in for an undefined or ill-typed value so the frontend can keep going
    and report every error; never survives a successful parse."""

    __slots__ = ()
