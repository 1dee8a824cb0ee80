"""Emission of the blocked GEMM's helpers: `tile.pack` (copying a block of op(X) into
panel-major scratch), `tile.scale` (C := beta * C before the K blocks) and `tile.min`.

Packing converts to the target buffer's element type, so a nanokernel reading packed panels
always sees its compute type. Where the rows of op(X) are contiguous, they are copied with
(masked) vector loads and stores: column by column of the block for short panels, panel by
panel for tall ones; otherwise panel by panel, element by element or by in-register
transposes. `.pairs` (bf16) interleaves two columns into each VNNI pair row of a panel, so
the `vdpbf16ps` nanokernels load A's pairs as they are instead of interleaving them at every
column of tiles.

The pack's loops are closed to LLVM's loop vectorizer: their vectors are written here, and
what it found to vectorise (the element copies of K tails and partial panels) ran no faster
while adding a fifth to the compile time of a dynamic gemm (docs/benchmarks.md).
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from llvmlite import ir

from nanotc.codegen.llvm import vector as vec
from nanotc.codegen.llvm.blas_vector import VECTOR_TYPES, VectorLoops
from nanotc.codegen.llvm.emitter import FunctionEmitter, emits
from nanotc.codegen.llvm.helpers import (
    add,
    as_value,
    convert,
    div,
    element_ptr,
    for_range,
    load_scalar,
    memref_element,
    minimum,
    mul,
)
from nanotc.codegen.llvm.output import OutputUpdate, compute_type, update_output, write_output
from nanotc.codegen.llvm.types import (
    I16,
    I32,
    Dim,
    MemrefValue,
    const,
    memory_type,
    register_type,
)
from nanotc.ir.instructions import Transpose
from nanotc.ir.tile import TileMin, TilePack, TileScale
from nanotc.ir.types import ScalarType
from nanotc.ir.values import Constant

# a panel column up to this long (A's panels of mr rows: up to four lines on AVX-512) is
# packed column by column of the block (`_PackedBlock.copy_by_columns`)
SHORT_PANEL_BYTES = 256


@emits(TileMin)
def _min(e: FunctionEmitter, inst: TileMin) -> None:
    x, y = e.index_value(inst.lhs), e.index_value(inst.rhs)
    e.define(inst.result, as_value(e.b, minimum(e.b, x, y)))


@emits(TileScale)
def _scale(e: FunctionEmitter, inst: TileScale) -> None:
    """C := 0 * 0 + beta * C through the common output update (so beta = 0 writes zeros
    without reading C), with full vectors where C's columns are contiguous. One pass over C,
    before or instead of a gemm's blocks: its loops are not unrolled (the copies only added
    compile time to dynamic gemms)."""
    c: MemrefValue = e.value(inst.c)
    ct = compute_type(c.type.element)
    zero = ir.Constant(register_type(ct), 0)

    def columns(u: OutputUpdate) -> None:
        b = e.b
        with for_range(b, 0, c.shape[1], name="j", unroll=False) as j:
            column = MemrefValue(c.type, memref_element(b, c, [0, j]), c.shape, c.stride)
            if c.stride[0] == 1 and ct in VECTOR_TYPES:
                v = VectorLoops(e, ct, unroll=False)
                v.each(c.shape[0], lambda i, mask: v.write(u, column, i, vec.zeros(v.type), mask))
            else:
                with for_range(b, 0, c.shape[0], unroll=False) as i:
                    write_output(b, u, memref_element(b, column, [i, 0]), zero)

    update_output(e, inst.beta, Constant(0, ct), False, c, columns)


@emits(TilePack)
def _pack(e: FunctionEmitter, inst: TilePack) -> None:
    b = e.b
    source: MemrefValue = e.value(inst.source)
    target: MemrefValue = e.value(inst.target)
    x = _PackedBlock(e, source, target, inst)
    panels = div(b, add(b, x.rows, inst.panel - 1), inst.panel)
    if inst.pairs:
        _pack_pairs(x, panels)
        return
    if x.row_stride == 1 and inst.panel * x.src_t.size <= SHORT_PANEL_BYTES:
        x.copy_by_columns()
        return
    with for_range(b, 0, panels, name="panel", vectorize=False, unroll=False) as q:
        first_row = b.mul(q, const(inst.panel))
        valid = b.sub(as_value(b, x.rows), first_row)
        if x.row_stride == 1:
            x.copy_panel(first_row, valid)
        elif x.transposes_by_vectors():
            whole = b.icmp_signed(">=", valid, const(inst.panel))
            with b.if_else(whole, likely=True) as (full, partial):
                with full:
                    x.transpose_panel(first_row)
                with partial:
                    x.copy_panel_elements(first_row, 0, valid)
        else:
            x.copy_panel_elements(first_row, 0, valid)


def _pack_pairs(x: _PackedBlock, panels: Dim) -> None:
    """VNNI panels: per panel and K pair, the pair's two columns interleaved (the second
    zero past an odd K), rows past the block zero."""
    b = x.b
    pairs = div(b, add(b, x.cols, 1), 2)
    with for_range(b, 0, panels, name="panel", vectorize=False) as q:
        first_row = b.mul(q, const(x.panel))
        valid = b.sub(as_value(b, x.rows), first_row)
        with for_range(b, 0, pairs, name="pair", vectorize=False) as p:
            offset = b.add(b.mul(first_row, b.mul(as_value(b, pairs), const(2))),
                           b.mul(p, const(2 * x.panel)))  # fmt: skip
            dst = element_ptr(b, x.target.ptr, x.dst_t, offset)
            k = b.mul(p, const(2))
            if x.row_stride == 1:
                x.interleave_vectors(first_row, k, dst, valid)
            else:
                x.interleave_elements(first_row, k, dst, valid)


class _PackedBlock:
    """Addresses of one panel column in op(source) and in the packing buffer."""

    def __init__(self, e: FunctionEmitter, source: MemrefValue, target: MemrefValue,
                 inst: TilePack):  # fmt: skip
        b = self.b = e.b
        self.e, self.source, self.target, self.panel = e, source, target, inst.panel
        self.src_t, self.dst_t = source.type.element, target.type.element
        row_mode, col_mode = (1, 0) if inst.trans is Transpose.T else (0, 1)
        self.row_stride = source.stride[row_mode]
        self.col_stride = source.stride[col_mode]
        self.rows, self.cols = e.dim(inst.rows), e.dim(inst.cols)
        corner = add(
            b, mul(b, e.dim(inst.row), self.row_stride), mul(b, e.dim(inst.col), self.col_stride)
        )
        self.base = element_ptr(b, source.ptr, self.src_t, corner)

    def source_column(self, first_row: ir.Value, k: ir.Value) -> ir.Value:
        b = self.b
        offset = add(b, mul(b, first_row, self.row_stride), mul(b, k, self.col_stride))
        return element_ptr(b, self.base, self.src_t, offset)

    def target_column(self, first_row: ir.Value, k: ir.Value) -> ir.Value:
        """Panel q starts at q*panel*cols; its column k at + k*panel."""
        b = self.b
        offset = b.add(b.mul(first_row, as_value(b, self.cols)), b.mul(k, const(self.panel)))
        return element_ptr(b, self.target.ptr, self.dst_t, offset)

    def copy_by_columns(self) -> None:
        """Contiguous rows in short panels (A's, mr rows), column by column of the block:
        each column's whole panels, then the last panel's rows under a mask. A column is then
        one run of the source, which the hardware prefetchers follow; panel by panel, every
        column gave one line of a panel, each a stride of the leading dimension apart (a
        page or more at W1's sizes), and A's pack ran at about 3 GB/s (2048x512x2048: 9% of
        the time). Zen 3, one thread, paired against panel by panel: W1's kernel f32 2048^3
        1.03-1.05x, 2048x512x2048 1.04-1.07x, 1024^3 1.02x, f64 2048^3 1.07x; W3's packed
        shapes 0.98-1.07x."""
        b = self.b
        whole = div(b, self.rows, self.panel)
        panels = for_range(b, 0, whole, name="panel", vectorize=False, unroll=False)
        with self._columns() as k, panels as q:
            self._copy_column(b.mul(q, const(self.panel)), k, None)
        first_row = as_value(b, mul(b, whole, self.panel))
        valid = b.sub(as_value(b, self.rows), first_row)
        with b.if_then(b.icmp_signed(">", valid, const(0))), self._columns() as k:
            self._copy_column(first_row, k, valid)

    def copy_panel(self, first_row: ir.Value, valid: ir.Value) -> None:
        """Contiguous rows in a tall panel (B's, kc rows: each column a long run already),
        column by column of the panel: unmasked where the panel is whole (more than eight
        masks would not stay in k registers)."""
        whole = self.b.icmp_signed(">=", valid, const(self.panel))
        with self.b.if_else(whole, likely=True) as (full, partial):
            with full, self._columns() as k:
                self._copy_column(first_row, k, None)
            with partial, self._columns() as k:
                self._copy_column(first_row, k, valid)

    def _columns(self) -> AbstractContextManager[ir.Value]:
        return for_range(self.b, 0, self.cols, name="k", vectorize=False, unroll=False)

    def _copy_column(self, first_row: ir.Value, k: ir.Value, valid: ir.Value | None) -> None:
        """Column k of the panel from `first_row` (its `valid` rows, all where None)."""
        src, dst = self.source_column(first_row, k), self.target_column(first_row, k)
        self.copy_vectors(src, dst, valid)

    def copy_vectors(self, src: ir.Value, dst: ir.Value, valid: ir.Value | None) -> None:
        b, lanes = self.b, self.e.state.target.lanes(self.dst_t)
        for v in range(0, self.panel, lanes):
            width = min(lanes, self.panel - v)
            t_out = vec.vector_type(register_type(self.dst_t), width)
            mask = None if valid is None else vec.dynamic_mask(b, width, v, valid)
            ptr = element_ptr(b, src, self.src_t, v)
            loaded = vec.load(b, vec.memory_vector(self.src_t, width), ptr, mask, self.src_t.size)
            out = element_ptr(b, dst, self.dst_t, v)
            if self.src_t != self.dst_t:  # bf16 stays in its 16 bits for vdpbf16ps
                loaded = vec.to_register(b, loaded, self.src_t, t_out)
            b.store(loaded, out, align=self.dst_t.size)

    def _second_column(self, k: ir.Value) -> tuple[ir.Value, ir.Value]:
        """Column k + 1 where it is inside the block (else k, whose values the caller
        replaces by zeros), and whether it is inside."""
        b = self.b
        following = b.add(k, const(1))
        inside = b.icmp_signed("<", following, as_value(b, self.cols))
        return b.select(inside, following, k), inside

    def interleave_vectors(self, first_row: ir.Value, k: ir.Value, dst: ir.Value,
                           valid: ir.Value) -> None:  # fmt: skip
        """One VNNI pair row from columns k and k + 1 with (masked) vector loads, half a
        register of rows at a time."""
        b, lanes = self.b, self.e.state.target.lanes(ScalarType.F32)
        second, inside = self._second_column(k)
        for v in range(0, self.panel, lanes):
            width = min(lanes, self.panel - v)
            half = vec.vector_type(I16, width)
            mask = vec.dynamic_mask(b, width, v, valid)
            row = b.add(first_row, const(v))
            low = vec.load(b, half, self.source_column(row, k), mask, 2)
            high = vec.load(b, half, self.source_column(row, second), mask, 2)
            high = b.select(inside, high, vec.zeros(half))
            b.store(vec.interleave(b, low, high), element_ptr(b, dst, self.dst_t, 2 * v), align=2)

    def interleave_elements(self, first_row: ir.Value, k: ir.Value, dst: ir.Value,
                            valid: ir.Value) -> None:  # fmt: skip
        """One VNNI pair row element by element (rows of op(X) apart in memory)."""
        b = self.b
        second, inside = self._second_column(k)
        rows = as_value(b, minimum(b, valid, self.panel))
        zero = ir.Constant(I16, 0)
        with for_range(b, 0, rows, name="row", vectorize=False) as i:
            row = b.add(first_row, i)
            low = b.load(self.source_column(row, k), typ=I16)
            high = b.select(inside, b.load(self.source_column(row, second), typ=I16), zero)
            at = b.mul(i, const(2))
            b.store(low, element_ptr(b, dst, self.dst_t, at))
            b.store(high, element_ptr(b, dst, self.dst_t, b.add(at, const(1))))
        with for_range(b, rows, self.panel, name="pad", vectorize=False, unroll=False) as i:
            b.store(ir.Constant(I32, 0), element_ptr(b, dst, self.dst_t, b.mul(i, const(2))))

    def copy_panel_elements(self, first_row: ir.Value, first_col: Dim, valid: ir.Value) -> None:
        # unrolled, this loop repeats the row and pad loops inside it: a quarter of the code
        # generation time of a dynamic gemm, for an edge path that runs no faster
        with for_range(
            self.b, first_col, self.cols, name="column", vectorize=False, unroll=False
        ) as k:
            src, dst = self.source_column(first_row, k), self.target_column(first_row, k)
            self.copy_elements(src, dst, valid)

    def transposes_by_vectors(self) -> bool:
        """op(X)'s columns are contiguous (B^T of a column-major B): whole panels are
        transposed in registers, `lanes` columns by `lanes` rows at a time."""
        return (
            self.col_stride == 1
            and self.src_t == self.dst_t
            and self.src_t.bits in (32, 64)
            and self.e.state.target.vector_bits >= 256
        )

    def transpose_panel(self, first_row: ir.Value) -> None:
        """A whole panel: for each chunk of `lanes` columns (K), load `lanes` rows of op(X)
        as vectors along K, transpose them with shuffles, and store each K step's row
        segment; the last K columns are copied element by element.

        A panel of whole vectors (`lanes` rows a group, A's 64-row f32 panels) takes its
        groups in a loop, each stored as soon as it is transposed: unrolled, with every
        group's vectors live at once, the pack spilled 40 vectors a chunk, and its shuffles
        took a third of the code generation of a transposed f32 gemm. Other panels store the
        segments in address order, each a whole vector: a panel narrower than its vectors
        (nr 6 of 8 f32 lanes) spills into the next segment, which is stored after it. Only
        the chunk's last segment is masked, its next one not yet in order: with every
        segment of a 6-row f32 panel masked, the pack's vmaskmovps stores took 6.5% of the
        time samples of f32 1024^3 with B packed on Zen 3."""
        b, lanes = self.b, self.e.state.target.lanes(self.dst_t)
        main = b.mul(div(b, as_value(b, self.cols), lanes), const(lanes))
        with for_range(b, 0, main, step=lanes, name="kv", vectorize=False) as k:
            if self.panel % lanes == 0:
                groups = for_range(b, 0, self.panel, step=lanes, name="group", vectorize=False,
                                   unroll=False)  # fmt: skip
                with groups as group:
                    self._store_whole_group(first_row, group, k, lanes)
            else:
                self._store_segments(first_row, k, lanes)
        self.copy_panel_elements(first_row, main, const(self.panel))

    def _store_whole_group(self, first_row: ir.Value, group: ir.Value, k: ir.Value,
                           lanes: int) -> None:  # fmt: skip
        """Rows group..group+lanes-1 of the panel at K steps k..k+lanes-1, transposed."""
        b = self.b
        t = vec.vector_type(register_type(self.src_t), lanes)
        row = self.source_column(b.add(first_row, group), k)
        rows = []
        for _ in range(lanes):
            rows.append(b.load(row, typ=t, align=self.src_t.size))
            row = element_ptr(b, row, self.src_t, self.row_stride)
        for kk, segment in enumerate(vec.transpose(b, rows)):
            column = self.target_column(first_row, b.add(k, const(kk)))
            vec.store(b, segment, element_ptr(b, column, self.dst_t, group), None, self.dst_t.size)

    def _store_segments(self, first_row: ir.Value, k: ir.Value, lanes: int) -> None:
        """The panel's rows at K steps k..k+lanes-1, transposed, stored in address order;
        masked to the panel's rows where a whole vector would reach past the chunk's columns
        (the last segment, and those of a panel narrower than half a vector: a 1-row panel's
        16th-last segment reached 15 elements past the packed buffer)."""
        b = self.b
        groups = range(0, self.panel, lanes)
        transposed = [self._transposed_group(first_row, group, k, lanes) for group in groups]
        for kk in range(lanes):
            column = self.target_column(first_row, b.add(k, const(kk)))
            for group, outs in zip(groups, transposed):
                width = min(lanes, self.panel - group)
                within = kk * self.panel + group + lanes <= lanes * self.panel
                mask = None if within else vec.static_mask(lanes, width)
                dst = element_ptr(b, column, self.dst_t, group)
                vec.store(b, outs[kk], dst, mask, self.dst_t.size)

    def _transposed_group(self, first_row: ir.Value, group: int, k: ir.Value,
                          lanes: int) -> list[ir.Value]:  # fmt: skip
        """Rows group.. of the panel (at most `lanes`, zeros past the panel) at K steps
        k..k+lanes-1, as one vector per K step."""
        width = min(lanes, self.panel - group)
        rows = [self._source_vector(first_row, group + i, k, lanes) for i in range(width)]
        rows += [vec.zeros(rows[0].type)] * (lanes - width)
        return vec.transpose(self.b, rows)

    def _source_vector(self, first_row: ir.Value, i: int, k: ir.Value, lanes: int) -> ir.Value:
        b = self.b
        row = self.source_column(b.add(first_row, const(i)), k)
        t = vec.vector_type(register_type(self.src_t), lanes)
        return b.load(row, typ=t, align=self.src_t.size)

    def copy_elements(self, src: ir.Value, dst: ir.Value, valid: ir.Value) -> None:
        """Rows below `valid` copied one by one, the rest of the panel column zeroed. Off the
        hot path (K tails of transposed panels, rows past a partial panel) and closed to
        LLVM's unroller too, so that a gemm's module needs none of LLVM's loop passes
        (`helpers.LoopCensus`): the dynamic `.t.n` and `.t.t` gemms ran the same either way
        (docs/benchmarks.md, thirty-sixth session)."""
        b = self.b
        rows = as_value(b, minimum(b, valid, self.panel))
        with for_range(b, 0, rows, name="row", vectorize=False, unroll=False) as i:
            ptr = element_ptr(b, src, self.src_t, mul(b, i, self.row_stride))
            if self.src_t == self.dst_t:
                value = b.load(ptr, typ=memory_type(self.src_t))
            else:
                value = convert(b, load_scalar(b, ptr, self.src_t), self.src_t, self.dst_t)
            b.store(value, element_ptr(b, dst, self.dst_t, i))
        zero = ir.Constant(memory_type(self.dst_t), 0)
        with for_range(b, rows, self.panel, name="pad", vectorize=False, unroll=False) as i:
            b.store(zero, element_ptr(b, dst, self.dst_t, i))
