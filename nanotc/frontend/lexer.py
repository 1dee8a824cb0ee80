"""Tokens of the tensor language, with source ranges.

Bare words are always keywords: identifiers carry `%` or `@`. Shapes are written without
spaces (`memref<f32x4x?>`, `expand %a[0 -> 2x8]`), so a word that is not a keyword is split
into scalar-type keywords, `x` and integers (`f32x4x8` -> `f32` `x` `4` `x` `8`); anything
else is an `Unknown token`. Literal values are decoded here: integers outside the language's
64-bit range and floats outside double range are reported, and lexing goes on.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from nanotc.diagnostics import DiagnosticSink, ErrorKind, Source, SourcePos, SourceRange
from nanotc.ir.types import INDEX_MAX


class Tok(enum.Enum):
    LOCAL = "local identifier"
    GLOBAL = "global identifier"
    INTEGER = "integer constant"
    BOOLEAN = "boolean constant"  # true, false: i1 constants
    FLOAT = "floating constant"
    KEYWORD = "keyword"
    SUFFIX = "modifier"
    PUNCT = "punctuation"
    EOF = "end of file"


@dataclass(frozen=True)
class Token:
    kind: Tok
    text: str
    range: SourceRange
    value: int | float | None = None

    def describe(self) -> str:
        """How a syntax error names this token (as bison does)."""
        if self.kind in (Tok.KEYWORD, Tok.SUFFIX, Tok.PUNCT):
            return f'"{self.text}"'
        return self.kind.value

    def is_(self, text: str) -> bool:
        return self.kind in (Tok.KEYWORD, Tok.SUFFIX, Tok.PUNCT) and self.text == text


_TYPE_KEYWORDS = ("i1", "i8", "i16", "i32", "i64", "index", "f16", "bf16", "f32", "f64")
KEYWORDS = frozenset(
    (
        *_TYPE_KEYWORDS,
        *"func work_group_size subgroup_size void memref group strided offset x".split(),
        *"true false alloca arith cast cmp expand fuse group_id group_size load size".split(),
        *"subview if else for foreach axpby gemm gemv ger hadamard hadamard_product".split(),
        *"sum barrier lifetime_stop yield store".split(),
    )
)
# Longest first, so that `i16x4` splits as `i16` `x` `4`, never `i1` `6`...
_SCALAR_WORDS = sorted(_TYPE_KEYWORDS, key=len, reverse=True)
_SHAPE_PIECE = re.compile("|".join([*_SCALAR_WORDS, r"x", r"\d+"]))
_INT_MAX_DIGITS = len(str(INDEX_MAX))

_PATTERNS = re.compile(
    r"""
      (?P<space>[ \t\r\n]+|;[^\n]*)
    | (?P<local>%(?:\d+|[A-Za-z][A-Za-z0-9_]*))
    | (?P<global>@(?:\d+|[A-Za-z][A-Za-z0-9_]*))
    | (?P<hex>[+-]?0[xX](?:[0-9a-fA-F]*\.[0-9a-fA-F]+|[0-9a-fA-F]+\.)(?:[pP][+-]?\d+)?
             |[+-]?0[xX][0-9a-fA-F]+[pP][+-]?\d+)
    | (?P<float>[+-]?(?:\d*\.\d+|\d+\.)(?:[eE][+-]?\d+)?|[+-]?\d+[eE][+-]?\d+)
    | (?P<int>[+-]?\d+)
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<suffix>\.[A-Za-z_][A-Za-z0-9_]*)
    | (?P<punct>->|[=,:(){}\[\]<>?])
    """,
    re.VERBOSE,
)


class Lexer:
    def __init__(self, source: Source, sink: DiagnosticSink):
        self.text = source.text
        self.sink = sink
        self.line_starts = [0] + [i + 1 for i, c in enumerate(self.text) if c == "\n"]

    def pos(self, offset: int) -> SourcePos:
        line = _bisect_right(self.line_starts, offset)
        return SourcePos(line, offset - self.line_starts[line - 1] + 1)

    def range(self, begin: int, end: int) -> SourceRange:
        """Range of text[begin:end] (end exclusive)."""
        return SourceRange(self.pos(begin), self.pos(max(begin, end - 1)))

    def tokens(self) -> list[Token]:
        out: list[Token] = []
        offset = 0
        while offset < len(self.text):
            m = _PATTERNS.match(self.text, offset)
            if m is None:  # up to where a token could start: a `}` after it is one
                end = offset + 1
                while end < len(self.text) and _PATTERNS.match(self.text, end) is None:
                    end += 1
                self.sink.error(ErrorKind.UNKNOWN_TOKEN, self.range(offset, end))
                offset = end
                continue
            kind = m.lastgroup
            if kind != "space":
                out.extend(self._token(kind or "", m.group(), offset))
            offset = m.end()
        end = len(self.text)
        out.append(Token(Tok.EOF, "", self.range(end, end + 1)))
        return out

    def _token(self, kind: str, text: str, offset: int) -> list[Token]:
        where = self.range(offset, offset + len(text))
        if kind == "local":
            return [Token(Tok.LOCAL, text, where)]
        if kind == "global":
            return [Token(Tok.GLOBAL, text, where)]
        if kind == "int":
            return [Token(Tok.INTEGER, text, where, self._integer(text, where))]
        if kind in ("float", "hex"):
            return [Token(Tok.FLOAT, text, where, self._float(text, where, kind == "hex"))]
        if kind == "suffix":
            return [Token(Tok.SUFFIX, text, where)]
        if kind == "punct":
            return [Token(Tok.PUNCT, text, where)]
        return self._word(text, offset)

    def _integer(self, text: str, where: SourceRange) -> int:
        # count digits before converting: int() refuses texts of over 4300 digits
        digits = text.lstrip("+-").lstrip("0") or "0"
        if len(digits) > _INT_MAX_DIGITS or int(digits) > INDEX_MAX:
            self.sink.error(ErrorKind.INTEGER_OVERFLOW, where)
            return 1  # a stand-in no check refuses (0 is no work-group size, no divisor)
        return -int(digits) if text.startswith("-") else int(digits)

    def _float(self, text: str, where: SourceRange, is_hex: bool) -> float:
        try:
            value = _parse_hex_float(text) if is_hex else float(text)
        except OverflowError:
            value = float("inf")
        if value in (float("inf"), float("-inf")):
            self.sink.error(ErrorKind.FLOAT_OUT_OF_RANGE, where)
            return 0.0
        return value

    def _word(self, text: str, offset: int) -> list[Token]:
        if text in KEYWORDS:
            value = {"true": 1, "false": 0}.get(text)
            kind = Tok.BOOLEAN if value is not None else Tok.KEYWORD
            return [Token(kind, text, self.range(offset, offset + len(text)), value)]
        pieces = list(_SHAPE_PIECE.finditer(text))
        if "".join(p.group() for p in pieces) != text or pieces[0].start() != 0:
            self.sink.error(ErrorKind.UNKNOWN_TOKEN, self.range(offset, offset + len(text)))
            return []
        out = []
        for p in pieces:
            where = self.range(offset + p.start(), offset + p.end())
            if p.group().isdigit():
                out.append(Token(Tok.INTEGER, p.group(), where, self._integer(p.group(), where)))
            else:
                out.append(Token(Tok.KEYWORD, p.group(), where))
        return out


def _parse_hex_float(text: str) -> float:
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if "p" not in body.lower():
        body += "p0"
    return sign * float.fromhex(body)


def _bisect_right(starts: list[int], offset: int) -> int:
    lo, hi = 0, len(starts)
    while lo < hi:
        mid = (lo + hi) // 2
        if starts[mid] <= offset:
            lo = mid + 1
        else:
            hi = mid
    return lo


def tokenize(source: Source, sink: DiagnosticSink) -> list[Token]:
    return Lexer(source, sink).tokens()
