"""The IR skeleton: instructions declared as data, regions, functions and programs.

An instruction class declares its fields once, in order, with `operand`, `operands`,
`attribute` and `region`, plus its `syntax` (see `nanotc.ir.syntax`). From that declaration
nanotc derives the keyword constructor, operand walking and rewriting, the parser and the
printer. Result types are computed by `result_types()` from operands and attributes; an
instruction whose operands make that impossible raises `IRError`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from nanotc.diagnostics import ErrorKind, Source, SourceRange
from nanotc.ir.types import ScalarType, Type
from nanotc.ir.values import OpResult, RegionParam, Value


class Kind(enum.Enum):
    """Replicated instructions run once per work-item; collective ones share the work."""

    REPLICATED = "replicated"
    COLLECTIVE = "collective"


class RegionKind(enum.Enum):
    MIXED = "mixed"
    SPMD = "spmd"


class ConstKind(enum.Flag):
    """Which literals may stand in place of an SSA value for an operand."""

    NONE = 0
    INT = enum.auto()
    FLOAT = enum.auto()
    WILDCARD = enum.auto()  # `?`
    NUMBER = INT | FLOAT


class IRError(Exception):
    """An instruction cannot be built: the kind of error and, if known, the operand at fault."""

    def __init__(self, kind: ErrorKind, *args: object, operand: str | None = None):
        super().__init__(kind.format(*args))
        self.kind = kind
        self.args_ = args
        self.operand = operand


class AttrKind:
    """How an attribute is spelled; the parser and printer dispatch on the subclass."""


@dataclass(frozen=True)
class Suffix(AttrKind):
    """An enum spelled as `.value` glued to the instruction name (`gemm.n.t`, `arith.add`)."""

    enum_type: type[enum.Enum]


@dataclass(frozen=True)
class Flag(AttrKind):
    """A boolean spelled as a glued suffix when true (`.atomic`)."""

    spelling: str


class IntAttr(AttrKind):
    pass


class ScalarTypeAttr(AttrKind):
    pass


class ScalarTypeListAttr(AttrKind):
    pass


class MemRefTypeAttr(AttrKind):
    pass


ConstTypeRule = ScalarType | str | None
"""Type of a literal operand not covered by a `type(...)` directive: a fixed type, or the
name of a ScalarType attribute of the same instruction."""


@dataclass
class Field:
    """One declared field of an instruction; `name` is set when the class is created."""

    name: str = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Instruction | None, owner: type) -> Any:
        if instance is None:
            return self
        return instance.fields[self.name]

    def __set__(self, instance: Instruction, value: Any) -> None:
        instance.fields[self.name] = value


@dataclass
class OperandField(Field):
    constants: ConstKind = ConstKind.NONE
    const_type: ConstTypeRule = None
    variadic: bool = False
    optional: bool = False
    holes: bool = False  # variadic entries may be None


@dataclass
class AttrField(Field):
    kind: AttrKind = field(default_factory=IntAttr)
    default: Any = None
    required: bool = True


@dataclass
class RegionField(Field):
    region_kind: RegionKind = RegionKind.MIXED
    optional: bool = False


def operand(constants: ConstKind = ConstKind.NONE, const_type: ConstTypeRule = None) -> Any:
    return OperandField(constants=constants, const_type=const_type)


def optional_operand(
    constants: ConstKind = ConstKind.NONE, const_type: ConstTypeRule = None
) -> Any:
    return OperandField(constants=constants, const_type=const_type, optional=True)


def operands(
    constants: ConstKind = ConstKind.NONE, const_type: ConstTypeRule = None, holes: bool = False
) -> Any:
    return OperandField(constants=constants, const_type=const_type, variadic=True, holes=holes)


def attribute(kind: AttrKind, default: Any = None, required: bool = True) -> Any:
    return AttrField(kind=kind, default=default, required=required and default is None)


def region(kind: RegionKind = RegionKind.MIXED, optional: bool = False) -> Any:
    return RegionField(region_kind=kind, optional=optional)


@dataclass(frozen=True)
class InstrSpec:
    operands: tuple[OperandField, ...]
    attrs: tuple[AttrField, ...]
    regions: tuple[RegionField, ...]

    def field(self, name: str) -> Field:
        for f in (*self.operands, *self.attrs, *self.regions):
            if f.name == name:
                return f
        raise KeyError(name)


class Instruction:
    """Base class of all instructions of all IR levels."""

    name: ClassVar[str]
    kind: ClassVar[Kind] = Kind.REPLICATED
    syntax: ClassVar[str] = ""
    spec: ClassVar[InstrSpec]
    format: ClassVar[Any]  # nanotc.ir.syntax.Format, compiled from `syntax`
    aliases: ClassVar[tuple[str, ...]] = ()
    terminates_region: ClassVar[bool] = False  # yields `values` to the enclosing instruction

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = [v for v in cls.__dict__.values() if isinstance(v, Field)]
        inherited = getattr(cls, "spec", None)
        if inherited is not None and not fields:
            return
        cls.spec = InstrSpec(
            operands=tuple(f for f in fields if isinstance(f, OperandField)),
            attrs=tuple(f for f in fields if isinstance(f, AttrField)),
            regions=tuple(f for f in fields if isinstance(f, RegionField)),
        )
        if "name" in cls.__dict__:
            from nanotc.ir.syntax import compile_format

            cls.format = compile_format(cls.name, cls.syntax, cls.spec)

    def __init__(
        self,
        *,
        loc: SourceRange | None = None,
        result_types: Sequence[Type] | None = None,
        **values: Any,
    ) -> None:
        self.loc = loc
        self.operand_locs: dict[str, SourceRange] = {}
        self.fields: dict[str, Any] = {}
        for f in (*self.spec.operands, *self.spec.attrs, *self.spec.regions):
            self.fields[f.name] = _field_value(type(self).__name__, f, values.pop(f.name, None))
        if values:
            raise TypeError(f"{type(self).__name__} has no fields {sorted(values)}")
        types = self.result_types() if result_types is None else result_types
        self.results: tuple[OpResult, ...] = tuple(
            OpResult(t, self, i) for i, t in enumerate(types)
        )

    # -- derived from the declaration -------------------------------------------------------
    def result_types(self) -> Sequence[Type]:
        return ()

    @classmethod
    def region_param_types(cls, attrs: Mapping[str, Any], region_name: str) -> Sequence[Type]:
        """Types of the values a region defines on entry (loop variables), from attributes."""
        return ()

    def const_type(self, f: OperandField) -> ScalarType | None:
        rule = f.const_type
        return self.fields[rule] if isinstance(rule, str) else rule

    @property
    def result(self) -> OpResult:
        (only,) = self.results
        return only

    def operand_values(self) -> Iterator[Value]:
        """Every operand value in declaration order (variadic ones flattened, holes skipped)."""
        for f in self.spec.operands:
            v = self.fields[f.name]
            if f.variadic:
                yield from (x for x in v if x is not None)
            elif v is not None:
                yield v

    def operands_of(self, name: str) -> list[Value]:
        """The values of one operand field as a list (empty for an absent optional operand)."""
        v = self.fields[name]
        if isinstance(v, list):
            return [x for x in v if x is not None]
        return [] if v is None else [v]

    def regions(self) -> Iterator[Region]:
        for f in self.spec.regions:
            r = self.fields[f.name]
            if r is not None:
                yield r

    def __repr__(self) -> str:
        from nanotc.ir.printer import print_instruction

        return print_instruction(self)


def _field_value(owner: str, f: Field, value: Any) -> Any:
    if isinstance(f, OperandField):
        if f.variadic:
            return list(value or [])
        if value is None and not f.optional:
            raise TypeError(f"{owner}: operand {f.name} is required")
        return value
    if isinstance(f, AttrField):
        if value is None:
            if f.required:
                raise TypeError(f"{owner}: attribute {f.name} is required")
            return f.default
        return value
    if isinstance(f, RegionField):
        if value is None and not f.optional:
            raise TypeError(f"{owner}: region {f.name} is required")
        return value
    raise AssertionError(f)


class Region:
    """An ordered list of instructions, with values defined on entry (`params`)."""

    def __init__(self, kind: RegionKind = RegionKind.MIXED, loc: SourceRange | None = None):
        self.kind = kind
        self.loc = loc
        self.params: list[RegionParam] = []
        self.instructions: list[Instruction] = []

    def add_param(
        self, type: Type, name: str | None = None, loc: SourceRange | None = None
    ) -> RegionParam:
        param = RegionParam(type, self, len(self.params), name, loc)
        self.params.append(param)
        return param

    def append(self, inst: Instruction) -> tuple[OpResult, ...]:
        self.instructions.append(inst)
        return inst.results

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)


@dataclass
class Function:
    name: str
    body: Region
    work_group_size: tuple[int, int] | None = None
    subgroup_size: int | None = None
    loc: SourceRange | None = None
    attr_locs: dict[str, SourceRange] = field(default_factory=dict)

    @property
    def arguments(self) -> list[RegionParam]:
        return self.body.params


@dataclass
class Program:
    functions: list[Function] = field(default_factory=list)
    source: Source | None = None

    def function(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name:
                return f
        known = ", ".join("@" + f.name for f in self.functions) or "none"
        raise KeyError(f"no function @{name} in program (functions: {known})")


def walk(region: Region) -> Iterator[Instruction]:
    """All instructions of a region and its nested regions, in program order."""
    for inst in region.instructions:
        yield inst
        for r in inst.regions():
            yield from walk(r)


def rewrite_bottom_up(region: Region, replace: Callable[[Instruction], list[Instruction]]) -> None:
    """Each instruction of `region` and of its nested regions, innermost first, replaced by
    `replace(inst)` (`[inst]` keeps it): the shape of most lowering passes."""
    out: list[Instruction] = []
    for inst in region.instructions:
        for nested in inst.regions():
            rewrite_bottom_up(nested, replace)
        out.extend(replace(inst))
    region.instructions = out
