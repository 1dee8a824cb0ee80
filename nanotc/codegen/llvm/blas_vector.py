"""Vectorised axpby, hadamard, sum, gemv.t, gemv.n and ger: memory-bound instructions as loops
over full target vectors along the contiguous mode, with one masked vector for the remainder.

They apply when the compute type is f32 or f64, every element type a float (16-bit ones are
widened on load and rounded on store), the update is not atomic, and every operand is
contiguous along the vectorised mode; otherwise the plain loop nests of `blas` run.
Reductions (sum, gemv.t) accumulate CHAINS vectors of partial sums and add them and their
lanes at the end, so their rounding differs from a sequential sum (as BLAS
implementations' does). gemv.n runs as axpys down A's columns, accumulating into c, or where
A's rows are contiguous (a row-major A) as gemv.t's dot products along them; ger as scaled
copies of x down C's columns. A matrix whose columns hold 1 to 4 elements back to back
(`SHORT_COLUMNS`; 8 too for gemv.n and ger, `SHORT_COLUMNS_BY_VECTORS`: its leading dimension
equals its rows) is instead read and written as whole vectors, a vector of columns at a
time, the other operand's elements shuffled to match.
Row-major matrices run these loops on their transposed views
(`blas`); an axpby between a column-major and a row-major matrix transposes blocks in
registers (`transposed_axpby`).

The element-wise loops (axpby, hadamard, gemv.n) over long or dynamic extents first peel
one masked vector of the elements before the main streamed operand's next boundary of a
vector's bytes (`VectorLoops.lead`), so that its full vectors never straddle two cache lines:
numpy's large arrays start 16 bytes past a line, and such split loads cost gemv.n up to half
its rate from L1 and L2. Those that do not read their output (beta 0) and move more than L3
holds store its full vectors around the caches (`VectorLoops.streaming`): no line is read
before it is written. Reductions are not peeled: their partial sums would then depend on
where the operand lies, and a copy of the same data could sum to other bits. On AVX-512 the
main loop of a sum over one long stream that fits L2 instead reads it as aligned vectors,
permuted into the lanes unaligned loads would give (`realign`): the same sums, without
straddling loads. Elsewhere (gemv.t, short columns, operands past L2) split loads measured
faster.

Element-wise loops and reductions whose operands come from memory (several L3s of them) use
vectors of the target's streaming width where it is narrower than its registers: Zen 4
streams from memory faster in 256-bit vectors than in 512-bit ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

from llvmlite import ir

from nanotc.codegen.llvm import realign
from nanotc.codegen.llvm import vector as vec
from nanotc.codegen.llvm.emitter import FunctionEmitter
from nanotc.codegen.llvm.helpers import (
    add,
    as_value,
    carried_loop,
    compare_extent,
    element_ptr,
    for_range,
    memref_element,
    minimum,
    mul,
    on_element_boundary,
    read,
    round_down,
    sub,
)
from nanotc.codegen.llvm.output import OutputUpdate, compute_type, write_output
from nanotc.codegen.llvm.types import Dim, MemrefValue, const, register_type
from nanotc.ir.instructions import BlasInstruction, Transpose
from nanotc.ir.types import MemRefType, ScalarType

VECTOR_TYPES = (ScalarType.F32, ScalarType.F64)
# Independent partial sums a reduction keeps: a vector add takes 4 cycles and two start per
# cycle, so 8 in flight keep the adder busy.
CHAINS = 8
GEMV_COLUMNS = 4  # columns of A a gemv.t reads together (each with CHAINS / 4 partial sums)
SHORT_COLUMNS = (1, 2, 3, 4)  # column lengths whose gemv.t reads A back to back (`_short_columns`)
# and those of gemv.n and ger, whose shuffles are one per vector at any length (gemv.t's
# gather each of `rows` rows from `rows` vectors)
SHORT_COLUMNS_BY_VECTORS = (*SHORT_COLUMNS, 8)
GEMV_N_COLUMNS = 8  # columns of A a gemv.n adds to c in one pass over it
LINE_BYTES = 64
PEEL_VECTORS = 4  # static extents shorter than this many vectors are not peeled
# An element-wise loop whose operands make this share of L3's bytes or more does not keep its
# output cached anyway, so where it does not read it (beta 0) it stores its full vectors
# around the caches, each line written without first being read (docs/benchmarks.md).
PAST_L3_SHARE = 0.75
# Operands of this many L3s or more come from memory: vectors of the target's streaming width
# read them faster (Zen 4: 1.01-1.18x at 2-6 L3s; 0.9x at one L3, which still holds most).
FROM_MEMORY_L3_SHARE = 2.0
VectorOf = Callable[[MemrefValue], ir.Value]  # a stream's vector at the step's offset
Accumulate = Callable[[ir.Value, VectorOf], ir.Value]  # (acc, vector_of) -> acc
Body = Callable[[ir.Value, ir.Value | None], None]  # (offset, mask or None): one vector's work


class Streaming(NamedTuple):
    """How an element-wise loop's full vectors stream (each an i1, or a bool known at
    compile time): `VectorLoops.streaming`."""

    around: bool | ir.Value  # stored around the caches
    narrow: bool | ir.Value  # in vectors of the target's streaming width


CACHED = Streaming(False, False)


def applies(inst: BlasInstruction, contiguous: list[tuple[MemrefValue, int]]) -> bool:
    """Vector code fits: float compute type, no atomics, unit stride where it vectorises."""
    output: MemrefValue = contiguous[0][0]
    ct = compute_type(output.type.element)
    floats = all(m.type.element.is_float for m, _ in contiguous)
    unit = all(m.type.order == 0 or m.stride[mode] == 1 for m, mode in contiguous)
    return ct in VECTOR_TYPES and floats and unit and not inst.atomic


def gemv_n_applies(inst: BlasInstruction, out: MemrefValue, a: MemrefValue) -> bool:
    """`gemv_n` fits: vector code for A's columns and c, and c holds the compute type."""
    same = compute_type(out.type.element) == out.type.element
    return same and applies(inst, [(out, 0), (a, 0)])


class VectorLoops:
    def __init__(self, e: FunctionEmitter, ct: ScalarType, unroll: bool = True):
        """`unroll=False`: LLVM does not unroll the full vectors' loop (a cold or
        memory-bound pass, whose unrolled copies would only cost compile time)."""
        self.e, self.b, self.ct, self.unroll = e, e.b, ct, unroll
        self.lanes = e.state.target.lanes(ct)
        self.type = vec.vector_type(register_type(ct), self.lanes)
        self.fused = e.state.target.fma
        self._around_caches = False  # the loop being emitted stores full vectors around them

    def load(self, m: MemrefValue, offset: Dim, mask: ir.Value | None) -> ir.Value:
        element = m.type.element
        ptr = element_ptr(self.b, m.ptr, element, offset)
        raw = vec.load(self.b, vec.memory_vector(element, self.lanes), ptr, mask, element.size)
        return vec.to_register(self.b, raw, element, self.type)

    def lead(self, n: Dim, stream: MemrefValue) -> ir.Value | None:
        """How many of the n elements of `stream` lie before its next boundary of a vector's
        bytes (at most a cache line; 0 when its address is not a multiple of its element
        size): fewer than one vector. None where peeling them does not pay: static extents
        of a few vectors."""
        if isinstance(n, int) and n < PEEL_VECTORS * self.lanes:
            return None
        b, size = self.b, stream.type.element.size
        boundary = min(LINE_BYTES, self.lanes * size)
        address = b.ptrtoint(stream.ptr, ir.IntType(64))
        bytes_to_boundary = b.and_(b.neg(address), const(boundary - 1))
        elements = b.udiv(bytes_to_boundary, const(size))
        count = b.select(on_element_boundary(b, stream), elements, const(0))
        return as_value(b, minimum(b, count, n))

    def streaming(self, u: OutputUpdate, out: MemrefValue, elements: Dim,
                  streams: Sequence[MemrefValue]) -> Streaming:  # fmt: skip
        """How the full vectors of a loop led to `out`'s vector boundary (`lead`) stream, for
        `elements` of each of `streams` (every operand read or written): around the caches
        past PAST_L3_SHARE of L3 where `out` is not read (beta 0) and lies on its elements,
        so the lead aligns it; in the target's streaming width past FROM_MEMORY_L3_SHARE."""
        narrow = self._streams_narrow(elements, streams)
        past_l3 = self._past(PAST_L3_SHARE, elements, streams)
        if past_l3 is False or u.beta is not None:
            return Streaming(False, narrow)
        aligned = on_element_boundary(self.b, out)
        return Streaming(aligned if past_l3 is True else self.b.and_(past_l3, aligned), narrow)

    def _streams_narrow(self, elements: Dim, streams: Sequence[MemrefValue]) -> bool | ir.Value:
        """The target streams memory faster in narrower vectors, and `elements` of each of
        `streams` make FROM_MEMORY_L3_SHARE of L3 or more."""
        if self.e.state.target.stream_lanes(self.ct) >= self.lanes:
            return False
        return self._past(FROM_MEMORY_L3_SHARE, elements, streams)

    def _past(self, share: float, elements: Dim, streams: Sequence[MemrefValue]) -> bool | ir.Value:
        """`elements` of each of `streams` make `share` of L3's bytes or more."""
        bytes_per_element = sum(stream.type.element.size for stream in streams)
        fewest = math.ceil(share * self.e.state.target.l3_bytes / bytes_per_element)
        return compare_extent(self.b, ">=", elements, fewest)

    def splat(self, value: ir.Value) -> ir.Value:
        """`value` in every lane of the vectors being emitted."""
        return vec.splat(self.b, value, self.lanes)

    def each(
        self, n: Dim, body: Body, lead: ir.Value | None = None, streaming: Streaming = CACHED
    ) -> None:
        """body(i, mask) for i = 0, L, 2L, ... covering n elements, the last one masked; with
        a `lead`, first body(0, mask of the lead) and the full vectors from there, as
        `streaming` (`streaming()`) says. The body reads the width of its vectors from
        `lanes` and `type`, which narrow for the loops from memory."""
        b, lanes = self.b, self.lanes
        start: Dim = 0
        if lead is not None:
            body(const(0), vec.dynamic_mask(b, lanes, 0, lead))
            start = lead
        main = add(b, start, round_down(b, sub(b, n, start), lanes))
        self._full_vectors(start, main, body, streaming if lead is not None else CACHED)
        if isinstance(n, int) and isinstance(main, int):
            if n % lanes:
                body(const(main), vec.static_mask(lanes, n % lanes))
            return
        rest = b.sub(as_value(b, n), as_value(b, main))
        with b.if_then(b.icmp_signed(">", rest, const(0))):
            body(as_value(b, main), vec.dynamic_mask(b, lanes, 0, rest))

    def _full_vectors(self, start: Dim, stop: Dim, body: Body, streaming: Streaming) -> None:
        """body(i, None) for i from start to stop (a whole number of vectors apart), in
        vectors of the target's streaming width where `streaming.narrow` holds."""
        if streaming.narrow is False:
            self._stored(start, stop, body, streaming.around)
            return
        if streaming.narrow is True:
            with self._streaming_width():
                self._stored(start, stop, body, streaming.around)
            return
        with self.b.if_else(streaming.narrow) as (from_memory, cached):
            with from_memory, self._streaming_width():
                self._stored(start, stop, body, streaming.around)
            with cached:
                self._stored(start, stop, body, streaming.around)

    def _stored(self, start: Dim, stop: Dim, body: Body, around: bool | ir.Value) -> None:
        """The loop of `_full_vectors`, in a copy whose stores go around the caches, followed
        by a store fence, where `around` holds."""
        if around is False:
            self._vector_loop(start, stop, body, "v")
            return
        with self.b.if_else(around) as (then, otherwise):
            with then:
                self._around_caches_loop(start, stop, body)
            with otherwise:
                self._vector_loop(start, stop, body, "v")

    def _around_caches_loop(self, start: Dim, stop: Dim, body: Body) -> None:
        self._around_caches = True
        self._vector_loop(start, stop, body, "nt")
        self._around_caches = False
        vec.store_fence(self.b)

    def _vector_loop(self, start: Dim, stop: Dim, body: Body, name: str) -> None:
        loop = for_range(self.b, start, stop, self.lanes, name=name, vectorize=False,
                         unroll=self.unroll)  # fmt: skip
        with loop as i:
            body(i, None)

    @contextmanager
    def _streaming_width(self) -> Iterator[None]:
        """`lanes` and `type` of the target's streaming vectors while the loop is emitted."""
        full = self.lanes, self.type
        self.lanes = self.e.state.target.stream_lanes(self.ct)
        self.type = vec.vector_type(register_type(self.ct), self.lanes)
        try:
            yield
        finally:
            self.lanes, self.type = full

    def reduce(self, n: Dim, streams: list[MemrefValue], steps: Sequence[Accumulate],
               operand: Dim | None = None) -> list[ir.Value]:  # fmt: skip
        """One scalar per step: the sum over n elements that `step(acc, vector_of)` adds to a
        vector of partial sums, reading vectors of `streams`. Each step keeps CHAINS //
        len(steps) independent partial sums in the main loop, so that the adds overlap rather
        than wait for each other. Where the `operand` the streams are read from (elements;
        the streams alone when None) makes FROM_MEMORY_L3_SHARE of L3, the vectors are of the
        target's streaming width; else, where a stream can be realigned (`realign`) and that
        pays, the main loop reads it with aligned loads and stops a vector earlier. The choice
        depends on n and `operand` only, so the same data always sums to the same bits."""
        elements = n if operand is None else operand
        narrow = self._streams_narrow(elements, streams)
        if narrow is False:
            return self._reduce(n, streams, steps, elements)
        if narrow is True:
            with self._streaming_width():
                return self._reduce(n, streams, steps, None)
        b = self.b
        with b.if_else(narrow) as (streamed, cached):
            with streamed, self._streaming_width():
                from_memory = self._reduce(n, streams, steps, None), b.block
            with cached:
                from_caches = self._reduce(n, streams, steps, elements), b.block
        return _merged(b, from_memory, from_caches)

    def _reduce(self, n: Dim, streams: list[MemrefValue], steps: Sequence[Accumulate],
                operand: Dim | None) -> list[ir.Value]:  # fmt: skip
        """`reduce` in vectors of the current width, realigned where that pays for the
        `operand` (never where None)."""
        b, lanes, target = self.b, self.lanes, self.e.state.target
        chains = max(1, CHAINS // len(steps))
        wide = lanes * chains
        main = round_down(b, n, lanes)
        pays = (
            operand is not None
            and realign.applies(target, streams, self.ct)
            and realign.pays(b, target, n, operand, self.ct)
        )
        realigned = pays is not False
        rest = (
            round_down(b, _at_least_zero(b, sub(b, n, lanes)), wide)
            if realigned
            else round_down(b, n, wide)
        )
        init = [vec.zeros(self.type)] * (len(steps) * chains)

        def unrolled(i: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            offsets = [b.add(i, const(c * lanes)) if c else i for c in range(chains)]
            return [
                step(acc[t * chains + c], self._loads(offsets[c], None))
                for t, step in enumerate(steps)
                for c in range(chains)
            ]

        if realigned:
            acc = self._realigned_or((rest, wide), streams[0], steps, init, unrolled, pays)
        else:
            acc = carried_loop(b, 0, rest, wide, init, unrolled, name="r")
        firsts = [_add_all(b, acc[t * chains : (t + 1) * chains]) for t in range(len(steps))]
        firsts = carried_loop(
            b, rest, main, lanes, firsts,
            lambda i, acc: [step(a, self._loads(i, None)) for step, a in zip(steps, acc)],
            name="rv",
        )  # fmt: skip
        tail = self._tail(n, main)
        if tail is not None:
            loads = self._loads(as_value(b, main), tail)
            firsts = [step(a, loads) for step, a in zip(steps, firsts)]
        return [self.lane_sum(a) for a in firsts]

    def lane_sum(self, vector: ir.Value) -> ir.Value:
        """The sum of the vector's lanes, in any order."""
        name = f"llvm.vector.reduce.fadd.{vec.suffix(self.type)}"
        return self._call_reassoc(name, [ir.Constant(self.type.element, 0.0), vector])

    def _loads(self, offset: ir.Value, mask: ir.Value | None) -> VectorOf:
        return lambda stream: self.load(stream, offset, mask)

    def _realigned_or(self, loop: tuple[Dim, int], stream: MemrefValue,
                      steps: Sequence[Accumulate], init: list[ir.Value],
                      unrolled: Callable[[ir.Value, list[ir.Value]], list[ir.Value]],
                      pays: bool | ir.Value) -> list[ir.Value]:  # fmt: skip
        """The chained main loop over elements 0 .. `loop` = (stop, step): realigned where it
        runs, it `pays` (`realign.pays`) and `stream` lies off a vector boundary (on an
        element boundary), else `unrolled` with plain loads. Both give the same vectors, so
        the same sums."""
        b, (stop, step_size), chains = self.b, loop, loop[1] // self.lanes
        a = realign.RealignedStream(b, stream, self.type)

        def realigned(i: ir.Value, carried: list[ir.Value]) -> list[ir.Value]:
            acc, previous = carried[:-1], carried[-1]
            blocks = [previous] + [
                a.aligned(b.add(i, const((c + 1) * self.lanes))) for c in range(chains)
            ]
            vectors = [a.vector(blocks[c], blocks[c + 1]) for c in range(chains)]
            sums = [
                step(acc[t * chains + c], lambda _, c=c: vectors[c])
                for t, step in enumerate(steps)
                for c in range(chains)
            ]
            return [*sums, blocks[-1]]

        runs = b.icmp_signed(">", as_value(b, stop), const(0))
        chosen = b.and_(b.and_(a.element_aligned, a.moved), runs)
        if pays is not True:
            chosen = b.and_(chosen, pays)
        with b.if_else(chosen) as (then, otherwise):
            with then:
                out = carried_loop(b, 0, stop, step_size, [*init, a.first()], realigned, name="ra")
                from_realigned = out[: len(init)], b.block
            with otherwise:
                from_plain = carried_loop(b, 0, stop, step_size, init, unrolled, name="r"), b.block
        return _merged(b, from_realigned, from_plain)

    def _tail(self, n: Dim, main: Dim) -> ir.Value | None:
        """The mask of the last, partial vector (all lanes off when there is none at run
        time), or None when n is static and a multiple of the lanes."""
        if isinstance(n, int):
            return vec.static_mask(self.lanes, n % self.lanes) if n % self.lanes else None
        return vec.dynamic_mask(self.b, self.lanes, 0, self.b.sub(n, as_value(self.b, main)))

    def _call_reassoc(self, name: str, args: list[ir.Value]) -> ir.Value:
        fn = self.b.module.globals.get(name) or ir.Function(
            self.b.module, ir.FunctionType(self.type.element, [a.type for a in args]), name
        )
        return self.b.call(fn, args, fastmath=("reassoc",))

    def store(self, m: MemrefValue, offset: Dim, value: ir.Value, mask: ir.Value | None) -> None:
        element = m.type.element
        ptr = element_ptr(self.b, m.ptr, element, offset)
        memory = vec.to_memory(self.b, value, element)
        if self._around_caches and mask is None:
            vec.store_around_caches(self.b, memory, ptr, self.lanes * element.size)
        else:
            vec.store(self.b, memory, ptr, mask, element.size)

    def write(self, u: OutputUpdate, out: MemrefValue, offset: Dim, x: ir.Value,
              mask: ir.Value | None) -> None:  # fmt: skip
        """out[offset : offset+L] := alpha*x + beta*out (out not read when beta is 0); with
        beta 1, alpha*x + out is one FMA where the target has it."""
        b = self.b
        alpha = self.splat(u.alpha)
        if u.beta is None:
            value = b.fmul(x, alpha)
        elif u.beta_is_one:
            value = vec.fma(b, x, alpha, self.load(out, offset, mask), self.fused)
        else:
            old = self.load(out, offset, mask)
            value = b.fadd(b.fmul(x, alpha), b.fmul(old, self.splat(u.beta)))
        self.store(out, offset, value, mask)


def _merged(b: ir.IRBuilder, *branches: tuple[list[ir.Value], ir.Block]) -> list[ir.Value]:
    """The values of whichever branch ran, each branch (its values, its last block) having
    just joined."""
    merged = []
    for values in zip(*(values for values, _ in branches)):
        phi = b.phi(values[0].type)
        for value, (_, block) in zip(values, branches):
            phi.add_incoming(value, block)
        merged.append(phi)
    return merged


def _at_least_zero(b: ir.IRBuilder, n: Dim) -> Dim:
    if isinstance(n, int):
        return max(n, 0)
    return b.select(b.icmp_signed("<", n, const(0)), const(0), n)


def _add_all(b: ir.IRBuilder, values: Sequence[ir.Value]) -> ir.Value:
    """Sum of the vectors as a balanced tree."""
    while len(values) > 1:
        pairs = [b.fadd(x, y) for x, y in zip(values[::2], values[1::2])]
        values = pairs + list(values[len(pairs) * 2 :])
    return values[0]


def axpby(e: FunctionEmitter, a: MemrefValue, out: MemrefValue, u: OutputUpdate) -> None:
    v = VectorLoops(e, u.compute)
    if _compact(a) and _compact(out):
        a, out = _flattened(a), _flattened(out)
    n = out.shape[0]
    if out.type.order == 1:
        streaming = v.streaming(u, out, n, [a, out])
        v.each(
            n, lambda i, mask: v.write(u, out, i, v.load(a, i, mask), mask), v.lead(n, out),
            streaming,
        )  # fmt: skip
        return
    streaming = v.streaming(u, out, mul(e.b, n, out.shape[1]), [a, out])
    with for_range(e.b, 0, out.shape[1], name="j") as j:
        a_col, out_col = _column(e, a, j), _column(e, out, j)
        v.each(
            n, lambda i, mask: v.write(u, out_col, i, v.load(a_col, i, mask), mask),
            v.lead(n, out_col), streaming,
        )  # fmt: skip


def transposed_axpby(e: FunctionEmitter, a: MemrefValue, out: MemrefValue, u: OutputUpdate) -> None:
    """out := alpha a^T + beta out, the columns of both contiguous: in blocks of lanes x
    lanes, each `lanes` columns of a loaded as vectors and transposed in registers
    (`vec.transpose`) into `lanes` columns of out; the rows and columns past the last whole
    block element by element. Element by element throughout, every element of a column of
    out came from another line of a (1024^2 f32 in L2: 3.7 GB/s)."""
    v, b = VectorLoops(e, u.compute), e.b
    rows, cols = out.shape
    whole_rows, whole_cols = round_down(b, rows, v.lanes), round_down(b, cols, v.lanes)
    columns_of_blocks = for_range(b, 0, whole_cols, v.lanes, name="jb")
    with columns_of_blocks as j, for_range(b, 0, whole_rows, v.lanes, name="ib") as i:
        block = [v.load(_column(e, a, b.add(i, const(r))), j, None) for r in range(v.lanes)]
        for t, column in enumerate(vec.transpose(b, block)):
            v.write(u, _column(e, out, b.add(j, const(t))), i, column, None)

    def element(i: ir.Value, j: ir.Value) -> None:
        write_output(b, u, memref_element(b, out, [i, j]), read(b, a, [j, i], u.compute))

    with for_range(b, 0, cols, name="j") as j, for_range(b, whole_rows, rows, name="i") as i:
        element(i, j)
    with for_range(b, whole_cols, cols, name="j") as j, for_range(b, 0, whole_rows, name="i") as i:
        element(i, j)


def _compact(m: MemrefValue) -> bool:
    """A static matrix whose columns follow each other in memory with no gap."""
    dims = (*m.shape, *m.stride)
    return (
        m.type.order == 2
        and all(isinstance(d, int) for d in dims)
        and (m.stride[0] == 1 and m.stride[1] == m.shape[0])
    )


def _flattened(m: MemrefValue) -> MemrefValue:
    """A compact matrix as one vector of its elements: an element-wise loop over it then
    has one remainder, not one per column (f16 20 x 9 widened: 2 masked vectors, not 9)."""
    size = math.prod(m.type.shape)
    return MemrefValue(MemRefType.packed(m.type.element, [size]), m.ptr, (size,), (1,))


def hadamard(
    e: FunctionEmitter, x: MemrefValue, y: MemrefValue, out: MemrefValue, u: OutputUpdate
) -> None:
    v = VectorLoops(e, u.compute)
    n = out.shape[0]
    v.each(
        n,
        lambda i, mask: v.write(u, out, i, e.b.fmul(v.load(x, i, mask), v.load(y, i, mask)), mask),
        v.lead(n, out),
        v.streaming(u, out, n, [x, y, out]),
    )


def sum_(e: FunctionEmitter, trans: Transpose, a: MemrefValue, out: MemrefValue,
         u: OutputUpdate) -> None:  # fmt: skip
    """sum.n (row sums) or sum.t (column sums, `trans`) of a vector or a matrix."""
    v, b = VectorLoops(e, u.compute), e.b
    if a.type.order == 1:
        (total,) = v.reduce(a.shape[0], [a], [lambda acc, vector_of: b.fadd(acc, vector_of(a))])
        write_output(b, u, out.ptr, total)
    elif trans is Transpose.N:  # row sums: vectors of rows, accumulated over columns

        def rows(i: ir.Value, mask: ir.Value | None) -> None:
            (acc,) = carried_loop(
                b, 0, a.shape[1], 1, [vec.zeros(v.type)],
                lambda j, acc: [b.fadd(acc[0], v.load(_column(e, a, j), i, mask))], name="j",
            )  # fmt: skip
            v.write(u, out, i, acc, mask)

        v.each(out.shape[0], rows)
    else:  # column sums: one reduction along each contiguous column
        elements = mul(b, a.shape[0], a.shape[1])
        with for_range(b, 0, a.shape[1], name="j") as j:
            column = _column(e, a, j)
            (total,) = v.reduce(
                a.shape[0],
                [column],
                [lambda acc, vector_of: b.fadd(acc, vector_of(column))],
                operand=elements,
            )
            write_output(b, u, memref_element(b, out, [j]), total)


def gemv_t(
    e: FunctionEmitter, a: MemrefValue, x: MemrefValue, out: MemrefValue, u: OutputUpdate
) -> None:
    """c(i) = alpha * sum_k A(k, i) x(k) + beta c(i): dot products down the columns of A,
    GEMV_COLUMNS at a time, so that each vector of x is loaded once for all of them and
    their sums accumulate independently; the remaining columns one at a time. (A gemv.n on
    a matrix whose rows are contiguous runs here on its `transposed` view.)"""
    _by_short_columns(e, a, list(SHORT_COLUMNS), lambda rows: _short_columns(e, rows, a, x, out, u),
                      lambda: _by_vector_columns(e, a, x, out, u))  # fmt: skip


def _by_vector_columns(
    e: FunctionEmitter, a: MemrefValue, x: MemrefValue, out: MemrefValue, u: OutputUpdate
) -> None:
    """`_vector_columns` where A's columns fit in a vector (tested at run time where their
    length is not known), else `_by_columns`."""
    b, rows = e.b, a.shape[0]
    lanes = e.state.target.lanes(u.compute)
    if isinstance(rows, int):
        if rows <= lanes:
            _vector_columns(e, a, x, out, u)
        else:
            _by_columns(e, a, x, out, u)
        return
    with b.if_else(b.icmp_signed("<=", rows, const(lanes))) as (short, long):
        with short:
            _vector_columns(e, a, x, out, u)
        with long:
            _by_columns(e, a, x, out, u)


def _vector_columns(
    e: FunctionEmitter, a: MemrefValue, x: MemrefValue, out: MemrefValue, u: OutputUpdate
) -> None:
    """Columns of at most a vector's elements, at any column stride: each column one
    (masked) vector load times x's vector, and a vector of columns' products summed across
    lanes together (`vec.lane_sums`: about 3 instructions a column where each column's own
    sum across lanes takes 8, and `_by_columns`' loops per column many more). Columns past
    the last in the final vector read the last one again and are not stored."""
    v, b = VectorLoops(e, u.compute), e.b
    lanes, (rows, columns) = v.lanes, a.shape
    if isinstance(rows, int):
        mask = vec.static_mask(lanes, rows)
    else:
        mask = vec.dynamic_mask(b, lanes, 0, rows)
    xs = v.load(x, 0, mask)

    def step(j: ir.Value, valid: ir.Value | None) -> None:
        last = None if valid is None else b.sub(b.add(j, valid), const(1))
        products = []
        for c in range(lanes):
            column = b.add(j, const(c)) if c else j
            if last is not None and c:
                column = minimum(b, column, last)
            products.append(b.fmul(v.load(_column(e, a, column), 0, mask), xs))
        (sums,) = vec.lane_sums(b, products)
        v.write(
            u, out, j, sums.vector, None if valid is None else vec.dynamic_mask(b, lanes, 0, valid)
        )

    _by_vectors_of_columns(b, columns, lanes, step)


def _by_columns(
    e: FunctionEmitter, a: MemrefValue, x: MemrefValue, out: MemrefValue, u: OutputUpdate
) -> None:
    b, columns = e.b, a.shape[1]
    blocked = round_down(b, columns, GEMV_COLUMNS)
    with for_range(b, 0, blocked, GEMV_COLUMNS, name="i") as i:
        _dot_columns(e, a, x, out, u, [b.add(i, const(c)) if c else i for c in range(GEMV_COLUMNS)])
    with for_range(b, blocked, columns, name="i1") as i:
        _dot_columns(e, a, x, out, u, [i])


def _by_short_columns(e: FunctionEmitter, a: MemrefValue, counts: list[int],
                      short: Callable[[int], None], other: Callable[[], None]) -> None:  # fmt: skip
    """short(rows) where A's columns are `rows` (one of `counts`) long and lie back to back
    (its column stride is its row count), tested at run time where not known; else other()."""
    b = e.b
    if not counts:
        other()
        return
    rows, rest = counts[0], counts[1:]
    extent, stride = a.shape[0], a.stride[1]
    fits = [dim == rows if isinstance(dim, int) else b.icmp_signed("==", dim, const(rows))
            for dim in (extent, stride)]  # fmt: skip
    if False in fits:
        _by_short_columns(e, a, rest, short, other)
        return
    tests = [test for test in fits if not isinstance(test, bool)]
    if not tests:
        short(rows)
        return
    with b.if_else(tests[0] if len(tests) == 1 else b.and_(*tests)) as (then, otherwise):
        with then:
            short(rows)
        with otherwise:
            _by_short_columns(e, a, rest, short, other)


def _short_columns(e: FunctionEmitter, rows: int, a: MemrefValue, x: MemrefValue,
                   out: MemrefValue, u: OutputUpdate) -> None:  # fmt: skip
    """Columns of `rows` elements back to back, a vector of them at a time: `rows` vectors of
    A's elements loaded, each row gathered from them by shuffles and scaled by its x.
    Column by column, each column's dot product ended in a sum across lanes: f32 2 x 20000
    and 3 x 20000 ran 4-5x slower than numpy."""
    v, b = VectorLoops(e, u.compute), e.b
    lanes, columns = v.lanes, a.shape[1]
    scales = [v.splat(read(b, x, [const(r)], u.compute)) for r in range(rows)]

    def step(j: ir.Value, valid: ir.Value | None) -> None:
        parts = _short_columns_at(e, v, (a, rows), j, valid)
        row = [_lanes_of(b, parts, [c * rows + r for c in range(lanes)]) for r in range(rows)]
        total = b.fmul(row[0], scales[0])
        for r in range(1, rows):
            total = vec.fma(b, row[r], scales[r], total, v.fused)
        v.write(u, out, j, total, None if valid is None else vec.dynamic_mask(b, lanes, 0, valid))

    _by_vectors_of_columns(b, columns, lanes, step)


def _by_vectors_of_columns(b: ir.IRBuilder, columns: Dim, lanes: int,
                           step: Callable[[ir.Value, ir.Value | None], None]) -> None:  # fmt: skip
    """step(j, None) for each whole vector of `lanes` columns from j, then step(j, left) for
    the `left` columns after them, if any."""
    whole = round_down(b, columns, lanes)
    with for_range(b, 0, whole, lanes, name="j", vectorize=False, unroll=False) as j:
        step(j, None)
    left = b.sub(as_value(b, columns), as_value(b, whole))
    with b.if_then(b.icmp_signed(">", left, const(0))):
        step(as_value(b, whole), left)


def _lanes_of(b: ir.IRBuilder, vectors: list[ir.Value], picks: list[int]) -> ir.Value:
    """The vector whose lane c is lane picks[c] of the vectors laid end to end: shuffles of
    two vectors, one more vector at a time."""
    lanes = vectors[0].type.count
    shuffle = vec.vector_type(ir.IntType(32), lanes)
    second = vectors[1] if len(vectors) > 1 else vectors[0]
    first_two = [p if p < 2 * lanes else 0 for p in picks]
    held = b.shuffle_vector(vectors[0], second, ir.Constant(shuffle, first_two))
    for q in range(2, len(vectors)):
        chosen = [lanes + p - q * lanes if q * lanes <= p < (q + 1) * lanes else c
                  for c, p in enumerate(picks)]  # fmt: skip
        held = b.shuffle_vector(held, vectors[q], ir.Constant(shuffle, chosen))
    return held


def _dot_columns(e: FunctionEmitter, a: MemrefValue, x: MemrefValue, out: MemrefValue,
                 u: OutputUpdate, indices: list[ir.Value]) -> None:  # fmt: skip
    v, b = VectorLoops(e, u.compute), e.b

    def dot(column: MemrefValue) -> Accumulate:
        def step(acc: ir.Value, vector_of: VectorOf) -> ir.Value:
            return vec.fma(b, vector_of(column), vector_of(x), acc, v.fused)

        return step

    columns = [_column(e, a, i) for i in indices]
    totals = v.reduce(a.shape[0], [*columns, x], [dot(column) for column in columns])
    for i, total in zip(indices, totals):
        write_output(b, u, memref_element(b, out, [i]), total)


def gemv_n(
    e: FunctionEmitter, a: MemrefValue, x: MemrefValue, out: MemrefValue, u: OutputUpdate
) -> None:
    """c := alpha A x + beta c as axpys down the columns of A (`_column_passes`, column k
    scaled by alpha x(k)), so that A streams from memory in its own order, each column read
    once from top to bottom (the order of BLAS gemv_n kernels)."""
    b = e.b
    counts = list(SHORT_COLUMNS_BY_VECTORS) if x.stride[0] == 1 else []
    _by_short_columns(
        e, a, counts, lambda rows: _short_column_sums(e, rows, a, x, out, u),
        lambda: _column_passes(e, a, out, u, lambda k: b.fmul(u.alpha, read(b, x, [k], u.compute))),
    )  # fmt: skip


def _short_column_sums(e: FunctionEmitter, rows: int, a: MemrefValue, x: MemrefValue,
                       out: MemrefValue, u: OutputUpdate) -> None:  # fmt: skip
    """Columns of `rows` elements back to back, a vector of them at a time: `rows` vectors
    of A's elements each times x's elements laid out to match (shuffled from one vector of
    x), summed into vectors whose lanes belong to known rows, and those lanes summed once at
    the end. Passes down the columns cost a masked load and store of c per few columns: f32
    1 x 20000 ran 5x slower than numpy."""
    v, b = VectorLoops(e, u.compute), e.b
    lanes, columns = v.lanes, a.shape[1]

    def step(k: ir.Value, acc: list[ir.Value], valid: ir.Value | None) -> list[ir.Value]:
        parts = _short_columns_at(e, v, (a, rows), k, valid)
        x_mask = None if valid is None else vec.dynamic_mask(b, lanes, 0, valid)
        xs = v.load(x, k, x_mask)
        return [
            vec.fma(b, part, _lanes_of(b, [xs], [(q * lanes + c) // rows for c in range(lanes)]),
                    acc[q], v.fused)
            for q, part in enumerate(parts)
        ]  # fmt: skip

    whole = round_down(b, columns, lanes)
    acc = carried_loop(b, 0, whole, lanes, [vec.zeros(v.type)] * rows,
                       lambda k, acc_: step(k, acc_, None), name="k", unroll=False)  # fmt: skip
    acc = step(as_value(b, whole), acc, b.sub(as_value(b, columns), as_value(b, whole)))
    if lanes % rows == 0:  # lane c holds row c % rows in every vector: fold them onto c
        total, width = _add_all(b, acc), lanes
        while width > rows:
            width //= 2
            upper = ir.Constant(vec.vector_type(ir.IntType(32), lanes),
                                [(c + width) % lanes for c in range(lanes)])  # fmt: skip
            total = b.fadd(total, b.shuffle_vector(total, total, upper))
        v.write(u, out, const(0), total, vec.static_mask(lanes, rows))
        return
    for r in range(rows):
        of_row = [
            b.select(ir.Constant(vec.vector_type(ir.IntType(1), lanes),
                                 [(q * lanes + c) % rows == r for c in range(lanes)]),
                     part, vec.zeros(v.type))
            for q, part in enumerate(acc)
        ]  # fmt: skip
        write_output(b, u, memref_element(b, out, [const(r)]), v.lane_sum(_add_all(b, of_row)))


def _short_columns_at(e: FunctionEmitter, v: VectorLoops, a: tuple[MemrefValue, int],
                      j: ir.Value, valid: ir.Value | None) -> list[ir.Value]:  # fmt: skip
    """The `rows` vectors of A's elements from column j on (its columns `rows` long, back to
    back): a vector of columns; the first `valid` of them where given."""
    matrix, rows = a
    first, lanes = _column(e, matrix, j), v.lanes
    total = None if valid is None else v.b.mul(valid, const(rows))
    return [
        v.load(first, const(q * lanes),
               None if total is None else vec.dynamic_mask(v.b, lanes, q * lanes, total))
        for q in range(rows)
    ]  # fmt: skip


def row_sums(e: FunctionEmitter, a: MemrefValue, out: MemrefValue, u: OutputUpdate) -> None:
    """sum.n of a matrix whose columns are contiguous, as gemv.n on a vector of ones: passes
    down its columns (`_column_passes`). Vectors of rows summed across all the columns (as
    `sum_`) walk A a column stride at a time, a page apart for large A: 1024^2 f32 in L2 ran
    at 9 GB/s, a quarter of numpy's rate."""
    _column_passes(e, a, out, u, lambda k: u.alpha)


def _column_passes(e: FunctionEmitter, a: MemrefValue, out: MemrefValue, u: OutputUpdate,
                   scale: Callable[[ir.Value], ir.Value]) -> None:  # fmt: skip
    """c := sum over k of scale(k) A(:, k) + beta c: c is first scaled by beta (set to 0 when
    beta is 0, without reading it); then each block of GEMV_N_COLUMNS columns adds to it in
    one pass. c holds partial sums between the passes, so this applies only when c's element
    type is the compute type (one rounding per pass)."""
    v, b = VectorLoops(e, u.compute), e.b
    rows, columns = out.shape[0], a.shape[1]
    if u.beta is None:
        v.each(rows, lambda i, mask: v.store(out, i, vec.zeros(v.type), mask))
    elif not u.beta_is_one:
        beta = vec.splat(b, u.beta, v.lanes)
        v.each(rows, lambda i, mask: v.store(out, i, b.fmul(v.load(out, i, mask), beta), mask))
    _by_rows(v, rows, lambda: _in_registers(e, v, a, out, scale),
             lambda: _passes(e, v, a, out, scale))  # fmt: skip
    _without_columns(e, v, out, u, columns)


def _by_rows(v: VectorLoops, rows: Dim, one_vector: Callable[[], None],
             more: Callable[[], None]) -> None:  # fmt: skip
    """`one_vector()` where `rows` fit one vector, else `more()`: known when compiled, or
    tested once at run time."""
    fits = compare_extent(v.b, "<=", rows, v.lanes)
    if isinstance(fits, bool):
        (one_vector if fits else more)()
        return
    with v.b.if_else(fits) as (few, many):
        with few:
            one_vector()
        with many:
            more()


def _passes(e: FunctionEmitter, v: VectorLoops, a: MemrefValue, out: MemrefValue,
            scale: Callable[[ir.Value], ir.Value]) -> None:  # fmt: skip
    """c += the columns' scaled sum, GEMV_N_COLUMNS columns a pass over c."""
    b, columns = e.b, a.shape[1]
    blocked = round_down(b, columns, GEMV_N_COLUMNS)
    with for_range(b, 0, blocked, GEMV_N_COLUMNS, name="k") as k:
        indices = [b.add(k, const(c)) if c else k for c in range(GEMV_N_COLUMNS)]
        _axpy_columns(e, v, a, out, indices, [scale(i) for i in indices])
    with for_range(b, blocked, columns, name="k1") as k:
        _axpy_columns(e, v, a, out, [k], [scale(k)])


def _in_registers(e: FunctionEmitter, v: VectorLoops, a: MemrefValue, out: MemrefValue,
                  scale: Callable[[ir.Value], ir.Value]) -> None:  # fmt: skip
    """c's rows in one vector (masked): the columns' scaled sum in GEMV_N_COLUMNS
    accumulators, one per column of a step (the FMA latency), added to c once. Passes over
    a c of few rows cost a load, a store and their masks per GEMV_N_COLUMNS columns: f32
    1 x 20000 ran 15-29x slower than numpy."""
    b, columns = e.b, a.shape[1]
    mask = _rows_mask(v, out.shape[0])

    def step(ks: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
        out_acc = list(acc)
        for slot, k in enumerate(ks):
            column = v.load(_column(e, a, k), const(0), mask)
            out_acc[slot] = vec.fma(b, column, v.splat(scale(k)), acc[slot], v.fused)
        return out_acc

    def block(k: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        return step([b.add(k, const(c)) if c else k for c in range(GEMV_N_COLUMNS)], acc)

    blocked = round_down(b, columns, GEMV_N_COLUMNS)
    acc = [vec.zeros(v.type)] * GEMV_N_COLUMNS
    acc = carried_loop(b, 0, blocked, GEMV_N_COLUMNS, acc, block, name="k", unroll=False)
    acc = carried_loop(b, blocked, columns, 1, acc, lambda k, a_: step([k], a_), name="k1",
                       unroll=False)  # fmt: skip
    total = _add_all(b, acc)
    v.store(out, const(0), b.fadd(v.load(out, const(0), mask), total), mask)


def _without_columns(
    e: FunctionEmitter, v: VectorLoops, out: MemrefValue, u: OutputUpdate, columns: Dim
) -> None:
    """With no columns A x is 0, and no pass above multiplied by alpha; alpha * 0 is still
    NaN for an alpha of NaN or infinity, so c gets it (as the reference computes it)."""
    b = e.b
    if isinstance(columns, int) and columns > 0:
        return
    product = vec.splat(b, b.fmul(u.alpha, ir.Constant(u.alpha.type, 0.0)), v.lanes)

    def rows(i: ir.Value, mask: ir.Value | None) -> None:
        v.store(out, i, b.fadd(v.load(out, i, mask), product), mask)

    if isinstance(columns, int):
        v.each(out.shape[0], rows)
        return
    with b.if_then(b.icmp_signed("==", columns, const(0))):
        v.each(out.shape[0], rows)


def ger(
    e: FunctionEmitter, x: MemrefValue, y: MemrefValue, out: MemrefValue, u: OutputUpdate
) -> None:
    """C := alpha x y^T + beta C as one pass down each column of C, so C streams from memory
    in its own order, read and written once, while x stays in L1 or L2 (the order of BLAS
    ger kernels)."""
    v = VectorLoops(e, u.compute)
    counts = list(SHORT_COLUMNS_BY_VECTORS) if y.stride[0] == 1 else []
    _by_short_columns(
        e, out, counts, lambda rows: _ger_short_columns(e, v, (x, y), (out, rows), u),
        lambda: _by_rows(v, out.shape[0], lambda: _ger_one_vector(e, v, x, y, out, u),
                         lambda: _ger_columns(e, v, x, y, out, u)),
    )  # fmt: skip


def _ger_short_columns(e: FunctionEmitter, v: VectorLoops, xy: tuple[MemrefValue, MemrefValue],
                       c: tuple[MemrefValue, int], u: OutputUpdate) -> None:  # fmt: skip
    """C's columns `rows` long and back to back, a vector of them at a time: `rows` vectors
    of C updated by x's elements laid out to match (shuffled once) times y's (shuffled from
    one vector of y). One masked update per column overlapped the next column's in memory:
    f32 1 x 20000 ran 19x slower than torch's addr_."""
    (x, y), (out, rows), b, lanes = xy, c, e.b, v.lanes
    xs = [read(b, x, [const(r)], u.compute) for r in range(rows)]  # (more than a vector holds)
    x_lanes = []
    for q in range(rows):
        pattern = vec.zeros(v.type)
        for i in range(lanes):
            pattern = b.insert_element(pattern, xs[(q * lanes + i) % rows], const(i))
        x_lanes.append(pattern)

    def step(j: ir.Value, valid: ir.Value | None) -> None:
        ys = v.load(y, j, None if valid is None else vec.dynamic_mask(b, lanes, 0, valid))
        first = _column(e, out, j)
        total = None if valid is None else b.mul(valid, const(rows))
        for q in range(rows):
            y_lanes = _lanes_of(b, [ys], [(q * lanes + i) // rows for i in range(lanes)])
            mask = None if total is None else vec.dynamic_mask(b, lanes, q * lanes, total)
            v.write(u, first, const(q * lanes), b.fmul(x_lanes[q], y_lanes), mask)

    _by_vectors_of_columns(b, out.shape[1], lanes, step)


def _ger_columns(e: FunctionEmitter, v: VectorLoops, x: MemrefValue, y: MemrefValue,
                 out: MemrefValue, u: OutputUpdate) -> None:  # fmt: skip
    """Each column of C in vectors led to its boundary (`VectorLoops.each`)."""
    b = e.b
    # x is read from L1 or L2 once per column: C's bytes are what the loops move
    streaming = v.streaming(u, out, mul(b, out.shape[0], out.shape[1]), [out])
    with for_range(b, 0, out.shape[1], name="j") as j:
        column = _column(e, out, j)
        scale = read(b, y, [j], u.compute)

        def rows(i: ir.Value, mask: ir.Value | None, column: MemrefValue = column) -> None:
            v.write(u, column, i, b.fmul(v.load(x, i, mask), v.splat(scale)), mask)

        v.each(out.shape[0], rows, v.lead(out.shape[0], column), streaming)


def _ger_one_vector(e: FunctionEmitter, v: VectorLoops, x: MemrefValue, y: MemrefValue,
                    out: MemrefValue, u: OutputUpdate) -> None:  # fmt: skip
    """C's rows in one vector (masked): x loaded once, one masked update per column. Each
    column led to its boundary cost f32 1 x 20000 21-32x torch's addr_."""
    b, mask = e.b, _rows_mask(v, out.shape[0])
    x_vector = v.load(x, const(0), mask)
    with for_range(b, 0, out.shape[1], name="j") as j:
        scale = v.splat(read(b, y, [j], u.compute))
        v.write(u, _column(e, out, j), const(0), b.fmul(x_vector, scale), mask)


def _axpy_columns(e: FunctionEmitter, v: VectorLoops, a: MemrefValue, out: MemrefValue,
                  indices: list[ir.Value], factors: list[ir.Value]) -> None:  # fmt: skip
    """out += sum over k in indices of factor(k) A(:, k), one pass over out."""
    b = e.b
    scales = [vec.splat(b, factor, v.lanes) for factor in factors]
    columns = [_column(e, a, k) for k in indices]

    def rows(i: ir.Value, mask: ir.Value | None) -> None:
        acc = v.load(out, i, mask)
        for column, scale in zip(columns, scales):
            acc = vec.fma(b, v.load(column, i, mask), scale, acc, v.fused)
        v.store(out, i, acc, mask)

    v.each(out.shape[0], rows, v.lead(out.shape[0], columns[0]))


def _rows_mask(v: VectorLoops, rows: Dim) -> ir.Value | None:
    """The lanes of one vector that hold `rows` rows (None: all of them)."""
    if isinstance(rows, int):
        return vec.static_mask(v.lanes, rows)
    return vec.dynamic_mask(v.b, v.lanes, 0, as_value(v.b, rows))


def _column(e: FunctionEmitter, m: MemrefValue, j: ir.Value) -> MemrefValue:
    """Column j of a matrix, as a vector view."""
    return MemrefValue(m.type, memref_element(e.b, m, [0, j]), m.shape, m.stride)
