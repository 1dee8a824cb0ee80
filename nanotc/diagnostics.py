"""Source locations, the fixed catalogue of error kinds, and caret rendering.

Every error nanotc reports about a program is a `Diagnostic`: an `ErrorKind` (whose message
text is fixed, so tests and tools can match it), an optional `SourceRange`, and the source it
points into. `CompileError` carries one or more diagnostics and renders them the way the
reference implementation does::

    kernel.ir:7.9-99: Collective instruction must not be called from SPMD region
            gemm.n.n 1.0, %a, %b, 0.0, %c : f32, ...
            ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~

Columns are 1-based and the end of a range is inclusive.
"""

from __future__ import annotations

import enum
import unicodedata
from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class SourcePos:
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.line}.{self.column}"


@dataclass(frozen=True)
class SourceRange:
    """An inclusive range of characters in one source text."""

    begin: SourcePos
    end: SourcePos

    def __str__(self) -> str:
        b, e = self.begin, self.end
        if b == e:
            return str(b)
        if b.line == e.line:
            return f"{b}-{e.column}"
        return f"{b}-{e}"

    def to(self, other: SourceRange | None) -> SourceRange:
        """The range from the start of self to the end of `other`."""
        return self if other is None else SourceRange(self.begin, other.end)


class ErrorKind(enum.Enum):
    """Each kind has one fixed message; `{}` slots take the diagnostic's arguments."""

    # lexical and syntactic
    UNKNOWN_TOKEN = "Unknown token"
    SYNTAX = "syntax error, unexpected {}, expecting {}"
    INTEGER_OVERFLOW = "Integer overflow"
    FLOAT_OUT_OF_RANGE = "Floating point value out of range"
    CONSTANT_OUT_OF_RANGE = "Constant {} does not fit type {}"
    FLOAT_CONSTANT_FOR_INT = "Floating point constant used where type {} is expected"
    # names and scopes
    UNDEFINED_IDENTIFIER = "Undefined identifier {}"
    REDEFINED_IDENTIFIER = "Identifier {} was already used at {}"
    REDEFINED_FUNCTION = "Function {} was already defined at {}"
    RESERVED_FUNCTION_NAME = "Function name {} is reserved: {}"
    # types
    OPERAND_TYPE_MISMATCH = "Type of SSA value does not match operand type: {} is {}, not {}"
    EXPECTED_MEMREF = "Expected memref type"
    EXPECTED_MEMREF_OR_GROUP = "Expected memref or group operand"
    EXPECTED_SCALAR = "Expected scalar type"
    EXPECTED_INT = "Expected integer type"
    EXPECTED_INDEX = "Expected index type"
    EXPECTED_BOOLEAN = "Expected boolean type"
    EXPECTED_VECTOR_OR_MATRIX = "Expected vector or matrix input"
    EXPECTED_VECTOR = "Expected memref of order 1 (vector)"
    EXPECTED_MATRIX = "Expected memref of order 2 (matrix)"
    EXPECTED_SCALAR_MEMREF = "Expected memref of order 0 (scalar)"
    SCALAR_MISMATCH = "Scalar type mismatch: {}"
    FP_UNSUPPORTED = "Floating point type unsupported for instruction"
    BOOL_UNSUPPORTED = "Boolean type unsupported for instruction"
    LIFETIME_STOP_NOT_ALLOCA = "lifetime_stop expects a memref defined by alloca"
    TYPE_LIST_LENGTH = "Number of types ({1}) does not match number of values ({0})"
    VOID_ARGUMENT = "Arguments must not have void type"
    # shapes and layouts
    INCOMPATIBLE_SHAPES = "Incompatible tensor shapes: {}"
    OUTPUT_IS_OPERAND = "Output {} is also operand {}: an output must not overlap the operands"
    INVALID_SHAPE = "Invalid shape: mode sizes must be non-negative or dynamic ('?')"
    SHAPE_STRIDE_MISMATCH = "Dimension of shape and stride must match"
    INVALID_STRIDE = "Invalid stride: strides must satisfy 1 <= S1 and S(i-1)*s(i-1) <= S(i)"
    INVALID_OFFSET = "Offset must be non-negative or dynamic"
    NUMBER_OF_INDICES = (
        "Number of indices must match memref order or must be 1 for group types: {} given for {}"
    )
    OUT_OF_BOUNDS = "Argument is out of bounds: {}"
    INVALID_SLICE = "Static offset must be non-negative and static size must be positive"
    EXPAND_TOO_SMALL = "Expand shape must have at least 2 entries"
    EXPAND_TOO_MANY_DYNAMIC = "At most one mode must be dynamic ('?')"
    EXPAND_PRODUCT = "Product of expand shape must equal mode size: {}"
    FUSE_ILLEGAL = (
        "Modes cannot be fused: stride of mode {} must equal stride times size of mode {}"
    )
    ALLOCA_DYNAMIC = "Alloca requires a memref type with static shape and strides"
    ALLOCA_TOO_LARGE = "Alloca of {} bytes exceeds the {} bytes a process can address"
    # regions and control flow
    COLLECTIVE_IN_SPMD = "Collective instruction must not be called from SPMD region"
    NESTED_SPMD = "SPMD regions must not be nested"
    YIELD_MISMATCH = "Number of yielded values does not match number of values yielded by region"
    YIELD_TYPE_MISMATCH = "Type of yielded value does not match type returned by region"
    UNEXPECTED_YIELD = "Yield encountered in non-yielding region"
    MISSING_YIELD = 'Last instruction of region that returns values must be "yield"'
    YIELD_NOT_LAST = '"yield" must be the last instruction of its region'
    MISSING_ELSE = "If instruction that returns values must have an else region"
    RESULT_COUNT = "Number of result identifiers ({}) does not match number of returned values ({})"
    INVALID_STEP = "Loop step must be positive"
    NESTING_TOO_DEEP = "Regions are nested more than {} levels deep"
    # attributes
    DUPLICATE_ATTRIBUTE = "Attribute {} given more than once"
    INVALID_WORK_GROUP_SIZE = "Work-group size modes must be positive"
    WORK_GROUP_SIZE_TOO_LARGE = (
        "Work group size is larger than maximum work group size supported by device ({})"
    )
    UNSUPPORTED_SUBGROUP_SIZE = "Unsupported subgroup size (supported: {})"
    WORK_GROUP_NOT_SUBGROUP_MULTIPLE = (
        "First mode of work-group size must be a multiple of the subgroup size"
    )

    def format(self, *args: object) -> str:
        return self.value.format(*args)


@dataclass(frozen=True)
class Diagnostic:
    kind: ErrorKind
    range: SourceRange | None = None
    args: tuple[object, ...] = ()

    @property
    def message(self) -> str:
        return self.kind.format(*self.args)


@dataclass(frozen=True)
class Source:
    """A program text and the name it is reported under (`file.ir`, `<stdin>`, `<memory>`)."""

    text: str
    name: str = "<memory>"

    def __post_init__(self) -> None:
        require_type(self.text, str, "program text must be a str")
        require_type(self.name, str, "a program's name must be a str")
        if "\r" in self.text:
            # CRLF and classic-Mac CR files count lines as LF files do, in errors and markers
            text = self.text.replace("\r\n", "\n").replace("\r", "\n")
            object.__setattr__(self, "text", text)

    def lines(self) -> list[str]:
        return self.text.split("\n")


def require_type(value: object, kind: type | tuple[type, ...], expected: str) -> None:
    """TypeError saying what a public function expected and what it was given instead (not an
    AttributeError from deep inside the compiler)."""
    if not isinstance(value, kind):
        raise TypeError(f"{expected}, got {type(value).__name__} {value!r}"[:200])


def render(diag: Diagnostic, source: Source | None) -> str:
    """Render one diagnostic as `NAME:RANGE: message`, the source lines, and `~` markers."""
    if diag.range is None or source is None:
        prefix = f"{source.name}: " if source is not None else ""
        return f"{prefix}{diag.message}"
    out = [f"{source.name}:{diag.range}: {diag.message}"]
    lines = source.lines()
    b, e = diag.range.begin, diag.range.end
    for number in range(b.line, min(e.line, len(lines)) + 1):
        text = lines[number - 1]
        first = b.column if number == b.line else _first_non_blank(text)
        last = e.column if number == e.line else len(text)
        out.append(text)
        indent = "".join(_blank_under(c) for c in text[: first - 1])
        marked = sum(len(_blank_under(c)) for c in text[first - 1 : last])
        out.append(indent + "~" * max(1, marked))
    return "\n".join(out)


def _blank_under(char: str) -> str:
    """What the marker line puts under `char`: the tab itself, so markers line up however
    tabs are shown; two columns under a wide (CJK) character; none under a combining mark."""
    if char == "\t":
        return "\t"
    if unicodedata.combining(char):
        return ""
    return "  " if unicodedata.east_asian_width(char) in ("W", "F") else " "


def _first_non_blank(text: str) -> int:
    stripped = len(text) - len(text.lstrip())
    return stripped + 1 if stripped < len(text) else 1


@dataclass
class CompileError(Exception):
    """The single exception type for errors in a program; holds every diagnostic found."""

    diagnostics: list[Diagnostic]
    source: Source | None = field(default=None)

    def __post_init__(self) -> None:
        super().__init__(self.render())

    def __str__(self) -> str:
        return self.render()

    def render(self) -> str:
        return "\n".join(render(d, self.source) for d in self.diagnostics)

    @property
    def first(self) -> Diagnostic:
        return self.diagnostics[0]


class DiagnosticSink:
    """Collects diagnostics while a stage keeps going, so every error is reported at once."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []

    def error(self, kind: ErrorKind, where: SourceRange | None, *args: object) -> None:
        self.diagnostics.append(Diagnostic(kind, where, args))
