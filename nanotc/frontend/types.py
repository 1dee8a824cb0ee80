"""Token-stream helpers and the parser for types (scalars, memrefs, groups, void).

Types are checked for well-formedness where they are written, so errors point at the type
text: mode sizes non-negative, one stride per mode, strides of the strided layout rule, group
offsets non-negative.
"""

from __future__ import annotations

from typing import NoReturn

from nanotc.diagnostics import DiagnosticSink, ErrorKind, SourceRange
from nanotc.frontend.lexer import Tok, Token
from nanotc.ir.types import (
    DYNAMIC,
    Extent,
    GroupType,
    MemRefType,
    ScalarType,
    Type,
    VoidType,
    memref_errors,
    packed_strides,
)

_SCALARS = {t.value: t for t in ScalarType}


class TokenStream:
    def __init__(self, tokens: list[Token], sink: DiagnosticSink):
        self.tokens = tokens
        self.sink = sink
        self.i = 0

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def previous(self) -> Token:
        return self.tokens[max(self.i - 1, 0)]

    def next(self) -> Token:
        tok = self.peek()
        self.i = min(self.i + 1, len(self.tokens) - 1)
        return tok

    def accept(self, text: str) -> Token | None:
        return self.next() if self.peek().is_(text) else None

    def expect(self, text: str) -> Token:
        tok = self.accept(text)
        if tok is None:
            self.fail(f'"{text}"')
        return tok

    def expect_kind(self, kind: Tok) -> Token:
        if self.peek().kind is not kind:
            self.fail(kind.value)
        return self.next()

    def fail(self, expecting: str) -> NoReturn:
        from nanotc.frontend.parser import ParseFailure

        tok = self.peek()
        self.sink.error(ErrorKind.SYNTAX, tok.range, tok.describe(), expecting)
        raise ParseFailure


class TypeParser(TokenStream):
    def starts_type(self) -> bool:
        tok = self.peek()
        return tok.kind is Tok.KEYWORD and (
            tok.text in _SCALARS or tok.text in ("memref", "group", "void")
        )

    def type_(self) -> tuple[Type, SourceRange]:
        start = self.peek()
        if start.is_("memref"):
            t: Type = self.memref_type()
        elif start.is_("group"):
            t = self.group_type()
        elif start.is_("void"):
            self.next()
            t = VoidType()
        else:
            t = self.scalar_type()
        return t, start.range.to(self.previous().range)

    def scalar_type(self) -> ScalarType:
        tok = self.peek()
        if tok.kind is Tok.KEYWORD and tok.text in _SCALARS:
            return _SCALARS[self.next().text]
        self.fail("scalar type")

    def memref_type(self) -> MemRefType:
        start = self.expect("memref")
        self.expect("<")
        element = self.scalar_type()
        shape: list[Extent] = []
        while self.accept("x"):
            shape.append(self.extent())
        stride: list[Extent] | None = None
        if self.accept(","):
            self.expect("strided")
            self.expect("<")
            stride = []
            if not self.peek().is_(">"):
                stride.append(self.extent())
                while self.accept(","):
                    stride.append(self.extent())
            self.expect(">")
        end = self.expect(">")
        where = start.range.to(end.range)
        if stride is not None and len(stride) != len(shape):
            self.sink.error(ErrorKind.SHAPE_STRIDE_MISMATCH, where)
            stride = None
        t = MemRefType(element, tuple(shape), tuple(stride) if stride else packed_strides(shape))
        for kind in memref_errors(t):
            self.sink.error(kind, where)
        return t

    def group_type(self) -> GroupType:
        start = self.expect("group")
        self.expect("<")
        memref = self.memref_type()
        offset: Extent = 0
        if self.accept(","):
            self.expect("offset")
            self.expect(":")
            offset = self.extent()
        end = self.expect(">")
        if offset is not DYNAMIC and offset < 0:
            self.sink.error(ErrorKind.INVALID_OFFSET, start.range.to(end.range))
        return GroupType(memref, offset)

    def extent(self) -> Extent:
        if self.accept("?"):
            return DYNAMIC
        tok = self.expect_kind(Tok.INTEGER)
        assert isinstance(tok.value, int)
        return tok.value
